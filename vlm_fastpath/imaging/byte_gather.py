"""Tables for the horizontal pass by byte permutes (``_numba_byte_gather``), and whether this
machine may run it.

Why: the column-major horizontal pass (``_numba_int16_taps``) transposes each 64-row block in
and out and, for windows of fewer than 6 taps, wastes half of every 16-bit multiply. On a CPU
with AVX-512 VBMI one ``vpermi2b`` picks, from 128 bytes of a row, the bytes of two taps for
16 output pixels of one channel, already in the layout of a pairwise multiply-add: no
transpose, no wasted half. Blocks of 16 pixels serve scales up to about 2; blocks of 8 (lanes
8-15 weigh the same pixels' other tap pairs) up to about 3.8 with RGB rows; wider windows
keep the column-major pass. Measured in the fused band kernel's pattern (pairs of frames,
64-row blocks into a ring), one thread, same run, column-major -> permutes: 32 1280x720
frames to 1152 wide 29.1 -> 18.8 ms (16-pixel blocks, 5 taps); 16 frames 1920x1080 to 832
25.0 -> 20.9 ms, 3840x2160 to 1664 92.8 -> 83.9 ms and to 1008 83.7 -> 77.1 ms (8-pixel
blocks, 10-16 taps).

How: per block (the last one ends at the row's end and recomputes a few pixels, the same
bytes) the table holds the offset of its 128-byte window, the first output pixel, the row's
length in bytes (the kernel checks the rows it gets), the pixels a block, and per step the 64
permute indices and the 16 weight pairs. The window is the same for the three channels
shifted by one byte each, so one table serves every plane.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import settings

BLOCK = 16  # int32 sums in a 512-bit register: the most output pixels of one block
WINDOW = 128  # bytes one two-register permute chooses from
HEADER = 1  # table rows before the steps: window offset, first pixel, row bytes, pixels a
# block (int32 each)


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


def _blocks(xmin: np.ndarray, taps: int, pairs: np.ndarray, in_width: int, cs: int,
            outputs: int) -> np.ndarray | None:
    """The table with blocks of ``outputs`` (16 or 8) pixels, or None where a block's window
    is wider than 128 bytes. With 8, lanes 8-15 take every other tap pair of the same pixels
    (the kernel adds the two halves at the end), so a step still fills 16 lanes."""
    out_width, npairs = pairs.shape
    row_bytes = in_width * cs
    groups = BLOCK // outputs  # tap pairs one step weighs per pixel
    steps = -(-npairs // groups)
    starts = list(range(0, out_width - outputs + 1, outputs))
    if starts[-1] != out_width - outputs:
        starts.append(out_width - outputs)
    table = np.zeros((len(starts), HEADER + 2 * steps, WINDOW // 2), np.uint8)
    lanes = np.arange(BLOCK)
    pixel, group = lanes % outputs, lanes // outputs
    # tap k of a pixel reads byte (xmin + k) * cs; an odd window's pair is completed by its
    # last tap again (weighed 0), and no tap reads past the row
    k = np.minimum(np.arange(2 * npairs), taps - 1)
    for b, x0 in enumerate(starts):
        first = xmin[x0:x0 + outputs].astype(np.int64)
        if first.min() < 0:
            return None
        base = min(int(first[0]) * cs, row_bytes - WINDOW - 2)
        offsets = np.minimum(first[:, None] + k[None, :], in_width - 1) * cs - base
        if offsets.min() < 0 or offsets.max() > WINDOW - 1:
            return None
        table[b, 0, :16] = np.array([base, x0, row_bytes, outputs], np.int32).view(np.uint8)
        for step in range(steps):
            j = step * groups + group  # each lane's pair; past the last one: weight 0
            real = j < npairs
            jj = np.where(real, j, 0)
            index = table[b, HEADER + step]
            index[4 * lanes] = offsets[pixel, 2 * jj]
            index[4 * lanes + 2] = offsets[pixel, 2 * jj + 1]
            weights = np.where(real, pairs[x0 + pixel, jj], 0).astype("<i4")
            table[b, HEADER + steps + step] = weights.view(np.uint8)
    return table


def gather_table(xmin: np.ndarray, taps: int, pairs: np.ndarray, in_width: int, cs: int
                 ) -> np.ndarray:
    """uint8 ``[blocks, 1 + 2 * steps, 64]`` for windows of ``taps`` starting at ``xmin``
    (``torch_taps.padded_taps``) weighed by ``pairs`` (``torch_taps.tap_pairs``) over rows
    of ``in_width`` pixels of ``cs`` bytes: blocks of 16 pixels where their windows fit 128
    bytes, else of 8; no blocks where neither serves (too few pixels, wider windows, an
    unsupported CPU), and the caller then takes the column-major pass."""
    out_width, npairs = pairs.shape
    row_bytes = in_width * cs
    if (not supported() or cs not in (3, 4) or row_bytes < WINDOW + 2 or npairs < 1
            or taps < 1 or 2 * npairs < taps):
        return _empty(npairs)
    for outputs in (BLOCK, BLOCK // 2):
        if out_width < outputs:
            continue
        table = _blocks(xmin, taps, pairs, in_width, cs, outputs)
        if table is not None:
            table.setflags(write=False)
            return table
    return _empty(npairs)
