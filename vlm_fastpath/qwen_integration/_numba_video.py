"""numba kernel of the Qwen-VL video processor; imported lazily by ``video_kernel`` only.

One call turns a band of patch rows of one video frame into its patches: torch's uint8
antialiased bicubic resize (both passes, torch's int16 taps: the same arithmetic as the image
kernel's ``resize_patchify_band``, on the resampler's shared passes), the LUT, and the write
of each patch's bytes straight into its temporal slot of the output rows. An output row of a
video is ``[channel, temporal slot, py, px]``: frame ``2g`` of a pair fills slot 0 and frame
``2g + 1`` slot 1 of the rows of group ``g`` (``temporal_patch_size`` 2). One call resizes
the band of every frame of a group, then writes each output row whole, so the pair is merged
in the kernel and no frame-pair tensor is ever stored. A group short of frames (an odd clip's
last) repeats its last frame in the remaining slots, as transformers pads.

Why whole rows from one call, rather than each frame writing its own slots: two threads
writing the two halves of the same rows (frames ``2g`` and ``2g + 1`` at once) shared every
cache line at the slot boundaries and defeated the streaming stores; measured, 32 frames of
1280x720 took 205-250 ms on 2 threads against 167 ms on one, same run; whole rows: see
``video_kernel``.

Own module so importing the package never imports numba; serial and ``nogil``: the Python
side spreads frames and bands over the resize thread pool, so numba's threading layers are
never involved.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vlm_fastpath.imaging._numba_bytes import VECTOR, copy16
from vlm_fastpath.imaging._numba_int16_taps import column_scratch, resample_planes, vertical_row
from vlm_fastpath.imaging._numba_jobs import claim, finish, settle
from vlm_fastpath.imaging._numba_resample import BLOCK_ROWS
from vlm_fastpath.imaging._numba_stream import (
    LINE,
    LINES14,
    PIECES14,
    STREAM_MIN_BYTES,
    store_fence,
    stream_copy,
    stream_patch16,
    stream_pieces14,
)

_ONE = np.uint64(1)
_EIGHT = np.uint64(8)
_SIXTY_FOUR = np.uint64(64)


@njit(cache=True, nogil=True, inline="always")
def _row_of(gy, gx, grid_w, m):  # noqa: ANN001, ANN202
    """The output row of patch (gy, gx) in merge order (block row, block column, row in
    block, column in block)."""
    by = gy // m
    bx = gx // m
    return (by * (grid_w // m) + bx) * (m * m) + (gy - by * m) * m + (gx - bx * m)


@njit(cache=True, nogil=True, inline="always")
def _stage_patches(buf, nf, lut, stage, gx0, p, m, t):  # noqa: ANN001, ANN202, PLR0913
    """The ``m`` patches from column ``gx0`` of ``buf`` (uint8 ``[nf, 3, p, W]`` planes: the
    group's frames' pixels of one patch row) into ``stage``, ``[channel, slot, py, px]`` each,
    slots from ``nf`` on repeating frame ``nf - 1`` (transformers' pad)."""
    last = nf - 1
    o = np.uint64(0)
    for gx in range(gx0, gx0 + m):
        x0 = np.uint64(gx * p)
        for c in range(3):
            table = lut[c]
            for k in range(t):
                plane = buf[min(k, last), c]
                for py in range(p):
                    line = plane[py]
                    s = x0
                    for _px in range(p):
                        stage[o] = table[np.uint64(line[s])]
                        o += _ONE
                        s += _ONE


@njit(cache=True, nogil=True, inline="always")
def _stage_patch_bytes(buf, nf, lut, words, gx0, p, m, t):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_stage_patches` for a uint8 table, stored eight bytes at a time into ``words``
    (the stage as uint64; its length a multiple of 8): byte stores may alias anything, so
    numba reloads every pointer after each one (measured 1.5x the float32 kernel's time for a
    quarter of its bytes); a uint64 store does not."""
    last = nf - 1
    word = np.uint64(0)
    shift = np.uint64(0)
    w = 0
    for gx in range(gx0, gx0 + m):
        x0 = np.uint64(gx * p)
        for c in range(3):
            table = lut[c]
            for k in range(t):
                plane = buf[min(k, last), c]
                for py in range(p):
                    line = plane[py]
                    s = x0
                    for _px in range(p):
                        word |= np.uint64(table[np.uint64(line[s])]) << shift
                        s += _ONE
                        shift += _EIGHT
                        if shift == _SIXTY_FOUR:
                            words[w] = word
                            w += 1
                            word = np.uint64(0)
                            shift = np.uint64(0)


@njit(cache=True, nogil=True, inline="always")
def _stage_patch_copies(buf, nf, stage, gx0, p, m, t):  # noqa: ANN001, ANN202, PLR0913
    """:func:`_stage_patches` for the identity table of a uint8 output (rescale and normalize
    off, what vLLM 0.32+ asks for): each patch line of ``p`` bytes moves as 16-byte vectors
    (``_numba_bytes``), in ascending destination order, so a short line's overrun is
    overwritten by the next one (``stage`` keeps ``VECTOR`` bytes of slack after its last
    patch); a line whose 16 bytes would read past its plane row is copied byte by byte."""
    last = nf - 1
    width = buf.shape[3]
    base = np.uint64(stage.ctypes.data)
    o = 0
    for gx in range(gx0, gx0 + m):
        x0 = gx * p
        fits = x0 + max(p, VECTOR) <= width
        for c in range(3):
            for k in range(t):
                plane = buf[min(k, last), c]
                for py in range(p):
                    line = plane[py]
                    if fits:
                        src = np.uint64(line.ctypes.data + x0)
                        j = 0
                        while j + VECTOR <= p:
                            copy16(base + np.uint64(o + j), src + np.uint64(j))
                            j += VECTOR
                        if j < p:
                            if p >= VECTOR:
                                copy16(base + np.uint64(o + p - VECTOR),
                                       src + np.uint64(p - VECTOR))
                            else:
                                copy16(base + np.uint64(o), src)
                    else:
                        for px in range(p):
                            stage[o + px] = line[x0 + px]
                    o += p


@njit(cache=True, nogil=True)
def _identity(lut):  # noqa: ANN001, ANN202
    """True when ``lut`` maps every byte to itself in a uint8 output (the patch writes are
    then byte copies)."""
    if lut.itemsize != 1:
        return False
    for c in range(lut.shape[0]):
        for v in range(256):
            if lut[c, v] != v:
                return False
    return True


@njit(cache=True, nogil=True)
def _write_group_patch_row(buf, nf, lut, flat, stage, gy, grid_w, p, m, t, stream, copies,  # noqa: ANN001, ANN202, PLR0913
                           gx0=0, gx1=-1):
    """Patch row ``gy`` of one temporal group into ``flat`` (its patches ``gx0 .. gx1``, whole
    merge blocks; ``gx1 < 0``: to the row's end): ``buf[k]`` (uint8 ``[3, p, W]`` planes)
    holds the row's pixels of the group's frame ``k`` for ``k < nf``. Each output row
    is whole ``[channel, slot, py, px]``; the ``m`` patches of one merge-block row are
    adjacent output rows, made in ``stage`` and streamed out together (``_numba_stream``)."""
    per_patch = 3 * t * p * p
    if gx1 < 0:
        gx1 = grid_w
    if copies and stream and p == 16 and flat.ctypes.data % LINE == 0:
        # 16-pixel patches into an output on whole lines: each row streamed from ``buf``
        base = np.uint64(flat.ctypes.data)
        for gx in range(gx0, gx1):
            stream_patch16(base + np.uint64(_row_of(gy, gx, grid_w, m) * per_patch),
                           buf.ctypes.data + gx * 16, buf.strides[0], nf, buf.strides[1],
                           buf.strides[2], t)
        return
    bytewise = stage.itemsize == 1 and (m * per_patch) % 8 == 0
    words = stage.view(np.uint64)
    for gx in range(gx0, gx1, m):
        if copies:
            _stage_patch_copies(buf, nf, stage, gx, p, m, t)
        elif bytewise:
            _stage_patch_bytes(buf, nf, lut, words, gx, p, m, t)
        else:
            _stage_patches(buf, nf, lut, stage, gx, p, m, t)
        stream_copy(flat, _row_of(gy, gx, grid_w, m) * per_patch, stage, 0, m * per_patch,
                    stream)


@njit(cache=True, nogil=True)
def _block_run(p, m, t):  # noqa: ANN001, ANN202
    """How many merge blocks one :func:`_write_block_row` streams from a table of pieces: the
    fewest whose 14-byte patch lines fill whole runs of ``stream_pieces14`` (two blocks of
    Qwen2.5-VL's 4 patches: 9408 bytes, 147 lines); 0 where ``p`` is not 14."""
    if p != 14:
        return 0
    per_block = m * m * 3 * t * p
    run = 1
    while (run * per_block) % PIECES14:
        run += 1
    return run


@njit(cache=True, nogil=True)
def _block_pieces(buf, nf, run, p, m, t):  # noqa: ANN001, ANN202
    """The byte offset from ``buf``'s first byte of every 14-byte patch line of ``run``
    merge blocks (``buf``: uint8 ``[nf, 3, m * p, W]``, a merge-block row of the group's
    frames), in output order: block, row in block, column in block, channel, slot (from
    ``nf`` on, frame ``nf - 1``), py."""
    last = nf - 1
    pieces = np.empty(run * m * m * 3 * t * p, np.int64)
    j = 0
    for b in range(run):
        for dy in range(m):
            for dx in range(m):
                x0 = (b * m + dx) * p
                for c in range(3):
                    for k in range(t):
                        for py in range(p):
                            pieces[j] = (min(k, last) * buf.strides[0] + c * buf.strides[1]
                                         + (dy * p + py) * buf.strides[2] + x0)
                            j += 1
    return pieces


@njit(cache=True, nogil=True)
def _write_block_row(buf, nf, lut, flat, stage, pieces, run, gy0, grid_w, p, m, t, stream,  # noqa: ANN001, ANN202, PLR0913
                     copies):
    """Patch rows ``gy0 .. gy0 + m`` (one merge-block row) of one temporal group into
    ``flat``: ``buf`` (uint8 ``[nf, 3, m * p, W]``) holds their pixels, row ``dy * p + py``
    of patch row ``gy0 + dy``. A merge block's ``m * m`` patches are consecutive output
    rows, so ``run`` blocks (``_block_run``) of 14-pixel patches are whole lines: each such
    run that starts on a line (and whose last 16-byte reads stay in ``buf``'s rows) goes
    straight from ``buf`` by ``stream_pieces14`` (``pieces``: ``_block_pieces`` of ``buf``),
    every other block row by row through :func:`_write_group_patch_row`'s stage.

    Why a block row, not a patch row: a patch row's share of a block (2 patches, 2352 bytes)
    starts and ends mid-line. Measured on one thread, a Qwen2.5-VL uint8 group's patch writes
    (2 frames, 1288x728: 5.6 MB) 0.57-0.83 ms staged, 0.21 ms here; the whole group 3.1 ->
    2.3 ms (same run)."""
    per_patch = 3 * t * p * p
    per_block = m * m * per_patch
    blocks = grid_w // m
    first = (gy0 // m) * blocks  # the block row's first block
    base = np.uint64(flat.ctypes.data)
    table = np.uint64(pieces.ctypes.data)
    entries = np.uint64(PIECES14 * 8)
    chunk = np.uint64(LINES14 * LINE)
    runs = run * m * m * 3 * t * p // PIECES14
    width = buf.shape[3]
    bx = 0
    while bx < blocks:
        d = base + np.uint64((first + bx) * per_block)
        if (copies and stream and run > 0 and d % np.uint64(LINE) == 0 and bx + run <= blocks
                and (bx + run) * m * p + VECTOR - p <= width
                and pieces.shape[0] == runs * PIECES14):
            src = np.uint64(buf.ctypes.data + bx * m * p)
            at = table
            for _ in range(runs):
                stream_pieces14(d, src, at)
                d += chunk
                at += entries
            bx += run
            continue
        for dy in range(m):
            _write_group_patch_row(buf[:, :, dy * p:(dy + 1) * p], nf, lut, flat, stage,
                                   gy0 + dy, grid_w, p, m, t, stream, copies, bx * m,
                                   bx * m + m)
        bx += 1


@njit(cache=True, nogil=True)
def resize_patchify_group_band(frames, cs, xmin, xw, xpairs, xgather, xprecision, starts, sizes,  # noqa: ANN001, ANN201, PLR0913
                               weights, ypairs, precision, lut, out, total, grid_w, p, m, t, g0,
                               g1):
    """Patch rows ``g0 .. g1`` of one temporal group: ``frames`` (uint8 ``[nf, H, W*cs]``,
    ``1 <= nf <= t`` consecutive frames, RGB or RGBX rows) each resized with torch's
    arithmetic (``xmin``/``xw``/``xprecision``: the horizontal taps as equal-length windows;
    ``starts``/``sizes``/``weights``/``precision``: the vertical ones; ``xpairs``/``ypairs``:
    ``torch_taps.tap_pairs`` of ``xw``/``weights``; ``xgather``: the horizontal pass's
    ``byte_gather.gather_table``), into ``out``, the
    group's ``[grid_h * grid_w, 3 * t * p * p]`` rows of an output of ``total`` bytes, each row
    written whole. Each frame's source rows are resampled once per band into its own ring of
    channel planes; neither resized frame is ever stored."""
    flat = out.reshape(out.size)
    # streamed by the size of the whole output (``total`` bytes), not of this group's rows:
    # a 1280x720 clip's uint8 group is 3.4 MB, its output 86 MB
    stream = total >= STREAM_MIN_BYTES
    nf = frames.shape[0]
    ow = xmin.shape[0]
    taps = 1
    stop_all = 0
    for y in range(g0 * p, g1 * p):
        taps = max(taps, sizes[y])
        stop_all = max(stop_all, starts[y] + sizes[y])
    slots = taps + BLOCK_ROWS
    rings = np.empty((nf, 3, slots, ow), np.uint8)
    cols, hcols = column_scratch(frames[0], cs, xgather, rings[0])
    acc_h = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(ow, np.uint8)
    acc = np.empty(ow, np.int32)
    # whole words, and VECTOR bytes of slack for the byte copies' last overrun
    stage = np.empty((m * 3 * t * p * p + VECTOR + 7) // 8 * 8, out.dtype)
    copies = _identity(lut)
    # 14-pixel uint8 copies: a merge-block row at a time (``_write_block_row``), its rows
    # VECTOR bytes wider than the frame for the 16-byte reads of the last patch's lines, and
    # an odd number of lines apart: ``_write_block_row`` reads a few bytes from each of
    # ``nf * 3 * m * p`` rows at once, and rows 1024 bytes apart (1008 pixels) shared a
    # quarter of the L1's sets: its writes of a 1008x560 group took 0.30 ms, 0.13 ms with
    # rows 1088 bytes apart (same run)
    run = _block_run(p, m, t) if copies and stream else 0
    if run > 0:
        lines = (ow + VECTOR + LINE - 1) // LINE
        buf = np.empty((nf, 3, m * p, (lines + 1 - lines % 2) * LINE), np.uint8)
    else:
        buf = np.empty((nf, 3, p, ow), np.uint8)
    pieces = _block_pieces(buf, nf, run, p, m, t)
    done = np.full(nf, starts[g0 * p], np.int64)
    for gy in range(g0, g1):
        dy = gy % m if run > 0 else 0
        for k in range(nf):
            src = frames[k]
            ring = rings[k]
            for r in range(p):
                y = gy * p + r
                stop = starts[y] + sizes[y]
                while done[k] < stop:
                    count = min(BLOCK_ROWS, stop_all - done[k])
                    resample_planes(src, cs, done[k], count, xmin, xw, xpairs, xgather,
                                    xprecision, cols, hcols, acc_h, ring, slots, spare)
                    done[k] += count
                for c in range(3):
                    vertical_row(ring[c], starts[y], sizes[y], weights[y], ypairs[y], slots, acc,
                                 buf[k, c, dy * p + r, :ow], precision)
        if run == 0:
            _write_group_patch_row(buf, nf, lut, flat, stage, gy, grid_w, p, m, t, stream,
                                   copies)
        elif gy - dy < g0 or gy - dy + m > g1:
            # not a whole merge-block row of this band: this patch row alone
            _write_group_patch_row(buf[:, :, dy * p:(dy + 1) * p], nf, lut, flat, stage, gy,
                                   grid_w, p, m, t, stream, copies)
        elif dy == m - 1:
            _write_block_row(buf, nf, lut, flat, stage, pieces, run, gy - dy, grid_w, p, m, t,
                             stream, copies)
    store_fence()


@njit(cache=True, nogil=True)
def group_band_jobs(counters, jobs, video, cs, xmin, xw, xpairs, xgather, xprecision, starts,  # noqa: ANN001, ANN201, PLR0913
                    sizes, weights, ypairs, precision, lut, out, rows, grid_w, p, m, t, wait):
    """Run the jobs of one video (rows of ``jobs``: temporal group, its first frame, its
    frame count, first and end patch row) that this thread claims from ``counters``
    (``_numba_jobs``), each by :func:`resize_patchify_group_band` on ``video`` (uint8
    ``[T, H, W*cs]``) into the group's ``rows`` rows of ``out``. With ``wait`` (the caller's
    thread), then wait for the jobs other threads claimed; returns False when one failed."""
    total = out.size * out.itemsize
    count = jobs.shape[0]
    job = claim(counters, count)
    while job >= 0:
        group = jobs[job, 0]
        first = jobs[job, 1]
        resize_patchify_group_band(video[first:first + jobs[job, 2]], cs, xmin, xw, xpairs,
                                   xgather, xprecision, starts, sizes, weights, ypairs,
                                   precision, lut, out[group * rows:(group + 1) * rows], total,
                                   grid_w, p, m, t, jobs[job, 3], jobs[job, 4])
        finish(counters)
        job = claim(counters, count)
    return settle(counters, count, wait)


# ``LazyKernels`` looks these two names up; the video path calls the band kernels above.
patchify_parallel = resize_patchify_group_band
patchify_serial = resize_patchify_group_band
