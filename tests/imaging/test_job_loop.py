"""The GIL-free job loops (``imaging.job_loop`` + ``_numba_jobs``): every job runs exactly once
on however many threads join, the caller waits for jobs others claimed, a failed helper is
reported instead of hanging the caller, and the video and image kernels built on them stay
exact when the jobs are spread over threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from vlm_fastpath.imaging import job_loop  # noqa: E402
from vlm_fastpath.imaging._numba_jobs import claim, finish, wait_done  # noqa: E402

# How long a test waits for another thread. Generous: every wait ends as soon as its condition
# holds (milliseconds, even on a loaded 2-core machine); only a broken build waits this long.
WAIT_S = 60.0


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll ``condition`` (a state another thread reaches, e.g. a counter a GIL-free loop
    bumps) until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.001)


@njit(nogil=True)
def _count_jobs(counters, hits, spin, wait):  # noqa: ANN001, ANN202
    """Each claimed job adds one to its slot of ``hits`` after ``spin`` iterations of work."""
    n = hits.shape[0]
    while True:
        job = claim(counters, n)
        if job < 0:
            break
        acc = 0
        for i in range(spin):
            acc += i
        hits[job] += 1 + (acc & 0)
        finish(counters)
    if wait:
        return wait_done(counters, n)
    return True


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_every_job_runs_exactly_once(workers: int) -> None:
    for jobs in (1, 2, 3, 17, 200):
        for _ in range(20):
            hits = np.zeros(jobs, np.int64)
            job_loop.run_jobs(_count_jobs, jobs, (hits, 2000), workers)
            assert hits.tolist() == [1] * jobs, (workers, jobs)


# How long the helper holding a job gives a caller that does not wait for it to return. Only
# a broken caller's detection depends on it; a correct caller's outcome never does.
RETURN_WINDOW_S = 0.5


def test_the_caller_waits_for_jobs_other_threads_claimed() -> None:
    """A helper holding the last job keeps the caller waiting until it is done: the caller
    returns only after every slot is written (no job is still running when it returns).

    No clock decides: the helper finishes its job only once the caller has finished its own
    and then returned (a caller that does not wait) or had ``RETURN_WINDOW_S`` to; the slots
    the caller saw when it returned must both be written."""
    claimed = threading.Event()
    returned = threading.Event()
    hits = np.zeros(2, np.int64)
    counters = np.zeros(job_loop.SLOTS, np.int64)
    seen: list[tuple[bool, list[int]]] = []

    def slow_helper() -> None:
        job = claim(counters, 2)
        assert job == 0
        claimed.set()
        _wait_for(lambda: counters[job_loop.DONE] >= 1, "the caller finished its own job")
        returned.wait(RETURN_WINDOW_S)
        hits[job] += 1
        finish(counters)

    def caller() -> None:
        complete = _count_jobs(counters, hits, 10, True)
        seen.append((bool(complete), hits.tolist()))  # what it left behind as it returned
        returned.set()

    helper = threading.Thread(target=slow_helper, daemon=True)
    helper.start()
    assert claimed.wait(WAIT_S), "the helper never claimed its job"
    runner = threading.Thread(target=caller, daemon=True)
    runner.start()
    for thread in (runner, helper):
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{thread.name} did not end in {WAIT_S} s"
    assert seen == [(True, [1, 1])], "the caller returned before the helper's job was done"


def test_a_failed_helper_is_reported_not_waited_for_forever() -> None:
    """A helper that claims a job and raises: the caller's wait ends (the failure flag) and
    ``run_jobs`` raises the helper's own error."""
    calls = []
    claimed = threading.Event()

    def loop(counters: np.ndarray, hits: np.ndarray, wait: bool) -> bool:
        if not wait:  # the helper: claim one job, then fail inside it
            calls.append("helper")
            claim(counters, hits.shape[0])
            claimed.set()
            raise ValueError("injected failure in a helper's job")
        assert claimed.wait(WAIT_S)  # the caller: the helper holds a job it never finishes
        return _count_jobs(counters, hits, 0, True)

    hits = np.zeros(4, np.int64)
    done: list[BaseException] = []

    def call() -> None:
        try:
            job_loop.run_jobs(loop, 4, (hits,), 2)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            done.append(exc)

    runner = threading.Thread(target=call, daemon=True)
    runner.start()
    runner.join(WAIT_S)
    assert not runner.is_alive(), "the caller hung on a failed helper"
    assert calls == ["helper"]
    assert len(done) == 1 and isinstance(done[0], ValueError), done
    assert "injected failure" in str(done[0])


def test_a_failing_caller_stops_the_helpers_claiming() -> None:
    counters = np.zeros(job_loop.SLOTS, np.int64)

    def loop(counters_: np.ndarray, wait: bool) -> bool:
        raise KeyError("caller")

    with pytest.raises(KeyError):
        job_loop.run_jobs(loop, 3, (), 1)
    counters[job_loop.FAILED] = 1
    assert claim(counters, 3) == -1


def test_video_jobs_on_threads_equal_one_thread() -> None:
    """The video kernel's job table (group, first frame, frame count, band) run by several
    threads fills the same bytes as one thread running every band of every group in order,
    on an odd clip (the last group padded)."""
    from vlm_fastpath.imaging.lut import identity_lut
    from vlm_fastpath.imaging.torch_taps import axis_taps, horizontal_taps
    from vlm_fastpath.qwen_integration import video_kernel

    if not video_kernel.kernels_available():
        pytest.skip("video kernel needs numba")
    rng = np.random.default_rng(5)
    video = rng.integers(0, 256, (5, 90, 130, 3), dtype=np.uint8)
    plan = video_kernel.VideoPlan(frames=5, height=56, width=84, patch_size=14, merge_size=2,
                                  temporal_patch_size=2)
    lut = identity_lut()
    threaded = np.zeros((plan.num_patches, plan.row_length), np.uint8)
    video_kernel.fill_videos([video], [True], [plan], [threaded], lut)
    serial = np.zeros_like(threaded)
    band = video_kernel._KERNELS.kernel("resize_patchify_group_band")
    ytaps = axis_taps(90, 56)
    taps = (*horizontal_taps(130, 84, 3), ytaps.starts, ytaps.sizes, ytaps.weights,
            ytaps.pairs, ytaps.precision)
    rows = plan.rows_per_group
    for group in range(plan.grid_t):
        first, count = video_kernel.group_frames(group, plan.frames, 2)
        frames = video[first:first + count].reshape(count, 90, 130 * 3)
        band(frames, 3, *taps, lut, serial[group * rows:(group + 1) * rows], serial.nbytes,
             plan.grid_w, 14, 2, 2, 0, plan.grid_h)
    assert np.array_equal(threaded, serial)


def test_a_helper_that_starts_late_holds_none_of_the_calls_arrays() -> None:
    """The call's large arrays are free when ``run_jobs`` returns, also while its helper is
    still queued behind other tasks: an output a queued task still referenced could not go
    back to the output pool for the next call (which then faulted in fresh memory)."""
    import weakref

    from vlm_fastpath.imaging.resize_pool import get_pool, pool_size

    workers = pool_size()
    if workers < 2:
        pytest.skip("needs a resize pool of 2+ threads")
    job_loop.run_jobs(_count_jobs, 8, (np.zeros(8, np.int64), 10), 1)  # compiled before
    release = threading.Event()
    started = threading.Semaphore(0)

    def block() -> None:
        started.release()
        release.wait(WAIT_S)

    blockers = [get_pool().submit(block) for _ in range(workers)]
    try:
        for _ in range(workers):
            assert started.acquire(timeout=WAIT_S)  # every pool thread is taken
        hits = np.zeros(job_loop.DETACH_BYTES // 8, np.int64)
        ref = weakref.ref(hits)
        job_loop.run_jobs(_count_jobs, 8, (hits[:8], 10), workers)
        assert hits[:8].tolist() == [1] * 8
        del hits
        assert ref() is None, "a queued helper still holds the call's arrays"
    finally:
        release.set()
        for blocker in blockers:
            blocker.result(WAIT_S)


def test_a_call_returns_without_waiting_for_its_helpers_to_take_the_gil_back() -> None:
    """Once every job is done the call returns, while a helper has yet to come back to
    Python (beside a thread running Python that waits up to 5 ms per helper), and its large
    arrays are already free: the helpers hold views that do not own their memory.

    No clock decides: the helper is inside its loop before the caller starts (so it shares
    the jobs), and stays there, its arguments in its frame, until the call has returned; a
    call that waited for it would only return once that wait gave up."""
    import weakref

    from vlm_fastpath.imaging.resize_pool import pool_size

    if pool_size() < 2:
        pytest.skip("needs a resize pool of 2+ threads")
    entered = threading.Event()  # the helper is inside its loop
    returned = threading.Event()  # the call has returned
    back = threading.Event()  # the helper has left its loop
    late: list[bool] = []  # per helper: it gave up waiting for the call to return

    def loop(counters, hits, spin, wait):  # noqa: ANN001, ANN202
        if wait:  # the caller: only once the helper is in, so that it holds some jobs
            assert entered.wait(WAIT_S), "the helper never started"
            return _count_jobs(counters, hits, spin, wait)
        entered.set()
        try:
            done = _count_jobs(counters, hits, spin, wait)
            # late back in Python: its arguments still in this frame until the call returned
            late.append(not returned.wait(WAIT_S))
            return done
        finally:
            back.set()

    _count_jobs(np.zeros(job_loop.SLOTS, np.int64), np.zeros(4, np.int64), 10, True)  # compiled
    for _ in range(3):
        big = np.zeros(job_loop.DETACH_BYTES // 8, np.int64)
        ref = weakref.ref(big)
        try:
            job_loop.run_jobs(loop, big.shape[0], (big, 0), 2)
            assert (big == 1).all()
            del big
            # the helper is still inside its loop, holding its arguments
            assert ref() is None, "a helper's arguments keep the call's array alive"
        finally:
            returned.set()
        assert back.wait(WAIT_S), "the helper never left its loop"
        assert late == [False], "the call waited for its helper to come back to Python"
        for event in (entered, returned, back):
            event.clear()
        late.clear()
