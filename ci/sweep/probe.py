"""One release, one fresh interpreter: what the sweep asks an engine env (run with its python).

    .envs/<env>/bin/python ci/sweep/probe.py plugin <engine>   entry point -> statuses
    VLM_FASTPATH=0 .envs/<env>/bin/python ci/sweep/probe.py toggle <engine>

``plugin``: the engine's own plugin loader runs our entry point (as ``vllm serve`` or SGLang's
server would), then every module a patch touches is imported; prints each patch's status and
what ``vlm-fastpath doctor --json`` prints in that process (the CLI's own code path), then the
env's import check (one engine import instead of three keeps a release's sweep short).
``toggle``: started with ``VLM_FASTPATH=0``: every patch is disabled and no engine object is
ours; then apply (every applied patch replaced something, a second apply changes nothing),
then revert (every original object back, by identity).
The last stdout line is ``RESULT <json>``; the sweep (ci/sweep/run.py) judges it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _load_plugins(engine: str) -> str:
    if engine == "vllm":
        from vllm.plugins import load_general_plugins

        load_general_plugins()
        return "vllm.plugins.load_general_plugins"
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return "sglang.srt.plugins.load_plugins"


def _modules(engine: str) -> tuple[list[str], dict[str, str]]:
    """Import every module a patch of ``engine`` touches (where the release has it and is not
    older than the patch's range)."""
    from vlm_fastpath.patches import REGISTRY
    from vlm_fastpath.patches.core.decisions import below_range

    names: list[str] = []
    for patch in REGISTRY.patches(engine):
        if below_range(patch):
            continue  # older than its range (its status says so without its module)
        for name in (patch.trigger, *patch.modules):
            if name not in names:
                names.append(name)
    present, errors = [], {}
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except ModuleNotFoundError:
            continue
        try:
            importlib.import_module(name)
            present.append(name)
        except Exception as exc:  # noqa: BLE001 - report, the sweep fails on it
            errors[name] = f"{type(exc).__name__}: {exc}"
    return present, errors


def _snapshot(modules: list[str]) -> dict[str, Any]:
    """Every function, class and class member of the touched modules, by identity."""
    snap: dict[str, Any] = {}
    for name in modules:
        module = sys.modules[name]
        for key, value in list(vars(module).items()):
            if inspect.isfunction(value) or inspect.isclass(value):
                snap[f"{name}.{key}"] = value
                if inspect.isclass(value) and value.__module__ == name:
                    for attr, member in list(vars(value).items()):
                        snap[f"{name}.{key}.{attr}"] = member
    return snap


PACKAGE_DIR = None
ROOT = Path(__file__).resolve().parents[2]


def _is_ours(value: Any) -> bool:
    """Built by vlm-fastpath: code in our package, or a class defined there."""
    global PACKAGE_DIR
    if PACKAGE_DIR is None:
        import vlm_fastpath

        PACKAGE_DIR = str(Path(vlm_fastpath.__file__).resolve().parent)
    func = value
    for attr in ("__func__", "fget"):
        func = getattr(func, attr, func)
    code = getattr(func, "__code__", None)
    if code is not None and str(Path(code.co_filename).resolve()).startswith(PACKAGE_DIR):
        return True
    return inspect.isclass(value) and value.__module__.startswith("vlm_fastpath")


def _statuses(engine: str) -> dict[str, list[str]]:
    from vlm_fastpath.patches import REGISTRY

    return {r.name: [r.status.value, r.reason] for r in REGISTRY.status(engine)}


def plugin(engine: str) -> dict[str, Any]:
    loader = _load_plugins(engine)
    present, errors = _modules(engine)
    from importlib.metadata import entry_points

    group = "vllm.general_plugins" if engine == "vllm" else "sglang.srt.plugins"
    import contextlib
    import io

    from vlm_fastpath.cli import main as cli

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = cli(["doctor", "--json"])
    return {
        "doctor_rc": rc,
        "doctor": json.loads(printed.getvalue()),
        "loader": loader,
        "entry_point": [ep.value for ep in entry_points(group=group)
                        if ep.value.startswith("vlm_fastpath")],
        "modules": present,
        "import_errors": errors,
        "status": _statuses(engine),
    }


def toggle(engine: str) -> dict[str, Any]:
    assert os.environ.get("VLM_FASTPATH") == "0", "run with VLM_FASTPATH=0"
    _load_plugins(engine)
    present, errors = _modules(engine)
    import vlm_fastpath

    originals = _snapshot(present)
    result: dict[str, Any] = {"modules": present, "import_errors": errors}
    result["status_off"] = _statuses(engine)
    result["ours_while_off"] = sorted(k for k, v in originals.items() if _is_ours(v))
    os.environ["VLM_FASTPATH"] = "1"
    vlm_fastpath.apply(engine)
    result["status_on"] = _statuses(engine)
    first = _snapshot(present)
    result["changed"] = sorted(k for k, v in first.items() if originals.get(k) is not v)
    vlm_fastpath.apply(engine)
    second = _snapshot(present)
    result["changed_by_second_apply"] = sorted(
        k for k, v in second.items() if first.get(k) is not v)
    vlm_fastpath.revert(engine)
    after = _snapshot(present)
    result["not_restored"] = sorted(k for k, v in originals.items() if after.get(k) is not v)
    result["left_behind"] = sorted(k for k in after if k not in originals)
    result["status_reverted"] = _statuses(engine)
    return result


IMPORT_CHECKS = {
    "vllm": ("ci/engines/check_imports.py", "vllm"),
    "sglang": ("ci/sglang/check_imports.py",),
}


def import_check(engine: str) -> dict[str, Any]:
    """The env's import check (the script ``make`` runs on every engine env), run here after
    the plugin step instead of in an interpreter of its own: one engine import less per
    release. Returns its exit code and what it printed."""
    import contextlib
    import io
    import runpy

    script, *args = IMPORT_CHECKS[engine]
    printed = io.StringIO()
    argv = sys.argv
    sys.argv = [script, *args]
    code: Any = 0
    try:
        with contextlib.redirect_stdout(printed):
            namespace = runpy.run_path(str(ROOT / script), run_name="__vlm_import_check__")
            code = namespace["main"](*args)  # each check script's main(...) -> rc
    except SystemExit as exc:
        code = exc.code
    except Exception:  # noqa: BLE001 - a broken check script is this release's failure too
        code, printed = 1, io.StringIO(traceback.format_exc())
    finally:
        sys.argv = argv
    return {"rc": int(code or 0), "output": printed.getvalue()[-1500:]}


def main() -> int:
    mode, engine = sys.argv[1], sys.argv[2]
    try:
        result = {"plugin": plugin, "toggle": toggle}[mode](engine)
    except Exception as exc:  # noqa: BLE001 - the sweep reports it as this release's failure
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    if mode == "plugin":
        result["imports"] = import_check(engine)
    print("RESULT " + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
