"""How many rows of its output buffer a decoder has written, learned without its help.

Why: the codec libraries (libjpeg-turbo through simplejpeg, libpng through imagecodecs)
decode a whole image in one GIL-free call and report nothing until it returns, but they
write the caller's buffer row by row, in order, each row once. Work on the first rows (the
resize of their bands) can then start while the rest decodes (issue #30).

How: before the decode, :meth:`RowProgress.mark` writes a fixed pattern over the last bytes
(up to 4) of every row. The decoder overwrites them with pixels; a waiter
(``_numba_row_progress.wait_rows``, no GIL) reads the marks and knows a row is finished once
a later row's mark is gone. The decoding thread says :meth:`done` (every row is final) or
:meth:`abort` (the decode failed: nothing may be used) when the call returns.

The rule rests on the machine keeping one thread's stores in order for another core to see
(x86-64 does); elsewhere :func:`supported` is False and callers decode first, then work.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import numpy as np

# the decode's state, ``state[0]`` as the kernel reads it: running, done (> 0), failed (< 0)
STATE = 0
RUNNING, DONE, ABORTED = 0, 1, -1
SLOTS = 1
# an unlikely tail of a row; a row that really ends so only waits for the decode's end
MARK = np.array([0xA7, 0x3D, 0x5E, 0xC1], np.uint8)
_ORDERED_STORES = ("x86_64", "amd64", "i686", "i386")


@functools.cache
def _kernels() -> Any:
    try:
        from . import _numba_row_progress
    except ImportError:  # numba missing: callers decode first, then work
        return None
    return _numba_row_progress


def supported() -> bool:
    """Rows can be followed here: stores keep their order across cores, and numba runs."""
    return platform.machine().lower() in _ORDERED_STORES and _kernels() is not None


class RowProgress:
    """The rows of ``out`` (uint8, C-contiguous, ``[H, ...]``) as a decoder writes them."""

    def __init__(self, out: np.ndarray) -> None:
        if out.dtype != np.uint8 or not out.flags.c_contiguous or out.ndim < 2 or out.size == 0:
            raise ValueError(f"need a C-contiguous uint8 buffer of rows, got {out.dtype} "
                             f"{out.shape}")
        self.height = out.shape[0]
        self.rows = out.reshape(self.height, -1)
        self.mark_bytes = MARK[: min(MARK.shape[0], self.rows.shape[1])].copy()
        self.state = np.zeros(SLOTS, np.int64)
        self.known = 0  # rows known written (the waiter's, kept between waits)

    def mark(self) -> None:
        """Write the pattern over every row's tail; call before the decoder starts."""
        self.rows[:, -self.mark_bytes.shape[0]:] = self.mark_bytes
        self.state[STATE] = RUNNING

    def done(self) -> None:
        """The decoder returned and its output is the image: every row is final."""
        self.state[STATE] = DONE

    def abort(self) -> None:
        """The decode failed: waiters stop, and nothing written may be used."""
        self.state[STATE] = ABORTED

    @property
    def finished(self) -> bool:
        return int(self.state[STATE]) == DONE

    def wait(self, need: int) -> int:
        """Block, without the GIL, until the first ``need`` rows are written; returns how
        many rows are known written (at least ``need``, all once the decode is done), or -1
        when the decode was aborted. One waiter per object."""
        need = min(max(int(need), 0), self.height)
        flag = int(self.state[STATE])
        if flag != RUNNING:
            return self.height if flag == DONE else -1
        if need <= self.known:
            return self.known
        got = _kernels().wait_rows(self.rows, self.mark_bytes, self.state, need, self.known)
        if got >= 0:
            self.known = int(got)
        return int(got)
