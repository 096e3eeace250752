"""The wheel holds product code and ``vlm_fastpath.pth`` only: nothing that only tests use."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Product data read at run time: the sweep's verified fingerprints (status reasons).
PACKAGE_DATA = ("vlm_fastpath/patches/core/verified.json",)


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src")
    # Build from a copy: an in-tree build leaves build/ and *.egg-info in the checkout.
    for name in ("pyproject.toml", "setup.py", "README.md", "vlm_fastpath.pth"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "vlm_fastpath", src / "vlm_fastpath",
                    ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300, cwd=src,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("vlm_fastpath-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return sorted(archive.namelist())


def test_only_product_code_and_the_pth(wheel_files: list[str]) -> None:
    allowed_top = {"vlm_fastpath", "vlm_fastpath.pth"}
    for name in wheel_files:
        top = name.split("/")[0]
        assert top in allowed_top or top.endswith(".dist-info"), name
    assert "vlm_fastpath.pth" in wheel_files
    code = [n for n in wheel_files if n.startswith("vlm_fastpath/")]
    others = [n for n in code if not n.endswith(".py")]
    assert others == sorted(PACKAGE_DATA), others  # the declared data, nothing else


def test_no_test_helpers_shipped(wheel_files: list[str]) -> None:
    stems = {Path(n).stem for n in wheel_files}
    assert not stems & {"_testing", "_ipc_sim", "sglang_cpu", "ipc_sim", "transfers"}
    sources = [ROOT / n for n in wheel_files if n.startswith("vlm_fastpath/")]
    for path in sources:
        text = path.read_text()
        assert "from tests" not in text and "import tests" not in text, path
        if path.name != "cli.py":  # only `bench serve` may hand over to a source checkout
            assert "from benchmarks" not in text and "import benchmarks" not in text, path


def test_every_package_module_is_shipped(wheel_files: list[str]) -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "vlm_fastpath").rglob("*.py")}
    on_disk |= set(PACKAGE_DATA)
    assert on_disk == {n for n in wheel_files if n.startswith("vlm_fastpath/")}
