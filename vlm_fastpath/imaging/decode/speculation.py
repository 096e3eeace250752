"""Work started on an image while it decodes, kept on the decoded image for the call that wants it.

Why: an engine's loader decodes an image and returns; its processor runs later. Errors must
stay the loader's (issue #30), so the loader must still return only after the whole decode,
but the processor's work on the first rows can start as soon as they are decoded
(``row_progress``) if something says, inside the loader, what that work will be.

How: a processor that an engine hands out is *offered* here (the latest offer wins; held
weakly). The decode layer asks the offered speculator to :meth:`Speculator.start` on a large
image's buffer before decoding it; what it returns is attached to the decoded image. The
processor, when called with that image, :func:`take`s it, but only for its own key (its
settings as resolved for that call), and only while the image still holds the decoded array
(nothing can have changed its pixels). Anything else -- another processor, other settings, a
filled Pillow store, a failed decode -- leaves the work unused, and the processor does its
own; a wrong guess costs CPU, never pixels. Two rules keep that cost down: at most
:func:`limit` pieces of work run at once, and bytes whose last work nobody took start none
again (:func:`abandoned`: vLLM's processor cache answers a conversation's earlier images
without calling the processor).
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
import zlib
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..job_loop import even_edges
from ..resize_pool import pool_size
from ..row_progress import RowProgress
from .decoded_image import CARRIED, held_pixels

# Strips a speculator cuts an image's output into: enough that the first starts early and the
# last ends soon after the decode, few enough that each job loop is long against its start.
STRIPS = 12
_LOCK = threading.Lock()
_OFFERED: list[weakref.ref[Any]] = []
_ATTRIBUTE = CARRIED[0]
# fingerprints of bytes whose last work nobody took (``abandoned``), oldest first
ABANDONED_KEPT = 256
SAMPLE_BYTES = 1 << 16
_ABANDONED: dict[Hashable, None] = {}
_LATEST: dict[Hashable, int] = {}  # fingerprint -> ticket of the latest work watched on it
_TICKETS = itertools.count()
# work started and not finished, and starts reserved but not made yet (``reserve``)
_RUNNING: set[Future[Any]] = set()
_RESERVED = [0]


def _after_fork_in_child() -> None:
    """A lock held by another thread at ``fork`` stays held in the child: a new one. The
    parent's work runs on threads the child does not have: none of it counts here."""
    global _LOCK
    _LOCK = threading.Lock()
    _RUNNING.clear()
    _RESERVED[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DecodeAborted(RuntimeError):
    """The decode under speculative work failed; that work stops and is not used."""


class Speculator(Protocol):
    def start(self, mode: str, pixels: np.ndarray, progress: RowProgress) -> Prepared | None:
        """Work on ``pixels`` (the buffer being decoded, ``[H, W, C]`` of ``mode``) that waits
        for its rows through ``progress``; None where this image is not worth it."""


@dataclass(eq=False)
class Prepared:
    """What :meth:`Speculator.start` began: ``future`` gives the result for ``key``."""

    owner: Any
    key: Hashable
    future: Future[Any]
    _claim: threading.Lock = field(default_factory=threading.Lock)

    def claim(self) -> bool:
        """True once: the one caller that may use the result (two tensors must never share
        one output)."""
        return self._claim.acquire(blocking=False)


def run_strips(rows: int, step: int, progress: RowProgress,
               reads: Callable[[int, int], int], run: Callable[[int, int, int], None]) -> None:
    """Output rows ``0 .. rows`` in up to ``STRIPS`` strips of whole ``step`` s, each run once
    the source rows it reads (``reads(g0, g1)`` is one past the last) are decoded, as
    ``run(g0, g1, workers)`` on all threads but one while the decoder holds a core; once the
    decode is over, the rest as one run on every thread (each run takes the GIL back, and
    beside a thread that runs Python each takeback waits up to 5 ms). Raises
    :class:`DecodeAborted` when the decode fails first."""
    units = max(1, rows // step)
    edges = (even_edges(units, max(1, min(STRIPS, units))) * step).tolist()[:-1] + [rows]
    for g0, g1 in zip(edges[:-1], edges[1:], strict=True):
        if progress.finished:
            run(g0, rows, pool_size())
            return
        if progress.wait(reads(g0, g1)) < 0:
            raise DecodeAborted("the decode failed")
        run(g0, g1, max(1, pool_size() - 1))


def limit() -> int:
    """Work that may run at once: half the resize pool's threads, at least one. Work nobody
    takes (a vLLM processor-cache hit, an image another processor gets) holds pool threads
    until it is done; a stream of such loads must not queue work up behind work."""
    return max(1, pool_size() // 2)


def reserve() -> bool:
    """A place for one more piece of work (False: enough runs already); give it back with
    :func:`release`."""
    with _LOCK:
        _RUNNING.difference_update([f for f in _RUNNING if f.done()])
        if len(_RUNNING) + _RESERVED[0] >= limit():
            return False
        _RESERVED[0] += 1
        return True


def release(future: Future[Any] | None) -> None:
    """The reserved place, now taken by ``future`` (None: nothing was started)."""
    with _LOCK:
        _RESERVED[0] = max(0, _RESERVED[0] - 1)
        if future is not None and not future.done():
            _RUNNING.add(future)


def fingerprint(data: bytes) -> tuple[int, int]:
    """A cheap stand-in for the identity of encoded bytes: their length and a CRC-32 of up to
    three 64 KB samples (head, middle, tail). Two images that share one (rare) only lose the
    overlap, never pixels."""
    n, k = len(data), SAMPLE_BYTES
    crc = zlib.crc32(data[:k])
    if n > k:
        mid = n // 2
        crc = zlib.crc32(data[max(k, mid - k // 2): mid + k // 2], crc)
        crc = zlib.crc32(data[max(k, n - k):], crc)
    return n, crc


def abandoned(key: Hashable) -> bool:
    """The last work started on bytes with this fingerprint was never taken (an engine's
    processor cache answered them, as vLLM's does for a conversation's earlier images): start
    none on them again, it would go the same way."""
    return key in _ABANDONED


def watch(prepared: Prepared, key: Hashable) -> None:
    """Once nothing holds ``prepared`` any more, remember whether its work was taken (unless
    later work on the same bytes was started meanwhile: the latest decides)."""
    ticket = next(_TICKETS)
    _LATEST[key] = ticket
    weakref.finalize(prepared, _outcome, prepared._claim, key, ticket)


def _outcome(claim: threading.Lock, key: Hashable, ticket: int) -> None:
    # Runs wherever the last reference dies, perhaps inside a garbage collection under a lock
    # of ours: no lock here, only dict operations, each atomic under the GIL.
    if _LATEST.get(key) != ticket:
        return
    _LATEST.pop(key, None)
    _ABANDONED.pop(key, None)
    if claim.locked():
        return
    _ABANDONED[key] = None  # newest last
    while len(_ABANDONED) > ABANDONED_KEPT:
        try:
            _ABANDONED.pop(next(iter(_ABANDONED)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread
            break


def offer(speculator: Any) -> None:
    """``speculator`` is what this process's engine will call on the next decoded image."""
    with _LOCK:
        if _OFFERED and _OFFERED[0]() is speculator:
            return
        _OFFERED[:] = [weakref.ref(speculator)]


def withdraw(speculator: Any) -> None:
    with _LOCK:
        if _OFFERED and _OFFERED[0]() is speculator:
            _OFFERED.clear()


def offered() -> Any | None:
    with _LOCK:
        return _OFFERED[0]() if _OFFERED else None


def attach(image: Any, prepared: Prepared) -> None:
    setattr(image, _ATTRIBUTE, prepared)


def pending(image: Any) -> bool:
    """Work was started on ``image`` and not taken yet."""
    return getattr(image, _ATTRIBUTE, None) is not None


def take(image: Any, owner: Any, key: Hashable) -> Any | None:
    """The result prepared on ``image`` for ``owner`` and ``key`` (waiting for it if it is
    being made), handed out once (also across copies of the image, which carry it); None when
    there is none, another call took it, it never started, or it failed."""
    prepared = getattr(image, _ATTRIBUTE, None)
    if prepared is None or prepared.owner is not owner or held_pixels(image) is None:
        return None
    if prepared.key != key or not prepared.claim():
        return None
    try:
        delattr(image, _ATTRIBUTE)
    except AttributeError:
        pass
    if prepared.future.cancel():
        # still queued behind other work on the pool (perhaps behind this very thread): the
        # caller does it now rather than wait for a thread
        return None
    try:
        return prepared.future.result()
    except Exception:  # noqa: BLE001 - the speculative work failed: the caller does its own
        return None


def drop(image: Any) -> None:
    """Forget any work prepared on ``image`` (it still finishes on its thread)."""
    if getattr(image, _ATTRIBUTE, None) is not None:
        delattr(image, _ATTRIBUTE)
