"""Tables for the horizontal pass by byte permutes (``_numba_byte_gather``), and whether this
machine may run it.

Why: the column-major horizontal pass (``_numba_int16_taps``) transposes each 64-row block in
and out and, for windows of fewer than 6 taps, wastes half of every 16-bit multiply. On a CPU
with AVX-512 VBMI one ``vpermi2b`` picks, from 128 bytes of a row, the bytes of two taps for
16 output pixels of one channel, already in the layout of a pairwise multiply-add: no
transpose, no wasted half. It serves windows whose 16 outputs read at most 128 bytes (scales
up to about 2), the rest keep the column-major pass.

How: per block of 16 output pixels (the last block ends at the row's end and recomputes a
few pixels, the same bytes) the table holds the offset of its 128-byte window, the first
output pixel, the row's length in bytes (the kernel checks the rows it gets), and per tap
pair the 64 permute indices and the 16 weight pairs. The window is
the same for the three channels shifted by one byte each, so one table serves every plane.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import settings

BLOCK = 16  # output pixels of one permute: 16 int32 sums in a 512-bit register
WINDOW = 128  # bytes one two-register permute chooses from
HEADER = 1  # table rows before the pairs: window offset, first pixel, row bytes (int32 each)


@lru_cache(maxsize=1)
def cpu_has_permutes() -> bool:
    """True when numba compiles for a CPU with AVX-512 BW and VBMI (the permute and the
    512-bit multiply-add). The kernels emit the permute only then; this depends on the
    compile target alone (numba keys its cache by it), never on the environment."""
    try:
        import llvmlite.binding as llvm
        from numba.core import config
    except ImportError:
        return False
    wanted = ("avx512bw", "avx512vbmi")
    cpu = getattr(config, "CPU_NAME", None)
    if cpu not in (None, "", "host"):  # a fixed target (portable caches): its features only
        features = str(getattr(config, "CPU_FEATURES", "") or "").split(",")
        return all(f"+{name}" in features for name in wanted)
    try:
        host = llvm.get_host_cpu_features()
    except RuntimeError:
        return False
    return all(bool(host.get(name, False)) for name in wanted)


def supported() -> bool:
    """True when the tables get blocks: the CPU has the permutes and
    ``VLM_FASTPATH_BYTE_GATHER`` does not turn them off (read when a plan's table is made)."""
    return settings.byte_gather_enabled() and cpu_has_permutes()


def _empty(pairs: int) -> np.ndarray:
    table = np.zeros((0, HEADER + 2 * pairs, WINDOW // 2), np.uint8)
    table.setflags(write=False)
    return table


def gather_table(xmin: np.ndarray, taps: int, pairs: np.ndarray, in_width: int, cs: int
                 ) -> np.ndarray:
    """uint8 ``[blocks, 1 + 2 * npairs, 64]`` for windows of ``taps`` starting at ``xmin``
    (``torch_taps.padded_taps``) weighed by ``pairs``
    (``torch_taps.tap_pairs``) over rows of ``in_width`` pixels of ``cs`` bytes; no blocks
    where the permute cannot serve (too few pixels, a window wider than 128 bytes, an
    unsupported CPU), and the caller then takes the column-major pass."""
    out_width, npairs = pairs.shape
    row_bytes = in_width * cs
    if (not supported() or out_width < BLOCK or cs not in (3, 4) or row_bytes < WINDOW + 2
            or npairs < 1):
        return _empty(npairs)
    if taps < 1 or 2 * npairs < taps:
        return _empty(npairs)
    starts = list(range(0, out_width - BLOCK + 1, BLOCK))
    if starts[-1] != out_width - BLOCK:
        starts.append(out_width - BLOCK)
    table = np.zeros((len(starts), HEADER + 2 * npairs, WINDOW // 2), np.uint8)
    lanes = np.arange(BLOCK)
    for b, x0 in enumerate(starts):
        first = xmin[x0:x0 + BLOCK].astype(np.int64)
        if first.min() < 0:
            return _empty(npairs)
        base = min(int(first[0]) * cs, row_bytes - WINDOW - 2)
        # tap k of lane l reads byte (first[l] + k) * cs; an odd window's pair is completed
        # by its last tap again (weighed 0), and no tap reads past the row
        k = np.minimum(np.arange(2 * npairs), taps - 1)
        offsets = np.minimum(first[:, None] + k[None, :], in_width - 1) * cs - base
        if offsets.min() < 0 or offsets.max() > WINDOW - 1:
            return _empty(npairs)
        table[b, 0, :12] = np.array([base, x0, row_bytes], np.int32).view(np.uint8)
        for j in range(npairs):
            index = table[b, HEADER + j]
            index[4 * lanes] = offsets[:, 2 * j]
            index[4 * lanes + 2] = offsets[:, 2 * j + 1]
            table[b, HEADER + npairs + j] = pairs[x0:x0 + BLOCK, j].astype("<i4").view(np.uint8)
    table.setflags(write=False)
    return table
