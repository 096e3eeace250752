"""numba kernel vs numpy fallback, concurrent calls, fork safety; checked against transformers.

Process-level behaviour (env vars read at import, threading layers, fork) runs in fresh
subprocesses.
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from fixtures.subprocesses import run_script
from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, patchify_kernel
from vlm_fastpath.qwen_integration.normalize_lut import build_lut

from .cases import backend_batches, run_backend_cases
from .helpers import CONFIGS, assert_same, hf_classes, hf_kwargs, rand_array

needs_numba_in_process = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="numba not installed or disabled in this process",
)


@needs_numba_in_process
@pytest.mark.parametrize("shape", [(2, 2, 14, 2, 2), (6, 4, 14, 2, 2), (4, 6, 16, 2, 3),
                                   (3, 3, 8, 3, 1), (2, 4, 5, 1, 2)])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_kernel_equals_numpy_fallback(shape, dtype):
    grid_h, grid_w, p, m, t = shape
    grid_h, grid_w = grid_h * m, grid_w * m
    frame = rand_array(grid_h * 100 + grid_w, grid_w * p, grid_h * p)
    lut = build_lut("torchvision", do_rescale=dtype == "float32", rescale_factor=1 / 255,
                    do_normalize=dtype == "float32", image_mean=(0.4, 0.5, 0.6),
                    image_std=(0.2, 0.3, 0.25))
    expected = np.empty((grid_h * grid_w, 3 * t * p * p), dtype=lut.dtype)
    patchify_kernel.patchify_numpy(frame, lut, expected, grid_h, grid_w, p, m, t)
    for parallel in (True, False):
        got = np.full_like(expected, 7)
        patchify_kernel.patchify_frame(frame, lut, got, grid_h, grid_w, p, m, t,
                                       parallel=parallel)
        assert np.array_equal(got, expected)
    assert patchify_kernel.numba_available()


def test_numpy_patchify_is_the_hf_layout():
    """The fallback itself against transformers' patchify (torchvision processor)."""
    hf = hf_classes()["torchvision"](**hf_kwargs(CONFIGS["qwen2.5-vl"]))
    frame = rand_array(5, 8 * 14, 6 * 14)
    lut = build_lut("torchvision", do_rescale=False, rescale_factor=1 / 255,
                    do_normalize=False, image_mean=(0, 0, 0), image_std=(1, 1, 1))
    got = np.empty((48, 1176), dtype=np.uint8)
    patchify_kernel.patchify_numpy(frame, lut, got, 6, 8, 14, 2, 2)
    image = torch.from_numpy(frame).permute(2, 0, 1).unsqueeze(0).contiguous()
    expected, _, _ = hf.patchify(image, patch_size=14, merge_size=2, temporal_patch_size=2)
    assert torch.equal(torch.from_numpy(got), expected[0])


NUMPY_SCRIPT = """
    import sys
    import torch
    from vlm_fastpath.qwen_integration import patchify_kernel
    from tests.qwen_integration.cases import run_backend_cases

    assert patchify_kernel.numba_available() is False, patchify_kernel.backend_info()
    assert "VLM_FASTPATH_NUMBA" in patchify_kernel.backend_info().get("reason", "")
    torch.save(run_backend_cases(), sys.argv[1] if len(sys.argv) > 1 else "numpy.pt")
    print("OK")
"""


@pytest.mark.slow
@needs_numba_in_process
def test_numpy_fallback_equals_numba_end_to_end(tmp_path):
    run_script(tmp_path, NUMPY_SCRIPT, VLM_FASTPATH_NUMBA="0")
    numpy_results = torch.load(tmp_path / "numpy.pt")
    numba_results = run_backend_cases()
    assert patchify_kernel.numba_available()
    assert numpy_results.keys() == numba_results.keys()
    for key, (pv, grid) in numba_results.items():
        assert torch.equal(pv, numpy_results[key][0]), key
        assert torch.equal(grid, numpy_results[key][1]), key


def test_matches_transformers_on_backend_batches(pairs):
    """The batches the backend tests use are themselves checked against transformers."""
    for mode in ("torchvision", "pil"):
        hf, fast = pairs[(mode, "qwen2.5-vl")]
        for images in backend_batches().values():
            assert_same(hf(images=images, return_tensors="pt"),
                        fast(images=images, return_tensors="pt"))


@pytest.mark.slow
def test_concurrent_calls_from_many_threads():
    """Many threads at once (numba's workqueue layer aborts on concurrent parallel launches
    unless they are serialized), mixing Qwen and Kimi kernels, which share the launch lock."""
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    expected = run_backend_cases()
    kimi = FusedKimiProcessor({"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 16384,
                               "patch_limit_on_one_side": 512, "image_mean": [0.5] * 3,
                               "image_std": [0.5] * 3})
    kimi_image = [{"type": "image", "image": backend_batches()["single"][0]}]
    kimi_expected = kimi.preprocess(kimi_image)["pixel_values"]

    def one(i: int) -> bool:
        if i % 4 == 3:
            return torch.equal(kimi.preprocess(kimi_image)["pixel_values"], kimi_expected)
        got = run_backend_cases()
        return all(torch.equal(got[k][0], v[0]) and torch.equal(got[k][1], v[1])
                   for k, v in expected.items())

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert all(pool.map(one, range(8)))


FORK_SCRIPT = """
    import os
    import signal
    import sys
    import traceback

    from vlm_fastpath.qwen_integration import patchify_kernel
    from tests.qwen_integration.cases import run_backend_cases, same

    LAYER = os.environ.get("NUMBA_THREADING_LAYER")


    def matches(expected):
        got = run_backend_cases()
        return all(same(got[k][0], v[0]) and same(got[k][1], v[1]) for k, v in expected.items())


    if __name__ == "__main__":
        expected = run_backend_cases()
        info = patchify_kernel.backend_info()
        assert info["numba"] and info.get("threading_layer") == (LAYER or "workqueue"), info
        print("parent", info, flush=True)
        pid = os.fork()
        if pid == 0:
            signal.alarm(120)  # a hang (dead pool threads, inherited lock) becomes a failure
            try:
                ok = matches(expected)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(3)
            os._exit(0 if ok else 2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"forked child: {status}"
        assert matches(expected)
        print("OK", flush=True)
"""


@pytest.mark.slow
@needs_numba_in_process
@pytest.mark.parametrize("layer", [None, "omp"], ids=["default-layer", "omp-layer"])
def test_fork_safety(tmp_path, layer):
    if layer == "omp":
        probe = run_script(tmp_path, """
            import numba, numpy as np
            from numba import njit, prange
            @njit(parallel=True)
            def f(a):
                for i in prange(a.size):
                    a[i] = i
            try:
                f(np.zeros(10)); print(numba.threading_layer())
            except Exception as exc:
                print("none", exc)
        """, NUMBA_THREADING_LAYER="omp")
        if "omp" not in probe.stdout:
            pytest.skip("numba has no OpenMP layer here")
    proc = run_script(tmp_path, FORK_SCRIPT, timeout=300, NUMBA_THREADING_LAYER=layer)
    assert "OK" in proc.stdout


def test_backend_info_reports_numba():
    info = patchify_kernel.backend_info()
    assert "numba" in info


def test_processor_repr_and_attributes():
    fast = FastQwen2VLImageProcessor(CONFIGS["qwen3-vl"])
    assert fast.patch_size == 16 and fast.merge_size == 2 and fast.temporal_patch_size == 2
    assert fast.size == {"shortest_edge": 65536, "longest_edge": 16777216}
    assert "torch-uint8-bicubic-aa" in repr(fast)


@needs_numba_in_process
@pytest.mark.parametrize("verified", [True, False], ids=["kernel", "unverified-pillow"])
def test_pil_mode_resizes_with_the_pillow_exact_kernel(pairs, monkeypatch, verified):
    """PIL mode: the numba resampler where the Pillow release is verified, Pillow's own resize
    otherwise; the same bytes as transformers' PIL processor either way."""
    from PIL import Image

    from vlm_fastpath.imaging import resample

    hf, fast = pairs[("pil", "qwen2.5-vl")]
    assert "pillow-bicubic-numba" in repr(fast)
    if not verified:
        monkeypatch.setattr(resample, "VERIFIED_PILLOW", {})
    calls = []
    real = resample.resize_rgb
    monkeypatch.setattr(resample, "resize_rgb",
                        lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    images = [Image.fromarray(rand_array(i, w, h)) for i, (w, h) in
              enumerate([(777, 555), (1031, 77), (64, 900)])]
    images.append(rand_array(9, 500, 333))  # an HWC array goes through the kernel too
    for image in images:
        assert_same(hf(images=[image], return_tensors="pt"),
                    fast(images=[image], return_tensors="pt"))
    assert bool(calls) == verified, calls
