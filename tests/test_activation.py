"""Activation doors: the post-import hook, the .pth bootstrap and the plugin entry points.

Each door is exercised in a fresh interpreter against a fake ``vllm`` package placed on
PYTHONPATH (the core environment has no real engine), with a test patch registered on it.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from vlm_fastpath import _import_hook

REPO = Path(__file__).resolve().parent.parent
PTH = REPO / "vlm_fastpath.pth"

REGISTER_TEST_PATCH = textwrap.dedent(
    """
    import sys
    from vlm_fastpath.patches.core.base import Patch
    from vlm_fastpath.patches.core.registry import REGISTRY

    class FakeKimi(Patch):
        name = "test-fake-kimi"
        engine = "vllm"
        versions = ">=0.15,<0.25"
        trigger = "vllm.fakemod"
        summary = "test patch"

        def apply(self, ctx):
            ctx.set_attr(sys.modules["vllm.fakemod"], "value", 42)

    REGISTRY.register(FakeKimi())
    """
)


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    pkg = tmp_path / "fakepkgs" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.24.0"\n')
    (pkg / "fakemod.py").write_text("value = 1\n\ndef helper():\n    return 'source kept'\n")
    return pkg.parent


def _run(code: str, pythonpath: list[Path], env: dict[str, str] | None = None,
         flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLM_FASTPATH")}
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, *flags, "-c", code], capture_output=True, text=True, env=full_env,
        timeout=120, cwd=str(pythonpath[0]) if pythonpath else None,
    )


def _pth_dir(tmp_path: Path) -> Path:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(PTH, site_dir / "vlm_fastpath.pth")
    return site_dir


def test_pth_bootstrap_applies_patch_when_engine_imported(tmp_path, fake_vllm) -> None:
    code = (
        f"import site, sys; site.addsitedir({str(_pth_dir(tmp_path))!r})\n"
        "assert 'torch' not in sys.modules and 'numba' not in sys.modules\n"
        "assert 'vlm_fastpath.patches.core.registry' not in sys.modules  # nothing loaded yet\n"
        + REGISTER_TEST_PATCH
        + "import vllm.fakemod, vlm_fastpath, json\n"
        "print(json.dumps([vllm.fakemod.value, vlm_fastpath.status()]))\n"
    )
    proc = _run(code, [fake_vllm, REPO])
    assert proc.returncode == 0, proc.stderr
    value, status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert value == 42
    mine = next(s for s in status if s["name"] == "test-fake-kimi")
    assert mine["status"] == "applied" and mine["engine_version"] == "0.24.0"
    assert "applied: test-fake-kimi" in proc.stderr  # the one INFO line


def test_pth_respects_global_off_switch(tmp_path, fake_vllm) -> None:
    code = (
        f"import site, sys; site.addsitedir({str(_pth_dir(tmp_path))!r})\n"
        "import vllm.fakemod\n"
        "print(vllm.fakemod.value, 'vlm_fastpath' in sys.modules)\n"
    )
    proc = _run(code, [fake_vllm, REPO], env={"VLM_FASTPATH": "0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "False"]


def test_pth_survives_a_broken_install(tmp_path) -> None:
    # -S: no site-packages, and vlm_fastpath is not on the path: the .pth import fails.
    code = f"import site; site.addsitedir({str(_pth_dir(tmp_path))!r}); print('alive')"
    proc = _run(code, [tmp_path], flags=("-S",))
    assert proc.returncode == 0 and proc.stdout.strip() == "alive", proc.stderr


def test_installed_pth_is_active_in_this_environment(fake_vllm) -> None:
    installed = Path(sysconfig.get_paths()["purelib"]) / "vlm_fastpath.pth"
    assert installed.exists(), "make installs vlm_fastpath.pth (ci/install_pth.py)"
    code = (
        "import sys\n"
        "from vlm_fastpath import _import_hook\n"
        "assert _import_hook._FINDER in sys.meta_path, 'bootstrap did not install the hook'\n"
        "assert 'torch' not in sys.modules and 'numba' not in sys.modules\n"
        + REGISTER_TEST_PATCH
        + "import vllm.fakemod; print(vllm.fakemod.value)\n"
    )
    proc = _run(code, [fake_vllm])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_vllm_entry_point_is_reentrant(fake_vllm) -> None:
    code = (
        REGISTER_TEST_PATCH
        + "from importlib import metadata\n"
        "eps = [e for e in metadata.entry_points(group='vllm.general_plugins')\n"
        "       if e.name == 'vlm_fastpath']\n"
        "assert len(eps) == 1, eps\n"
        "register = eps[0].load()\n"
        "register(); register()\n"
        "import vllm.fakemod\n"
        "register()\n"
        "print(vllm.fakemod.value)\n"
    )
    proc = _run(code, [fake_vllm, REPO])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"
    assert proc.stderr.count("applied: test-fake-kimi") == 1


def test_entry_points_are_declared() -> None:
    groups = {
        "vllm.general_plugins": "vlm_fastpath.activation:register_vllm",
        "sglang.srt.plugins": "vlm_fastpath.activation:register_sglang",
    }
    for group, value in groups.items():
        found = [e.value for e in metadata.entry_points(group=group) if e.name == "vlm_fastpath"]
        assert found == [value]


def test_post_import_hook_keeps_the_module_intact(tmp_path) -> None:
    mod_dir = tmp_path / "hooked"
    mod_dir.mkdir()
    (mod_dir / "hookedmod_alpha.py").write_text("VALUE = 7\n\ndef f():\n    return 3\n")
    sys.path.insert(0, str(mod_dir))
    seen: list[str] = []
    try:
        already = _import_hook.when_imported("hookedmod_alpha", seen.append)
        assert not already and seen == []
        import hookedmod_alpha  # type: ignore[import-not-found]

        assert seen == ["hookedmod_alpha"]
        assert hookedmod_alpha.VALUE == 7
        assert "return 3" in inspect.getsource(hookedmod_alpha.f)
        # A second watch on an imported module fires at once.
        assert _import_hook.when_imported("hookedmod_alpha", seen.append)
        assert seen == ["hookedmod_alpha", "hookedmod_alpha"]
    finally:
        sys.path.remove(str(mod_dir))
        sys.modules.pop("hookedmod_alpha", None)


def test_callback_errors_never_break_the_import(tmp_path) -> None:
    mod_dir = tmp_path / "hooked2"
    mod_dir.mkdir()
    (mod_dir / "hookedmod_beta.py").write_text("VALUE = 8\n")
    sys.path.insert(0, str(mod_dir))

    def boom(name: str) -> None:
        raise RuntimeError("callback failure")

    try:
        _import_hook.when_imported("hookedmod_beta", boom)
        import hookedmod_beta  # type: ignore[import-not-found]

        assert hookedmod_beta.VALUE == 8
    finally:
        sys.path.remove(str(mod_dir))
        sys.modules.pop("hookedmod_beta", None)
