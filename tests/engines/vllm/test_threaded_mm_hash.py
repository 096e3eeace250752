"""``vllm-threaded-mm-hash``: vLLM's ``MultiModalHasher.hash_kwargs`` with and without the
patch gives the same digest for every item form, and only large items get threads.

The reference is the release's own ``hash_kwargs`` (after ``vlm_fastpath.revert``), called
the way the release calls it (``hash_kwargs(algorithm, /, **items)`` from 0.27, before that
``hash_kwargs(**items)`` with the algorithm from ``VLLM_MM_HASHER_ALGORITHM``).
"""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
import torch
from PIL import Image

import vlm_fastpath
from fixtures.vllm_requests import hasher_takes_algorithm
from fixtures.vllm_requests import mm_digest as digest
from vlm_fastpath.patches.vllm.threaded_mm_hash import multimodal_hasher as patch_module

vllm = pytest.importorskip("vllm")
hasher_module = pytest.importorskip("vllm.multimodal.hasher")

NAME = "vllm-threaded-mm-hash"
BIG = patch_module.MIN_BYTES


def _clip(frames: int = 24, height: int = 480, width: int = 640, seed: int = 0) -> np.ndarray:
    """A decoded clip of at least ``MIN_BYTES`` (24 x 640x480 is 22 MB)."""
    return np.random.default_rng(seed).integers(0, 256, (frames, height, width, 3), np.uint8)


def _status() -> dict:
    return next(r for r in vlm_fastpath.status("vllm") if r["name"] == NAME)


def _media_with_bytes() -> type | None:
    try:
        from vllm.multimodal.media import MediaWithBytes
    except ImportError:
        return None
    return MediaWithBytes


def _items() -> dict[str, dict[str, object]]:
    clip = _clip()
    items: dict[str, dict[str, object]] = {
        "video array + metadata": {"video": (clip, {"fps": 30.0, "frames_indices": [0, 1]})},
        "video as a list of frames": {"video": list(clip)},
        "video tensor": {"video": torch.from_numpy(clip[:20])},
        "non-contiguous video": {"video": clip[:, ::2]},
        "small image": {"image": Image.fromarray(clip[0])},
        "small array": {"image": clip[0]},
        "many small images": {"image": [Image.fromarray(f) for f in clip[:3]]},
    }
    media = _media_with_bytes()
    if media is not None:
        items["frames with larger file bytes"] = {"video": media(clip, bytes(BIG + 1))}
        items["frames with small file bytes"] = {"video": media(clip, b"\x00mp4" * 64)}
    return items


ITEMS = sorted(_items())


@pytest.fixture(autouse=True)
def _applied():
    vlm_fastpath.apply("vllm")
    yield
    vlm_fastpath.apply("vllm")


def test_applies_where_the_contract_holds():
    status = _status()
    assert status["status"] == "applied", status
    assert hasher_module.MultiModalHasher.hash_kwargs.__func__.__module__ == (
        patch_module.__name__)


@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
@pytest.mark.parametrize("case", ITEMS)
def test_digest_is_the_releases(case, algorithm, monkeypatch):
    items = _items()[case]
    ours = digest(algorithm, monkeypatch, model_id="org/model", **items)
    vlm_fastpath.revert("vllm")
    assert hasher_module.MultiModalHasher.hash_kwargs.__func__.__module__ == (
        hasher_module.__name__)
    theirs = digest(algorithm, monkeypatch, model_id="org/model", **items)
    assert ours == theirs


def _record_threads(monkeypatch) -> list[tuple[int, int]]:
    """(thread id, threads) of every threaded hasher the patch makes from now on."""
    made: list[tuple[int, int]] = []
    real = patch_module.threaded_hasher

    def spy(blake3, threads):
        made.append((threading.get_ident(), threads))
        return real(blake3, threads)

    monkeypatch.setattr(patch_module, "threaded_hasher", spy)
    return made


@pytest.mark.parametrize("threads", ["2", "3"])
def test_only_large_items_get_threads(threads, monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_HASH_THREADS", threads)
    made = _record_threads(monkeypatch)
    expected = {case: patch_module.payload_bytes(items.values(), BIG) >= BIG
                for case, items in _items().items()}
    assert expected["video array + metadata"] and expected["video tensor"]
    assert not expected["small image"] and not expected["many small images"]
    if _media_with_bytes() is not None:
        assert expected["frames with larger file bytes"]
        assert not expected["frames with small file bytes"]
    for case, items in _items().items():
        made.clear()
        digest("blake3", monkeypatch, **items)
        assert made == ([(threading.get_ident(), int(threads))] if expected[case] else []), case
    made.clear()
    digest("sha256", monkeypatch, video=_clip())
    assert made == []


def test_one_thread_keeps_the_releases_hasher(monkeypatch):
    monkeypatch.setenv("VLM_FASTPATH_HASH_THREADS", "1")
    made = _record_threads(monkeypatch)
    digest("blake3", monkeypatch, video=_clip())
    assert made == []


def test_concurrent_threads_decide_for_themselves(monkeypatch):
    """A large item hashed beside small ones: only its own thread's hasher is threaded, and
    every digest is the release's."""
    monkeypatch.setenv("VLM_FASTPATH_HASH_THREADS", "2")
    cases = _items()
    names = ["video array + metadata", "small image", "small array", "video tensor"] * 3
    want = {}
    vlm_fastpath.revert("vllm")
    for name in set(names):
        want[name] = digest("blake3", monkeypatch, **cases[name])
    vlm_fastpath.apply("vllm")
    made = _record_threads(monkeypatch)
    got: dict[int, tuple[str, str, int]] = {}
    barrier = threading.Barrier(len(names))

    def run(index: int, name: str) -> None:
        barrier.wait()
        got[index] = (name, digest("blake3", monkeypatch, **cases[name]), threading.get_ident())

    workers = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(names)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert {i: (n, d) for i, (n, d, _) in got.items()} == {
        i: (n, want[n]) for i, n in enumerate(names)}
    large = sorted(ident for n, _, ident in got.values() if n.startswith("video"))
    assert sorted(ident for ident, _ in made) == large


def _child_digest(queue) -> None:
    from vllm.multimodal.hasher import MultiModalHasher

    clip = _clip(seed=1)
    if hasher_takes_algorithm():
        queue.put(MultiModalHasher.hash_kwargs("blake3", video=clip))
    else:
        queue.put(MultiModalHasher.hash_kwargs(video=clip))


def test_forked_child_hashes_large_items(monkeypatch):
    """After the parent hashed on threads, a forked child does too (no pool is shared)."""
    monkeypatch.setenv("VLM_FASTPATH_HASH_THREADS", "2")
    monkeypatch.setenv("VLLM_MM_HASHER_ALGORITHM", "blake3")
    parent = digest("blake3", monkeypatch, video=_clip(seed=1))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_digest, args=(queue,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == parent


def test_estimate_counts_what_vllm_hashes():
    clip = _clip()
    assert patch_module.payload_bytes([clip], 1 << 40) == clip.nbytes
    assert patch_module.payload_bytes([torch.from_numpy(clip)], 1 << 40) == clip.nbytes
    assert patch_module.payload_bytes([[clip[0], clip[1]], {"a": b"xy"}], 1 << 40) == (
        2 * clip[0].nbytes + 2)
    image = Image.new("RGBA", (10, 7))
    assert patch_module.payload_bytes([image, "text", 3, None], 1 << 40) == 280
    assert patch_module.payload_bytes([clip, clip], 5) >= 5  # stops early
    media = _media_with_bytes()
    if media is not None:
        assert patch_module.payload_bytes([media(clip, b"abc")], 1 << 40) == 3
        assert patch_module.payload_bytes([media(clip[:1], bytes(10**7))], 1 << 40) == (
            clip[0].nbytes)
