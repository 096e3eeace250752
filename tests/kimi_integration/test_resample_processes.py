"""The fused resampler across processes and thread-count rules.

Forked and spawned children, the numpy/Pillow fallback (``VLM_FASTPATH_NUMBA=0``) giving the
same bytes, and the default thread count (affinity, cgroup quota, cap, one variable).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fixtures.reference_kimi import ref_preprocess
from fixtures.subprocesses import run_script
from vlm_fastpath.imaging import resize_pool
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .resample_cases import SMALL, SMALL_CLIP, batches

needs_numba = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba not installed"
)

CASES = """
    from tests.kimi_integration.resample_cases import SMALL, SMALL_CLIP, batches
"""

FALLBACK_SCRIPT = CASES + """
    import sys
    import torch
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.imaging import resample

    info = resample.resampler_info()
    assert info["resampler"] == "pillow" and "VLM_FASTPATH_NUMBA=0" in info["reason"], info
    results = {}
    for cfg_name, cfg in (("kimi", SMALL), ("clip", SMALL_CLIP)):
        proc = FusedKimiProcessor(cfg)
        for name, medias in batches().items():
            results[f"{cfg_name}-{name}"] = proc.preprocess(medias)["pixel_values"]
            out = proc.preprocess(medias, do_rescale=False, do_normalize=False)
            results[f"{cfg_name}-u8-{name}"] = out["pixel_values"]
    torch.save(results, "fallback.pt")
    print("OK", len(results))
"""


@pytest.mark.slow
@needs_numba
def test_numba_off_gives_the_same_bytes(tmp_path):
    run_script(tmp_path, FALLBACK_SCRIPT, VLM_FASTPATH_NUMBA="0")
    fallback = torch.load(tmp_path / "fallback.pt")
    from vlm_fastpath.imaging import resample

    assert resample.kernel_enabled()
    for cfg_name, cfg in (("kimi", SMALL), ("clip", SMALL_CLIP)):
        proc = FusedKimiProcessor(cfg)
        for name, medias in batches().items():
            ours = proc.preprocess(medias)["pixel_values"]
            assert torch.equal(ours, fallback[f"{cfg_name}-{name}"]), name
            assert torch.equal(ours, ref_preprocess(medias, cfg)[0]), name
            ours8 = proc.preprocess(medias, do_rescale=False, do_normalize=False)
            assert torch.equal(ours8["pixel_values"], fallback[f"{cfg_name}-u8-{name}"]), name


FORK_SCRIPT = CASES + """
    import multiprocessing as mp
    import os
    import signal
    import sys
    import traceback

    import numpy as np
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.imaging import resample
    from fixtures.reference_kimi import ref_preprocess

    PROC = FusedKimiProcessor(SMALL)


    def same(a, b):
        # numpy compare: torch's own OpenMP pool can hang in a forked child (not ours)
        return a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())


    def matches(expected):
        ok = True
        for name, medias in batches().items():
            ok &= same(PROC.preprocess(medias)["pixel_values"], expected[name])
        return ok


    def child_main(expected):
        signal.alarm(90)  # a hang (dead pool threads, inherited lock) becomes a failure
        try:
            assert resample.kernel_enabled()
            ok = matches(expected)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        os._exit(0 if ok else 2)


    if __name__ == "__main__":
        expected = {name: ref_preprocess(m, SMALL)[0] for name, m in batches().items()}
        assert resample.kernel_enabled(), resample.resampler_info()
        assert matches(expected), "parent differs from the oracle"
        pid = os.fork()
        if pid == 0:
            child_main(expected)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"os.fork child: {status}"
        for method in ("fork", "spawn"):
            child = mp.get_context(method).Process(target=child_main, args=(expected,))
            child.start()
            child.join(240)
            assert child.exitcode == 0, f"{method} child exit code {child.exitcode}"
        assert matches(expected)
        print("OK", flush=True)
"""


@pytest.mark.slow
@needs_numba
def test_forked_and_spawned_children(tmp_path):
    proc = run_script(tmp_path, FORK_SCRIPT, timeout=300)
    assert "OK" in proc.stdout


# -- thread counts -----------------------------------------------------------------------------
def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert resize_pool.cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert resize_pool.cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    folder = tmp_path / "cpu"
    folder.mkdir()
    (folder / "cpu.cfs_quota_us").write_text("300000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    assert resize_pool.cgroup_cpu_limit(tmp_path) == 3.0
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert resize_pool.cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files(tmp_path):
    assert resize_pool.cgroup_cpu_limit(tmp_path) is None


def test_default_threads_follow_affinity_quota_cap_and_variable(monkeypatch):
    monkeypatch.delenv(resize_pool.THREADS_ENV, raising=False)
    monkeypatch.setattr(resize_pool, "_affinity_cpus", lambda: 64)
    monkeypatch.setattr(resize_pool, "cgroup_cpu_limit", lambda: None)
    assert resize_pool.default_workers() == resize_pool.MAX_DEFAULT_THREADS
    monkeypatch.setattr(resize_pool, "cgroup_cpu_limit", lambda: 2.5)
    assert resize_pool.available_cpus() == 3 and resize_pool.default_workers() == 3
    monkeypatch.setattr(resize_pool, "_affinity_cpus", lambda: 2)
    assert resize_pool.default_workers() == 2
    monkeypatch.setenv(resize_pool.THREADS_ENV, "5")
    assert resize_pool.default_workers() == 5
    monkeypatch.setenv(resize_pool.THREADS_ENV, "nonsense")
    assert resize_pool.default_workers() == 2


def test_pool_size_is_the_created_pools(monkeypatch):
    """Once the pool exists its own worker count is reported, without re-reading cgroups."""
    pool = resize_pool.get_pool()
    created = pool._max_workers

    def unreadable() -> float:
        raise AssertionError("cgroup files read after the pool was created")

    monkeypatch.setattr(resize_pool, "cgroup_cpu_limit", unreadable)
    monkeypatch.setattr(resize_pool, "_affinity_cpus", lambda: created + 3)
    assert resize_pool.pool_size() == created


THREADS_SCRIPT = """
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.imaging.band_pool import get_band_pool
    from vlm_fastpath.imaging.resample import resampler_info
    from tests.kimi_integration.helpers import assert_parity, img, rand_image
    from fixtures.reference_kimi import KIMI_K25_CFG

    cfg = dict(KIMI_K25_CFG, in_patch_limit=300)
    assert_parity(FusedKimiProcessor(cfg), [img(rand_image(1, 700, 500))], cfg)
    assert get_band_pool().workers == 1 and resampler_info()["threads"] == 1
    print("OK")
"""


@needs_numba
def test_one_thread_by_variable(tmp_path):
    proc = run_script(tmp_path, THREADS_SCRIPT, VLM_FASTPATH_RESIZE_THREADS="1")
    assert "OK" in proc.stdout



NUMBA_THREADS_SCRIPT = """
    import os
    import threading
    import numpy as np
    from vlm_fastpath.kimi_integration import patchify_kernel as kimi_kernel
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, patchify_kernel
    from tests.kimi_integration.helpers import rand_array

    want = int(os.environ["VLM_FASTPATH_RESIZE_THREADS"])
    launches = []
    for module in (kimi_kernel, patchify_kernel):
        kernels = module._KERNELS
        kernels.load()
        real = kernels.kernel("patchify_parallel")

        def counting(*args, real=real):
            import numba
            launches.append(numba.get_num_threads())
            return real(*args)

        kernels.parallel = counting
    compiled = patchify_kernel._KERNELS.compiled
    band_threads = []
    real_band = compiled.resize_patchify_band

    def counting_band(*args):
        band_threads.append(threading.current_thread() is threading.main_thread())
        return real_band(*args)

    if want == 1:  # (the job loop, used on more threads, calls it as a global: keep it)
        compiled.resize_patchify_band = counting_band
    loop_threads = []  # (on the main thread, waits for the others) per job-loop call
    real_loop = compiled.resize_patchify_band_jobs

    def counting_loop(*args):
        loop_threads.append((threading.current_thread() is threading.main_thread(), args[-1]))
        return real_loop(*args)

    compiled.resize_patchify_band_jobs = counting_loop
    vertical = patchify_kernel._KERNELS.kernel("vertical_patchify_parallel")
    processor = FastQwen2VLImageProcessor(mode="torchvision", max_pixels=400_000)
    # 300x200 resizes both sides (the fused band kernel), 280x200 only its height (the
    # parallel vertical kernel)
    for width in (300, 280):
        processor.fuse_vertical_pass = False  # torch's whole resize, then the patch kernel
        unfused = processor(rand_array(1, width, 200), return_tensors="pt")["pixel_values"]
        processor.fuse_vertical_pass = True
        fused = processor(rand_array(1, width, 200), return_tensors="pt")["pixel_values"]
        assert np.array_equal(unfused.numpy(), fused.numpy())
    lut = np.tile(np.arange(256, dtype=np.float32), (3, 1))
    kimi_kernel.patchify_frame(rand_array(2, 28, 28), lut, np.empty((4, 3, 14, 14), np.float32),
                               2, 2, 14)
    from vlm_fastpath.imaging.resize_pool import get_pool

    get_pool().shutdown(wait=True)  # every helper submitted has run
    if want == 1:
        assert launches == [] and not vertical.signatures, launches  # serial kernels only
        assert band_threads == [True], band_threads  # one band, on the calling thread
        assert loop_threads == [], loop_threads
    else:
        # the two unfused Qwen calls and the Kimi call
        assert launches == [want] * 3 and vertical.signatures, launches
        assert band_threads == [], band_threads  # the bands run inside the job loops:
        # the caller's, which waits, and one per other pool worker
        assert sorted(loop_threads) == [(False, False)] * (want - 1) + [(True, True)], (
            loop_threads)
    print("OK")
"""


@needs_numba
@pytest.mark.parametrize("threads", ["1", "2"])
def test_one_variable_bounds_the_numba_kernels(tmp_path, threads):
    """``VLM_FASTPATH_RESIZE_THREADS`` sets the numba kernels' thread count too (1: they run
    serially), not only the resize pools' (which also run the bands of the fused Qwen
    resize): measured in vLLM's API server on 2 cores, where
    its engine shares the cores, 2048² Qwen uint8 took 38 ms/request on one thread against 93
    ms on two."""
    proc = run_script(tmp_path, NUMBA_THREADS_SCRIPT, timeout=300,
                      VLM_FASTPATH_RESIZE_THREADS=threads, NUMBA_NUM_THREADS="2")
    assert "OK" in proc.stdout


WARM_SCRIPT = """
    import numpy as np
    from PIL import Image
    from vlm_fastpath.kimi_integration import FusedKimiProcessor
    from vlm_fastpath.imaging import resample
    from vlm_fastpath.imaging import _numba_resample as kernels
    from tests.kimi_integration.resample_cases import SMALL

    assert not kernels.resize_patchify_band.signatures  # nothing loaded before a processor
    proc = FusedKimiProcessor(SMALL)
    loaded = set(kernels.resize_patchify_band.signatures)
    assert len(loaded) == 2, loaded  # float32 and uint8 tables (sources share one type)
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, (301, 257, 3), dtype=np.uint8)
    for frame in (array, Image.fromarray(array)):
        for flags in ((True, True), (False, False)):
            proc.preprocess([{"type": "image", "image": frame}], do_rescale=flags[0],
                            do_normalize=flags[1])
    # every specialization a call needs was loaded by the constructor: none added since
    assert set(kernels.resize_patchify_band.signatures) == loaded
    assert resample.warm_up() == 0.0  # once per process
    print("OK")
"""


@needs_numba
def test_processor_construction_loads_every_kernel_specialization(tmp_path):
    """The first request must not pay the kernel's load: the constructor does it."""
    from vlm_fastpath.imaging import resample

    if not resample.kernel_enabled():
        pytest.skip(resample.resampler_info()["reason"])
    run_script(tmp_path, WARM_SCRIPT)
