"""numba vs numpy fallback, thread safety (incl. numba's workqueue layer) and fork safety.

Process-level behaviour (env vars read at import, threading layers, fork) runs in fresh
subprocesses; every output is checked against the oracle.
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG, ref_preprocess
from fixtures.subprocesses import run_script
from vlm_fastpath.kimi_integration import FusedKimiProcessor, patchify_kernel

from .cases import backend_batches, run_backend_cases
from .helpers import img, rand_image, video

needs_numba = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba not installed"
)
needs_numba_in_process = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("VLM_FASTPATH_NUMBA") == "0",
    reason="numba not installed or disabled in this process",
)


def _oracle(key: str, medias):
    cfg = CLIP_CFG if key.startswith("clip") else KIMI_K25_CFG
    pv, grid, _ = ref_preprocess(medias, cfg, uint8="-u8-" in key)
    return pv, grid


# -- 10. numpy fallback == numba -----------------------------------------------------------------
NUMPY_SCRIPT = """
    import sys
    import torch
    from vlm_fastpath.kimi_integration import FusedKimiProcessor, patchify_kernel
    from tests.kimi_integration.cases import run_backend_cases

    assert patchify_kernel.numba_available() is False, patchify_kernel.backend_info()
    info = patchify_kernel.backend_info()
    assert "VLM_FASTPATH_NUMBA" in info.get("reason", ""), info
    results = run_backend_cases(FusedKimiProcessor)
    assert patchify_kernel.numba_available() is False
    torch.save(results, sys.argv[1] if len(sys.argv) > 1 else "numpy_results.pt")
    print("OK", len(results))
"""


@pytest.mark.slow
@needs_numba_in_process
def test_numpy_fallback_equals_numba(tmp_path):
    run_script(tmp_path, NUMPY_SCRIPT, VLM_FASTPATH_NUMBA="0")
    numpy_results = torch.load(tmp_path / "numpy_results.pt")

    assert patchify_kernel.numba_available() is True, patchify_kernel.backend_info()
    numba_results = run_backend_cases(FusedKimiProcessor)
    assert sorted(numpy_results) == sorted(numba_results)
    batches = backend_batches()
    for key, (pv, grid) in numba_results.items():
        np_pv, np_grid = numpy_results[key]
        assert pv.dtype == np_pv.dtype == (torch.uint8 if "-u8-" in key else torch.float32)
        assert torch.equal(grid, np_grid), key
        assert torch.equal(pv, np_pv), f"numba and numpy paths differ for {key}"
        # both pinned to the oracle, so a shared bug cannot pass as agreement
        exp_pv, exp_grid = _oracle(key, batches[key.split("-", 2)[2]])
        assert torch.equal(grid, exp_grid), key
        assert torch.equal(pv, exp_pv), f"{key} differs from the oracle"


# -- 11. concurrency -----------------------------------------------------------------------------
def _thread_work(proc, cfg, seed):
    """One thread: a single image (parallel kernel) then a multi-frame batch (pool path)."""
    single = [img(rand_image(seed, 300 + 37 * seed, 200 + 11 * seed))]
    frames = [rand_image(seed * 10 + i, 160 + seed, 90) for i in range(3)]
    batch = [img(rand_image(seed + 100, 97, 1400)), video(frames), img(rand_image(seed, 5, 3))]
    expected = [ref_preprocess(m, cfg)[:2] for m in (single, batch)]
    results = []
    for _ in range(2):
        for medias, (exp_pv, exp_grid) in zip((single, batch), expected, strict=True):
            out = proc.preprocess(medias)
            results.append(
                torch.equal(out["pixel_values"], exp_pv) and torch.equal(out["grid_thws"], exp_grid)
            )
    return results


def test_concurrent_threads_in_process(proc):
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda s: _thread_work(proc, KIMI_K25_CFG, s), range(8)))
    assert all(all(r) for r in results), results


def test_concurrent_threads_shared_clip_processor(clip_proc):
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda s: _thread_work(clip_proc, CLIP_CFG, s), range(20, 28)))
    assert all(all(r) for r in results), results


WORKQUEUE_SCRIPT = """
    from concurrent.futures import ThreadPoolExecutor

    import numba
    import torch
    from vlm_fastpath.kimi_integration import FusedKimiProcessor, patchify_kernel
    from tests.kimi_integration.helpers import img, rand_image
    from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess

    proc = FusedKimiProcessor(KIMI_K25_CFG)
    # big enough single images that kernel launches from 8 threads overlap
    medias = [[img(rand_image(s, 1400 + 13 * s, 1100 - 7 * s))] for s in range(8)]
    batches = [[img(rand_image(s + 50, 300, 200)), img(rand_image(s + 60, 90, 700))]
               for s in range(8)]
    expected = [ref_preprocess(m, KIMI_K25_CFG)[:2] for m in medias]
    expected_b = [ref_preprocess(b, KIMI_K25_CFG)[:2] for b in batches]

    def work(i):
        ok = True
        for _ in range(3):
            for m, (pv, grid) in ((medias[i], expected[i]), (batches[i], expected_b[i])):
                out = proc.preprocess(m)
                ok &= torch.equal(out["pixel_values"], pv) and torch.equal(out["grid_thws"], grid)
        return ok

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(8)))
    assert all(results), results
    info = patchify_kernel.backend_info()
    assert info.get("threading_layer") == "workqueue", info
    assert numba.threading_layer() == "workqueue"
    print("OK", info)
"""


@pytest.mark.slow
@needs_numba
def test_concurrent_threads_workqueue_layer(tmp_path):
    proc = run_script(tmp_path, WORKQUEUE_SCRIPT, NUMBA_THREADING_LAYER="workqueue")
    assert "OK" in proc.stdout


# -- 12. fork safety -------------------------------------------------------------------------------
FORK_SCRIPT = """
    import multiprocessing as mp
    import os
    import signal
    import sys
    import traceback

    import numpy as np
    from vlm_fastpath.kimi_integration import FusedKimiProcessor, patchify_kernel
    from tests.kimi_integration.helpers import img, rand_image
    from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess

    LAYER = os.environ.get("NUMBA_THREADING_LAYER")
    proc = FusedKimiProcessor(KIMI_K25_CFG)


    def medias():
        single = [img(rand_image(1, 1500, 1100))]  # one frame: the parallel kernel
        batch = [img(rand_image(2, 641, 479)), img(rand_image(3, 29, 27)),
                 img(rand_image(4, 90, 1300))]  # several frames: the resize pool
        return single, batch


    def same(a, b):
        # numpy, not torch.equal: torch's own OpenMP pool hangs in a forked child of a
        # parent that used it (a torch/libgomp matter, not the package's)
        a, b = a.numpy(), b.numpy()
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


    def matches(expected):
        ok = True
        for media, (pv, grid) in zip(medias(), expected):
            out = proc.preprocess(media)
            ok &= same(out["pixel_values"], pv) and same(out["grid_thws"], grid)
        return ok


    def child_main(expected):
        signal.alarm(60)  # a hang (dead pool threads, inherited lock) becomes a failure
        try:
            ok = matches(expected)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        os._exit(0 if ok else 2)


    if __name__ == "__main__":
        expected = [tuple(ref_preprocess(m, KIMI_K25_CFG)[:2]) for m in medias()]
        assert matches(expected), "parent output differs from the oracle"
        info = patchify_kernel.backend_info()
        assert info["numba"] and info.get("threading_layer") == (LAYER or "workqueue"), info
        print("parent", info, flush=True)

        pid = os.fork()
        if pid == 0:
            child_main(expected)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"os.fork child: {status}"

        methods = ["fork"] + (["spawn"] if os.environ.get("WITH_SPAWN") else [])
        for method in methods:
            child = mp.get_context(method).Process(target=child_main, args=(expected,))
            child.start()
            child.join(180)
            assert child.exitcode == 0, f"{method} child exit code {child.exitcode}"
        # and the parent still works after its children
        assert matches(expected)
        print("OK", methods, flush=True)
"""


@pytest.mark.slow
@needs_numba
@pytest.mark.parametrize(
    "layer",
    [None, "omp"],
    ids=["default-layer", "omp-layer"],
)
def test_fork_safety(tmp_path, layer):
    if layer == "omp":
        _require_layer(tmp_path, "omp")
    env = {"NUMBA_THREADING_LAYER": layer}
    if layer is None:
        env["WITH_SPAWN"] = "1"  # spawn starts a fresh interpreter: one run is enough
    proc = run_script(tmp_path, FORK_SCRIPT, timeout=240, **env)
    assert "OK" in proc.stdout


def _require_layer(tmp_path, layer):
    """Skip (not fail) where numba was built without this threading layer."""
    import subprocess
    import sys

    from fixtures.subprocesses import subprocess_env

    code = (
        "import numpy as np, numba\n"
        "@numba.njit(parallel=True)\n"
        "def f(a):\n"
        "    for i in numba.prange(a.size): a[i] += 1\n"
        "f(np.zeros(4)); print(numba.threading_layer())\n"
    )
    check = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(NUMBA_THREADING_LAYER=layer),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    if check.returncode != 0 or check.stdout.strip() != layer:
        pytest.skip(f"numba threading layer {layer!r} unavailable: {check.stderr[-300:]}")
