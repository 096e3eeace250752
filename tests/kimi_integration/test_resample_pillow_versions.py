"""Each verified Pillow release against the kernel, in a subprocess with that release.

The pass-order rule differs per release (``pillow_coeffs``), so every entry of
``resample.VERIFIED_PILLOW`` is checked against that release's own ``Image.resize``: the
installed one in-process (``test_resample.py``), the others from a cached
``pip install --target .cache/pillow/<version>`` (created on first use; skipped, with the
reason, only when pip cannot fetch the wheel).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import PIL
import pytest

from fixtures.subprocesses import REPO_ROOT, subprocess_env
from vlm_fastpath.imaging.resample import VERIFIED_PILLOW

CACHE = REPO_ROOT / ".cache" / "pillow"
CORE_VERSION = "12.3.0"  # the 12.x of the core suite: the release with the tall-image split
OTHERS = sorted(set(VERIFIED_PILLOW) - {CORE_VERSION, PIL.__version__})

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="numba missing or disabled: the kernel does not run",
)


def pillow_target(version: str) -> Path:
    """A folder holding exactly Pillow ``version`` (pip --target, cached under .cache/)."""
    target = CACHE / version
    if (target / "PIL" / "__init__.py").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"pillow-{version}-", dir=CACHE))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
             "--only-binary", ":all:", "--target", str(scratch), f"pillow=={version}"],
            capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            pytest.skip(f"pip cannot fetch pillow=={version}: {proc.stderr.strip()[-400:]}")
        try:
            scratch.rename(target)
        except OSError:  # another run got there first
            pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


VERSION_SCRIPT = """
    import sys

    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import PIL
    import torch
    from PIL import Image

    assert PIL.__version__ == sys.argv[2], (PIL.__version__, PIL.__file__)
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.imaging import resample
    from vlm_fastpath.imaging.pillow_coeffs import vertical_first
    from tests.kimi_integration.helpers import img, rand_array
    from fixtures.reference_kimi import ref_preprocess
    from tests.kimi_integration.resample_cases import SMALL, batches

    info = resample.resampler_info()
    assert info["resampler"] == "numba-fused", info

    rng = np.random.default_rng(7)
    cases = [(100, 300, 50, 199), (100, 300, 50, 200), (50, 300, 80, 290), (3, 400, 2, 100),
             (3, 301, 2, 300), (3, 300, 2, 299), (2, 900, 5, 20), (4, 500, 4, 499),
             (1, 101, 1, 100), (1, 100, 1, 99), (300, 3, 100, 2)]
    for _ in range(150):
        w, h, ow, oh = (int(v) for v in rng.integers(1, 200, 4))
        cases.append((w, h, ow, oh))
    for _ in range(30):  # taller than 100:1, shrinking and growing
        w = int(rng.integers(1, 5))
        cases.append((w, int(rng.integers(100 * w + 1, 100 * w + 400)),
                      int(rng.integers(1, 9)), int(rng.integers(1, 600))))
    firsts = 0
    for w, h, ow, oh in cases:
        array = rand_array(w * 7 + h, w, h)
        got = resample.resize_rgb(array, ow, oh)
        want = np.asarray(Image.fromarray(array).resize((ow, oh), Image.Resampling.BICUBIC))
        assert np.array_equal(got, want), ("differs", w, h, ow, oh)
        firsts += vertical_first(w, h, ow, oh)
    proc = FusedKimiProcessor(SMALL)
    for name, medias in batches().items():
        assert torch.equal(proc.preprocess(medias)["pixel_values"],
                           ref_preprocess(medias, SMALL)[0]), name
    print("OK", len(cases), "cases,", firsts, "vertical-first")
"""


def _check(tmp_path: Path, version: str) -> None:
    target = pillow_target(version)
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(VERSION_SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(target), version],
        cwd=str(tmp_path), env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"Pillow {version}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "OK" in proc.stdout
    print(version, proc.stdout.strip())


def test_core_12x_release(tmp_path):
    _check(tmp_path, CORE_VERSION)


@pytest.mark.slow
@pytest.mark.parametrize("version", OTHERS)
def test_other_verified_releases(tmp_path, version):
    _check(tmp_path, version)


def test_every_verified_release_is_tested():
    tested = {CORE_VERSION, PIL.__version__, *OTHERS}
    assert tested >= set(VERIFIED_PILLOW)
