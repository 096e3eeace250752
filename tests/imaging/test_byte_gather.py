"""The horizontal pass by byte permutes (``_numba_byte_gather``) is torch's uint8 antialiased
bicubic resize of the width, byte for byte, and it serves only where its table says so.

Reference: ``torch.nn.functional.interpolate(..., antialias=True)`` on the same uint8 pixels,
in this process. Every case also asserts which path ran (a table with blocks, or none), so a
case cannot pass by falling back to the column-major pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_fastpath.imaging import byte_gather
from vlm_fastpath.imaging.torch_taps import padded_gather, padded_pairs, padded_taps

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not byte_gather.supported(),
                                reason="this CPU has no AVX-512 VBMI byte permutes")


def _torch_width(pixels: np.ndarray, out_width: int) -> np.ndarray:
    """torch's resize of the width alone, as channel planes ``[3, H, out_width]``."""
    chw = torch.from_numpy(np.ascontiguousarray(pixels[..., :3])).permute(2, 0, 1)[None]
    return torch.nn.functional.interpolate(
        chw, size=(pixels.shape[0], out_width), mode="bicubic", antialias=True,
        align_corners=False)[0].numpy()


def _ours(pixels: np.ndarray, out_width: int, table: np.ndarray, slots: int = 0) -> np.ndarray:
    """The horizontal pass in 64-row blocks (``resample_planes``) into a ring of ``slots``
    rows (the whole height when 0), unrolled back to ``[3, H, out_width]``."""
    from vlm_fastpath.imaging._numba_int16_taps import resample_planes
    from vlm_fastpath.imaging._numba_resample import BLOCK_ROWS

    height, width, cs = pixels.shape
    src = np.ascontiguousarray(pixels).reshape(height, width * cs)
    xmin, xw, shift = padded_taps(width, out_width)
    slots = slots or height
    ring = np.zeros((3, slots, out_width), np.uint8)
    out = np.zeros((3, height, out_width), np.uint8)
    cols = np.empty(width * 3 * BLOCK_ROWS // 8, np.uint64)
    hcols = np.empty(out_width * 3 * BLOCK_ROWS // 8, np.uint64)
    acc = np.empty(3 * BLOCK_ROWS, np.int32)
    spare = np.empty(out_width, np.uint8)
    done = 0
    while done < height:
        count = min(BLOCK_ROWS, height - done)
        resample_planes(src, cs, done, count, xmin, xw, padded_pairs(width, out_width), table,
                        shift, cols, hcols, acc, ring, slots, spare)
        for r in range(done, done + count):
            out[:, r] = ring[:, r % slots]
        done += count
    return out


def _pixels_per_block(table: np.ndarray) -> np.ndarray:
    return table[:, 0, :16].copy().view(np.int32)[:, 3]


@pytest.mark.parametrize(("height", "width", "out_width", "cs", "per_block"), [
    (130, 1280, 1152, 3, 16),  # Qwen3-VL's 720p frames: 5 taps
    (70, 1280, 1152, 4, 16),  # Pillow's RGBX rows
    (64, 2048, 2044, 3, 16),  # a 2048² image to Qwen2.5-VL's 28-multiple: 5 taps
    (65, 1920, 1288, 3, 16),  # 6 taps
    (33, 300, 977, 3, 16),  # an upscale: 4 taps
    (20, 1000, 470, 3, 16),  # 9 taps, an odd window: its last pair's high tap weighed 0
    (9, 50, 40, 3, 16),  # rows of 150 bytes, a last block that overlaps
    (9, 700, 500, 4, 16),  # a last block that overlaps the one before
    (40, 1920, 832, 3, 8),  # Qwen3-VL's 1080p frames: 10 taps, blocks of 8 pixels
    (20, 3840, 1008, 3, 8),  # 4K frames to Qwen2.5-VL's: 16 taps, blocks of 8
    (20, 3000, 1000, 3, 8),  # 13 taps, an odd window in blocks of 8: a step's half weighed 0
    (20, 1000, 450, 4, 8),  # RGBX rows in blocks of 8
])
def test_permutes_are_torchs(height: int, width: int, out_width: int, cs: int,
                             per_block: int) -> None:
    rng = np.random.default_rng(width * 7 + out_width)
    pixels = rng.integers(0, 256, (height, width, cs), np.uint8)
    table = padded_gather(width, out_width, cs)
    assert table.shape[0] > 0  # the permutes serve this case
    assert (_pixels_per_block(table) == per_block).all()
    want = _torch_width(pixels, out_width)
    assert np.array_equal(_ours(pixels, out_width, table), want)
    assert np.array_equal(_ours(pixels, out_width, table, slots=69), want)  # a wrapping ring


@settings(max_examples=40, deadline=None)
@given(width=st.integers(44, 900), ratio=st.floats(0.3, 2.6), height=st.integers(1, 70),
       cs=st.sampled_from([3, 4]), seed=st.integers(0, 2**16))
def test_permutes_are_torchs_for_any_width(width: int, ratio: float, height: int, cs: int,
                                           seed: int) -> None:
    """Any size: where the table has blocks, the permutes; else the column-major pass. Both
    are torch's."""
    out_width = max(1, round(width / ratio))
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, cs), np.uint8)
    table = padded_gather(width, out_width, cs)
    assert np.array_equal(_ours(pixels, out_width, table), _torch_width(pixels, out_width))


def test_the_table_serves_what_its_window_holds() -> None:
    """Blocks of 16 pixels where their windows fit 128 bytes, else of 8; none for narrower
    rows, wider windows or fewer than 8 outputs."""
    assert padded_gather(1280, 1152, 3).shape[0] == 1152 // 16
    assert padded_gather(700, 500, 4).shape[0] == 500 // 16 + 1  # the last block overlaps
    assert (_pixels_per_block(padded_gather(3840, 1036, 3)) == 8).all()  # 15 taps over 3.7x
    assert padded_gather(3840, 1036, 3).shape[0] == 1036 // 8 + 1
    assert padded_gather(4000, 500, 3).shape[0] == 0  # 33 taps over 8x: wider than 128 B
    assert padded_gather(43, 40, 3).shape[0] == 0  # 129 bytes a row: no room for a window
    assert padded_gather(200, 7, 3).shape[0] == 0  # fewer outputs than one block
    for width, out_width, cs in ((1280, 1152, 3), (700, 500, 4), (300, 977, 3), (3840, 1036, 3)):
        table = padded_gather(width, out_width, cs)
        header = table[:, 0, :16].copy().view(np.int32)
        assert (header[:, 0] >= 0).all()
        assert (header[:, 0] + byte_gather.WINDOW + 2 <= width * cs).all()
        assert (header[:, 2] == width * cs).all()
        assert (header[:, 1] + header[:, 3] <= out_width).all()


def test_a_table_for_other_rows_is_not_used() -> None:
    """A table made for rows of another length falls back to the column-major pass, whose
    bytes are still torch's (a permute through the wrong windows would not be)."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (20, 1280, 3), np.uint8)
    other = padded_gather(1296, 1152, 3)
    assert other.shape[0] > 0
    assert np.array_equal(_ours(pixels, 1152, other), _torch_width(pixels, 1152))


def test_a_table_for_other_outputs_is_not_used() -> None:
    """Nor one made for another output width over rows of the same length; and the
    column-major pass then gets its scratch (``horizontal_planes`` allocates it only where the
    table does not serve)."""
    from vlm_fastpath.imaging._numba_int16_taps import horizontal_planes

    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, (70, 1280, 3), np.uint8)
    other = padded_gather(1280, 1024, 3)
    assert other.shape[0] > 0
    assert np.array_equal(_ours(pixels, 1152, other), _torch_width(pixels, 1152))
    xmin, xw, shift = padded_taps(1280, 1152)
    planes = np.zeros((3, 70, 1152), np.uint8)
    horizontal_planes(pixels.reshape(70, 1280 * 3), 3, 0, 70, xmin, xw,
                      padded_pairs(1280, 1152), other, shift, planes)
    assert np.array_equal(planes, _torch_width(pixels, 1152))


def test_the_switch_empties_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLM_FASTPATH_BYTE_GATHER", "0")
    xmin, xw, _ = padded_taps(1280, 1152)
    table = byte_gather.gather_table(xmin, xw.shape[1], padded_pairs(1280, 1152), 1280, 3)
    assert table.shape[0] == 0
    monkeypatch.setenv("VLM_FASTPATH_BYTE_GATHER", "1")
    table = byte_gather.gather_table(xmin, xw.shape[1], padded_pairs(1280, 1152), 1280, 3)
    assert table.shape[0] == 1152 // 16
