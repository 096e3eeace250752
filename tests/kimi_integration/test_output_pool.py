"""Recycled output buffers: reused only once nothing refers to them, bounded, thread/fork safe."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.imaging import output_pool
from vlm_fastpath.imaging.output_pool import MIN_BYTES, OutputPool
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import img, rand_image

MB = 1 << 20


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _lends_at(slab: np.ndarray) -> int:
    """Where the pool's outputs over ``slab`` start: its first 64-byte line."""
    return _address(slab) + (-_address(slab) % output_pool.ALIGN)


@pytest.fixture(autouse=True)
def _pool_on(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "256")


def test_memory_comes_back_only_when_every_holder_is_gone():
    pool = OutputPool()
    first = pool.empty((3 * MB,), np.float32)
    address = _address(first)
    tensor = torch.from_numpy(first)[5:]
    holders = [first[10:], tensor, tensor.numpy()]  # a view, a tensor, numpy() of a tensor
    del first, tensor
    while holders:
        gc.collect()
        pool.idle_bytes()  # collects the returned slabs
        idle = {_lends_at(slab) for slab in pool._idle}
        assert address not in idle, f"returned while a {type(holders[-1])} still held it"
        holders.pop()
    gc.collect()
    pool.idle_bytes()
    assert address in {_lends_at(slab) for slab in pool._idle}  # back, once nothing held it
    again = pool.empty((3 * MB,), np.float32)
    assert _address(again) == address and pool.reused == 1


def test_pooled_outputs_start_on_a_line_and_have_the_size_asked_for():
    """New and reused, whatever the request's size (an exact number of huge pages too): the
    kernels stream whole 64-byte lines into them."""
    pool = OutputPool()
    for count in (MIN_BYTES, output_pool.GRANULE * 3, 5 * MB + 3, 7 * MB - 1, 5 * MB):
        for _ in range(2):  # the second is the first's slab again
            array = pool.empty((count,), np.uint8)
            assert _address(array) % output_pool.ALIGN == 0 and array.nbytes == count
            array[:] = 1  # the whole output lies within its slab
            del array
            gc.collect()
    assert pool.reused >= 4


def test_off_small_and_too_large_are_plain_arrays(monkeypatch):
    pool = OutputPool()
    small = pool.empty((MIN_BYTES // 8,), np.float32)
    assert isinstance(small.base, type(None)) or not hasattr(small.base, "_type_")
    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "0")
    for _ in range(3):
        array = pool.empty((2 * MB,), np.float32)
        del array
    assert pool.created == pool.reused == 0 and pool.idle_bytes() == 0
    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "16")
    big = pool.empty((5 * MB,), np.float32)  # 20 MiB > 16 MiB: not pooled
    del big
    assert pool.created == 0 and pool.idle_bytes() == 0


def test_idle_memory_stays_within_the_limits(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_BUFFER_POOL_MB", "64")
    pool = OutputPool()
    arrays = [pool.empty((n * MB,), np.uint8) for n in (6, 10, 14, 18, 22, 26)]
    del arrays
    gc.collect()
    idle = pool.idle_bytes()
    assert idle <= 64 * MB
    assert len(pool._idle) <= output_pool.MAX_IDLE


def test_a_slab_serves_only_requests_that_fit_it():
    pool = OutputPool()
    big = pool.empty((40 * MB,), np.uint8)
    del big
    small = pool.empty((6 * MB,), np.uint8)  # 40 MiB slab is over twice the request
    assert pool.reused == 0
    del small
    larger = pool.empty((41 * MB,), np.uint8)  # does not fit the 40 MiB slab
    assert pool.reused == 0 and larger.nbytes == 41 * MB


def _filled(pool: OutputPool, count: int, value: int) -> np.ndarray:
    array = pool.empty((count,), np.float32)
    array.fill(value)
    return array


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["take", "drop", "view", "tensor"]),
                          st.integers(0, 7), st.integers(4, 9)), min_size=1, max_size=20))
def test_live_outputs_never_share_memory(ops):
    """Any mix of outputs, views and tensors: every live one keeps its own bytes."""
    pool = OutputPool()
    live: list[tuple[int, object]] = []  # (fill value, holder)
    stamp = 0
    for op, index, megabytes in ops:
        if op == "take" or not live:
            stamp += 1
            live.append((stamp, _filled(pool, megabytes * MB // 4, stamp)))
            continue
        value, holder = live[index % len(live)]
        if op == "drop":
            live.pop(index % len(live))
        elif op == "view":
            live[index % len(live)] = (value, holder[1:])
        else:
            live[index % len(live)] = (value, torch.as_tensor(holder))
        del holder  # refcounting frees it here (no cycles): its slab may be lent next
    for value, holder in live:
        data = holder.numpy() if isinstance(holder, torch.Tensor) else holder
        assert np.all(data == value), "a live output was handed out again"


def test_threads_never_receive_each_others_buffers():
    pool = OutputPool()
    errors: list[str] = []

    def work(seed: int) -> None:
        for i in range(40):
            array = pool.empty(((4 + (seed + i) % 3) * MB // 4,), np.float32)
            array.fill(seed * 1000 + i)
            if not np.all(array == seed * 1000 + i):
                errors.append(f"thread {seed} call {i}")
            del array

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert pool.reused > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_starts_with_an_empty_pool():
    kept = output_pool.POOL.empty((6 * MB,), np.uint8)
    del kept
    gc.collect()
    assert output_pool.POOL.idle_bytes() > 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        ok = output_pool.POOL.idle_bytes() == 0
        array = output_pool.empty_output((6 * MB,), np.uint8)
        array.fill(7)
        del array
        ok = ok and output_pool.POOL.idle_bytes() == 6 * MB + output_pool.ALIGN
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)


def test_processor_outputs_stay_exact_while_earlier_ones_are_held():
    proc = FusedKimiProcessor(KIMI_K25_CFG)
    medias = [[img(rand_image(i, 1400 + 10 * i, 1100))] for i in range(4)]
    before = output_pool.POOL.reused
    held = proc.preprocess(medias[0])["pixel_values"]
    assert held.nbytes >= MIN_BYTES
    expected_held = ref_preprocess(medias[0], KIMI_K25_CFG)[0]
    for media in medias[1:]:
        out = proc.preprocess(media)["pixel_values"]
        assert torch.equal(out, ref_preprocess(media, KIMI_K25_CFG)[0])
        del out
        gc.collect()
    assert torch.equal(held, expected_held)  # untouched by the calls that reused memory
    assert output_pool.POOL.reused > before
