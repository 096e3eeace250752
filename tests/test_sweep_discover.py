"""The sweep finds releases on its own (ci/sweep/discover.py) and ships what it verified.

Without the registry or engine envs: what counts as a release and as recorded, the fail-soft
registry read, the recipe written for a new release, the one home of the code fingerprint, and
verified.json (rewritten only when its content changes, covered by the wheel's sources hash).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_fastpath.patches.core import fingerprint

ROOT = Path(__file__).resolve().parents[1]
_BARE = ("behaviour", "coverage_page", "discover", "envs", "probe", "release_source",
         "static_vllm")


def _load_run():
    """ci/sweep/run.py with its bare-named helpers, leaving sys.path and sys.modules as found
    (ci/ is no package and must not shadow installed names)."""
    saved, before = list(sys.path), set(sys.modules)
    try:
        spec = importlib.util.spec_from_file_location("_sweep_run", ROOT / "ci/sweep/run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
        for name in set(sys.modules) - before:
            if name in _BARE:
                del sys.modules[name]
    return module


run = _load_run()
discover = run.discover
envs = run.envs

PIP_OUTPUT = """WARNING: pip index is currently an experimental command.
vllm (0.35.0)
Available versions: 0.35.1rc1, 0.35.0, 0.35.0.dev3, 0.34.0+cpu, 0.34.0, 0.33.0, 0.15.0, \
0.14.1, 0.10.1.1
"""


def _pip(stdout: str, rc: int = 0, stderr: str = ""):
    def pip(*args: str) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(["pip", *args], rc, stdout, stderr)
    return pip


def test_registry_list_is_final_releases_from_the_floor() -> None:
    releases, why = discover.registry_releases("vllm", _pip(PIP_OUTPUT))
    assert (releases, why) == (["0.15.0", "0.33.0", "0.34.0", "0.35.0"], "")
    assert discover.in_scope("sglang", "0.5.12.post1")
    assert not discover.in_scope("sglang", "0.5.11")
    assert not discover.in_scope("sglang", "0.5.24rc0")


def test_an_unreachable_registry_is_a_reason_not_an_error() -> None:
    releases, why = discover.registry_releases(
        "vllm", _pip("", 1, "WARNING: retrying\nERROR: No matching distribution found for vllm"))
    assert releases is None and why == "ERROR: No matching distribution found for vllm"

    def broken(*args: str) -> subprocess.CompletedProcess:
        raise subprocess.TimeoutExpired(["pip"], 120)

    releases, why = discover.registry_releases("vllm", broken)
    assert releases is None and "TimeoutExpired" in why


def test_recorded_means_a_table_row_a_patch_release_row_or_not_installable() -> None:
    vllm = discover.recorded("vllm")
    assert vllm["0.33.0"] == "table"
    assert vllm["0.27.0"] == "patch release of 0.27.1"  # ci/sweep/vllm-patch-releases.md
    assert "0.14.1" not in vllm
    assert discover.recorded("sglang")["0.5.12.post1"] == "table"
    # every recorded release is on the registry's side of the floor
    assert all(discover.in_scope(e, r) for e in ("vllm", "sglang") for r in discover.recorded(e))


def test_unrecorded_releases_and_hidden_ones() -> None:
    registry = ["0.27.0", "0.33.0", "0.35.0"]
    assert discover.unrecorded("vllm", registry, set()) == ["0.35.0"]
    assert discover.unrecorded("vllm", registry, {"0.33.0", "0.27.0"}) == [
        "0.27.0", "0.33.0", "0.35.0"]
    assert discover.unrecorded("vllm", registry, {"9.9.9"}) == ["0.35.0"]  # not recorded: no-op


def test_hidden_from_the_environment_and_the_command_line(monkeypatch) -> None:
    monkeypatch.setenv("SWEEP_HIDE", "0.33.0, 0.32.0,")
    assert discover.hidden(["0.31.0"]) == {"0.31.0", "0.32.0", "0.33.0"}


def test_a_patch_release_is_compared_with_its_minors_tested_release() -> None:
    tested = ["0.25.1", "0.26.0", "0.33.0"]
    assert discover.tested_release_of_minor("0.25.0", tested) == "0.25.1"
    assert discover.tested_release_of_minor("0.33.2", tested) == "0.33.0"
    assert discover.tested_release_of_minor("0.35.0", tested) is None
    assert discover.tested_release_of_minor("0.26.0", tested) is None  # not against itself


METADATA = """Metadata-Version: 2.1
Name: vllm
Version: 0.35.0
Requires-Dist: transformers<5.24,>=5.16.1
Requires-Dist: tokenizers>=0.24
Requires-Dist: xgrammar==0.2.9; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: apache-tvm-ffi>=0.1.10
Requires-Dist: gguf>=0.20
Requires-Dist: torch==2.15.0
Requires-Dist: flashinfer-python==0.7.3
Requires-Dist: numba==0.65.0
Requires-Dist: openai==2.8.0
Requires-Dist: pytest; extra == "test"
Requires-Dist: protobuf==7.36.1; platform_machine == "s390x"
"""
TEMPLATE = ["# vLLM 0.34.0", "vllm==0.34.0", "apache-tvm-ffi==0.1.11", "xgrammar==0.2.8",
            "gguf==0.19.0", "hypothesis==6.170.17"]
BASE = ["numba==0.65.0", "tokenizers==0.23.3", "torch==2.14.1+cu130", "transformers==5.19.0",
        "protobuf==6.33.5", "openai==3.57.0"]
REGISTRY = {"transformers": ["5.25.0", "5.23.1", "5.23.0rc1", "5.19.0"],
            "tokenizers": ["0.24.1", "0.24.0", "0.23.3"], "gguf": ["0.21.0", "0.20.0"]}


def test_a_new_release_gets_a_recipe_from_its_wheel() -> None:
    lines, notes = discover.pins_for("vllm", "0.35.0", METADATA, TEMPLATE, BASE, REGISTRY.get)
    assert lines == [
        "vllm==0.35.0",
        "apache-tvm-ffi==0.1.11",  # the last recipe's pin still fits
        "xgrammar==0.2.9",  # the wheel's exact pin
        "gguf==0.21.0",  # the last recipe's pin no longer fits: the newest that does
        "tokenizers==0.24.1",  # the base's excluded: the newest that fits
        "transformers==5.23.1",  # what a fresh install gets (the newest final that fits)
    ]  # hypothesis (not the wheel's), torch (the base's stays), numba (fits): none
    # openai: the base's newer release stays (2.8.0 over --no-deps would lack httpx)
    assert "openai: the base's 3.57.0 kept over ==2.8.0" in " ".join(notes), notes
    assert any("flashinfer-python==0.7.3" in n and "--no-deps" in n for n in notes), notes
    assert not any("pytest" in n or "protobuf" in n for n in notes), notes


def test_common_pins_stay_and_are_re_pinned_where_the_wheel_names_them() -> None:
    """SGLang's common.txt holds indirect requirements (ipython's) the wheel never names."""
    metadata = "Name: sglang\nRequires-Dist: gguf>=0.20\nRequires-Dist: orjson\n"
    common = ["# every SGLang env", "gguf==0.19.0", "traitlets==5.16.1", "orjson==3.13.0"]
    template, _ = discover.template_for("sglang", "0.5.24")
    assert template == (ROOT / "ci/sglang/sglang-0.5.23.txt").read_text().splitlines()
    lines, _ = discover.pins_for("sglang", "0.5.24", metadata, template, BASE, REGISTRY.get,
                                 common)
    assert lines == ["sglang==0.5.24", "gguf==0.21.0", "traitlets==5.16.1", "orjson==3.13.0"]
    assert discover.template_for("sglang", "0.5.24")[1] == (
        ROOT / "ci/sglang/common.txt").read_text().splitlines()
    assert discover.template_for("vllm", "0.35.0")[1] == []


def test_nothing_that_fits_is_a_note_not_a_pin() -> None:
    lines, notes = discover.pins_for("vllm", "0.35.0", METADATA, TEMPLATE, BASE, {}.get)
    assert "gguf==0.19.0" not in lines and "xgrammar==0.2.9" in lines
    assert any(n.startswith("gguf: nothing on the registry fits") for n in notes), notes


def test_the_recipe_is_written_to_the_cache_and_used_there(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_ENV_CACHE", str(tmp_path / "envs"))
    generated = envs.generated_pins() / "vllm-0.99.0.txt"
    assert tmp_path in generated.parents
    assert envs.spec("vllm-0.99.0").pins == (ROOT / "ci/engines/vllm-0.99.0.txt",)
    generated.parent.mkdir(parents=True)
    generated.write_text("vllm==0.99.0\n")
    assert envs.spec("vllm-0.99.0").pins == (generated,)
    # a recorded release keeps its checkout pins unless the sweep runs it as hidden
    (envs.generated_pins() / "vllm-0.33.0.txt").write_text("vllm==0.33.0\n")
    assert envs.spec("vllm-0.33.0").pins == (ROOT / "ci/engines/vllm-0.33.0.txt",)
    monkeypatch.setattr(envs, "PREFER_GENERATED", {"vllm-0.33.0"})
    assert envs.spec("vllm-0.33.0").pins == (envs.generated_pins() / "vllm-0.33.0.txt",)


def test_modules_hash_is_code_fingerprint(tmp_path, monkeypatch) -> None:
    """The sweep's hash of a cached env's files equals what the installed package computes."""
    base = tmp_path / "base" / envs.SITE
    site = tmp_path / "env" / envs.SITE
    (site / "eng/models").mkdir(parents=True)
    (base / "basepkg").mkdir(parents=True)
    (site / "eng/__init__.py").write_text("")
    (site / "eng/models/__init__.py").write_text("# package\n")
    (site / "eng/models/kimi.py").write_text("X = 1\n")
    (base / "basepkg/__init__.py").write_text("Y = 2\n")
    (site / "eng/dup").mkdir()  # a package and a module of one name: the import finds the package
    (site / "eng/dup/__init__.py").write_text("PACKAGE = 1\n")
    (site / "eng/dup.py").write_text("MODULE = 1\n")
    (site / "00-vlm-fastpath-base.pth").write_text(
        f"import site; site.addsitedir({str(base)!r})\n")
    modules = ["eng.models.kimi", "eng.models", "eng.absent", "eng.dup", "basepkg"]
    monkeypatch.syspath_prepend(str(base))
    monkeypatch.syspath_prepend(str(site))
    for name in ("eng", "eng.models", "eng.dup", "basepkg"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    ours = run.modules_hash(tmp_path / "env", modules)
    assert ours == fingerprint.code_fingerprint(modules)
    (site / "eng/models/kimi.py").write_text("X = 2\n")
    assert run.modules_hash(tmp_path / "env", modules) != ours


def _result(**kw):
    out = {"ok": True, "applied": ["p1", "p2"], "fingerprints": {"p1": "a" * 16, "p2": "b" * 16},
           "gapped": [], "problems": [], "steps": {}}
    out.update(kw)
    return out


def test_verified_data_keeps_applied_verified_patches_of_recorded_releases() -> None:
    data = run.verified_data({
        ("vllm", "0.33.0"): _result(),
        ("vllm", "0.9.0"): _result(applied=["p1"]),
        ("vllm", "0.32.0"): _result(gapped=["p2"]),  # its behaviour test could not run
        ("vllm", "0.31.0"): _result(ok=False),
        ("vllm", "0.35.0"): _result(new=True),  # found, not recorded: not verified yet
        ("sglang", "0.5.23"): _result(applied=["s1"], fingerprints={"s1": "c" * 16}),
    })
    assert data == {
        "sglang": {"s1": {"0.5.23": "c" * 16}},
        "vllm": {"p1": {"0.9.0": "a" * 16, "0.32.0": "a" * 16, "0.33.0": "a" * 16},
                 "p2": {"0.33.0": "b" * 16}},
    }
    assert list(data["vllm"]["p1"]) == ["0.9.0", "0.32.0", "0.33.0"]  # version order


def test_verified_json_is_rewritten_only_when_it_changes(tmp_path) -> None:
    path = tmp_path / "verified.json"
    data = {"vllm": {"p1": {"0.33.0": "a" * 16}}}
    assert run.write_verified(data, path)
    stamp = path.stat().st_mtime_ns
    assert not run.write_verified(json.loads(path.read_text()), path)
    assert path.stat().st_mtime_ns == stamp
    assert run.write_verified({}, path) and json.loads(path.read_text()) == {}


def test_the_wheel_is_rebuilt_when_verified_json_changes(tmp_path, monkeypatch) -> None:
    for name in ("pyproject.toml", "setup.py", "vlm_fastpath.pth", "vlm_fastpath/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    shipped = tmp_path / "vlm_fastpath/patches/core/verified.json"
    shipped.parent.mkdir(parents=True)
    shipped.write_text("{}\n")
    monkeypatch.setattr(envs, "ROOT", tmp_path)
    monkeypatch.setattr(envs, "VERIFIED", shipped)
    with_data, without = envs._sources_hash(), envs._sources_hash(data=False)
    shipped.write_text('{"vllm": {}}\n')
    assert envs._sources_hash() != with_data  # the wheel ships it: rebuilt
    assert envs._sources_hash(data=False) == without  # the sweep's own keys: no re-run loop


def test_verified_json_is_package_data_of_the_fingerprint_module() -> None:
    assert envs.VERIFIED == fingerprint.VERIFIED_FILE == run.VERIFIED


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_hidden_release_without_a_record(engine: str) -> None:
    assert not discover.unrecorded(engine, [], set())


def _fake_site(root: Path, kimi: str) -> Path:
    """A site-packages holding the vLLM modules the patches touch (one of them given)."""
    site = root / envs.SITE
    for module in ("transformers_utils/processor", "model_executor/models/kimi_k25",
                   "multimodal/media/image", "multimodal/processing/context"):
        path = site / "vllm" / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kimi if module.endswith("kimi_k25") else f"# {module}\n")
    return site


def test_a_new_patch_release_with_the_same_files_costs_no_env(tmp_path, monkeypatch) -> None:
    table = run.coverage.load("vllm")
    monkeypatch.setattr(run.discover, "download_wheel", lambda *a: _fake_site(
        tmp_path / "new", "KIMI = 1\n"))
    monkeypatch.setattr(run.envs, "build", lambda name: (
        tmp_path / "tested" if name == "vllm-0.33.0" else pytest.fail(name)))
    _fake_site(tmp_path / "tested", "KIMI = 1\n")
    monkeypatch.setattr(run, "sweep_release", lambda *a, **k: pytest.fail("env built"))
    result = run.run_new("vllm", "0.33.1", table, set(), force=False)
    assert result["ok"] and result["new"] and result["same_as"] == "0.33.0"
    assert result["statuses"] == {p: list(v) for p, v in table["0.33.0"].items()}
    assert "identical to 0.33.0 in all 4 files" in result["steps"]["files"]


def test_a_new_patch_release_with_other_files_gets_a_full_run(tmp_path, monkeypatch) -> None:
    table = run.coverage.load("vllm")
    monkeypatch.setenv("VLM_FASTPATH_ENV_CACHE", str(tmp_path / "cache/envs"))
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(run.discover, "download_wheel", lambda *a: _fake_site(
        tmp_path / "new", "KIMI = 2\n"))
    monkeypatch.setattr(run.envs, "build", lambda name: tmp_path / "tested")
    _fake_site(tmp_path / "tested", "KIMI = 1\n")
    pins = []
    monkeypatch.setattr(run.discover, "write_pins", lambda engine, release, wheel, target, v: (
        pins.append(target), target.parent.mkdir(parents=True, exist_ok=True),
        target.write_text(f"vllm=={release}\n")))
    calls = []

    def fake_sweep(engine, release, rows, run_behaviour, new=False):
        calls.append((release, rows, run_behaviour, new))
        return {"ok": True, "problems": [], "steps": {"env": "1s"}, "applied": [],
                "statuses": {"p": ["upstream", "why"]}, "new": True}

    monkeypatch.setattr(run, "sweep_release", fake_sweep)
    monkeypatch.setattr(run.envs, "PREFER_GENERATED", set())
    result = run.run_new("vllm", "0.33.1", table, set(), force=False)
    assert calls == [("0.33.1", {}, True, True)]  # no table, behaviour tests on
    assert pins == [run.envs.generated_pins() / "vllm-0.33.1.txt"]
    assert result["steps"]["files"] == "1 of 4 patched files differ from 0.33.0 (kimi_k25)"
    assert (tmp_path / "results/vllm-0.33.1.new.json").exists()
    lines = run.new_lines("sweep vllm 0.33.1", result)
    assert lines[0].startswith("sweep vllm 0.33.1 NEW ok: files 1 of 4")
    assert lines[1:] == ["    p: upstream (why)"]
    # hidden: the minor's tested release is itself, so no comparison; the recipe is generated
    calls.clear()
    run.run_new("vllm", "0.33.0", table, {"0.33.0"}, force=True)
    assert calls and "vllm-0.33.0" in run.envs.PREFER_GENERATED


def _main(tmp_path, monkeypatch, results: dict, argv: list[str], new=()):
    """run.main over the real 0.32.0/0.33.0 rows with the steps faked: (rc, page rewritten,
    verified.json's content or None when it was not written)."""
    tables = {"vllm": {r: run.coverage.load("vllm")[r] for r in ("0.32.0", "0.33.0")},
              "sglang": {}}
    pages: list[str] = []
    monkeypatch.setattr(run.coverage, "load", tables.__getitem__)
    monkeypatch.setattr(run.coverage, "main", lambda argv: pages.append("page"))
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(run, "find_new", lambda engine, only, hide: list(new) if (
        engine == "vllm") else [])
    monkeypatch.setattr(run, "run_new", lambda *a: {"ok": True, "problems": [], "new": True,
                                                    "applied": [], "statuses": {}, "steps": {}})
    monkeypatch.setenv("SWEEP_FORCE", "1")
    monkeypatch.setattr(run, "sweep_release", lambda engine, release, *a, **k: dict(
        results[release]))
    target = tmp_path / "verified.json"
    target.unlink(missing_ok=True)
    monkeypatch.setattr(run, "VERIFIED", target)
    rc = run.main(argv)
    return rc, bool(pages), json.loads(target.read_text()) if target.exists() else None


def test_verified_json_after_a_full_clean_pass_only(tmp_path, monkeypatch) -> None:
    ok = {"0.32.0": _result(), "0.33.0": _result(applied=["p1"])}
    assert _main(tmp_path, monkeypatch, ok, ["--jobs", "1"], new=["0.35.0"]) == (0, True, {
        "vllm": {"p1": {"0.32.0": "a" * 16, "0.33.0": "a" * 16}, "p2": {"0.32.0": "b" * 16}}})
    for argv in (["--release", "0.33.0"], ["--engine", "vllm"], ["--no-page"],
                 ["--hide", "0.32.0"]):
        assert _main(tmp_path, monkeypatch, ok, argv)[1:] == (False, None), argv
    failed = {**ok, "0.33.0": _result(ok=False, problems=["x"])}
    assert _main(tmp_path, monkeypatch, failed, []) == (1, False, None)


def _probe_env(monkeypatch, tmp_path, plugin_imports_rc: int, off_rc: int) -> list:
    """sweep_release with a fake env whose import check fails (rc) with the plugin loaded and
    returns ``off_rc`` with VLM_FASTPATH=0; records the commands run."""
    ran: list = []
    monkeypatch.setattr(run.envs, "overlay", lambda name: tmp_path)

    def fake_run(cmd, env=None):
        ran.append((cmd[1:], env))
        if "plugin" in cmd:
            out = {"imports": {"rc": plugin_imports_rc, "output": "vllm: ModuleNotFoundError"},
                   "error": "ImportError: x", "traceback": "tb"}
            return subprocess.CompletedProcess(cmd, 0, "RESULT " + json.dumps(out), "")
        if env == {"VLM_FASTPATH": "0"} and "toggle" not in cmd:
            return subprocess.CompletedProcess(cmd, off_rc, "", "")
        return subprocess.CompletedProcess(cmd, 1, "", "no RESULT")

    monkeypatch.setattr(run, "_run", fake_run)
    return ran


def test_a_new_release_whose_env_lacks_a_package_is_a_finding(tmp_path, monkeypatch) -> None:
    ran = _probe_env(monkeypatch, tmp_path, plugin_imports_rc=1, off_rc=1)
    result = run.sweep_release("vllm", "0.35.0", {}, run_behaviour=True, new=True)
    assert result["ok"] and result["env_failed"] and not result["problems"]
    assert "ModuleNotFoundError" in result["findings"][0]
    assert ran[-1] == (["ci/engines/check_imports.py", "vllm"], {"VLM_FASTPATH": "0"})
    assert "finding: the env lacks" in "\n".join(run.new_lines("sweep vllm 0.35.0", result))


def test_imports_that_fail_only_with_us_fail_a_new_release(tmp_path, monkeypatch) -> None:
    _probe_env(monkeypatch, tmp_path, plugin_imports_rc=1, off_rc=0)
    result = run.sweep_release("vllm", "0.35.0", {}, run_behaviour=True, new=True)
    assert not result["ok"] and any(p.startswith("imports:") for p in result["problems"])
    # a recorded release never gets the benefit of the doubt
    ran = _probe_env(monkeypatch, tmp_path, plugin_imports_rc=1, off_rc=1)
    result = run.sweep_release("vllm", "0.33.0", {}, run_behaviour=True)
    assert not result["ok"] and not any(env == {"VLM_FASTPATH": "0"} and "toggle" not in cmd
                                        for cmd, env in ran)


def test_a_new_release_whose_env_cannot_be_built_is_a_finding(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_ENV_CACHE", str(tmp_path / "cache/envs"))
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(run.discover, "download_wheel", lambda *a: tmp_path / "w.whl")
    monkeypatch.setattr(run.discover, "write_pins", lambda engine, release, wheel, target, v: (
        target.parent.mkdir(parents=True, exist_ok=True), target.write_text("vllm==0.35.0\n")))

    def no_env(name):
        raise RuntimeError("pip install ... failed: No matching distribution for foo==1")

    monkeypatch.setattr(run.envs, "overlay", no_env)
    monkeypatch.setattr(run.envs, "PREFER_GENERATED", set())
    result = run.run_new("vllm", "0.35.0", run.coverage.load("vllm"), set(), force=True)
    assert result["ok"] and result["env_failed"] and not result["problems"]
    assert "No matching distribution" in result["findings"][0]
    assert result["steps"]["env"].startswith("NOT BUILT")


def test_a_tested_release_without_an_env_does_not_stop_a_new_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_ENV_CACHE", str(tmp_path / "cache/envs"))
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    monkeypatch.setattr(run.discover, "download_wheel", lambda *a: tmp_path / "w.whl")
    monkeypatch.setattr(run.discover, "write_pins", lambda engine, release, wheel, target, v: (
        target.parent.mkdir(parents=True, exist_ok=True), target.write_text("vllm==0.33.1\n")))

    def no_env(name):
        raise RuntimeError("pip install vllm==0.33.0 failed")

    monkeypatch.setattr(run.envs, "build", no_env)
    monkeypatch.setattr(run.envs, "PREFER_GENERATED", set())
    monkeypatch.setattr(run, "sweep_release", lambda *a, **k: {
        "ok": True, "problems": [], "steps": {}, "applied": [], "statuses": {}, "new": True})
    result = run.run_new("vllm", "0.33.1", run.coverage.load("vllm"), set(), force=True)
    assert result["ok"] and result["steps"]["files"].startswith("not compared with 0.33.0")
