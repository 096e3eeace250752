"""Reading an RGB ``PIL.Image``'s pixels without ``np.asarray``: in place, copied by Pillow, or
copied by our GIL-free kernel through the row table read from Pillow's image header.

The reference is ``np.asarray`` of the same image (Pillow's own 3-byte export). Images are
made in one Pillow block and, with a 4 KiB block size, in many blocks (what a large photo is
under Pillow's default 16 MiB blocks), which only ``rgbx_copy`` can read.
"""

from __future__ import annotations

import ctypes
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.pillow_blocks import pillow_blocks
from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.imaging import pillow_pixels, resample
from vlm_fastpath.imaging.pillow_pixels import rgbx_copy, rgbx_view, row_table
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import rand_array

POOL = ThreadPoolExecutor(2)


def _image(array: np.ndarray, one_block: bool) -> Image.Image:
    with pillow_blocks(one_block):
        return Image.fromarray(array)


def _rgb(rgbx: np.ndarray, image: Image.Image) -> np.ndarray:
    return rgbx.reshape(image.size[1], image.size[0], 4)[:, :, :3]


def _needs_numba() -> None:
    pytest.importorskip("numba")
    if not pillow_pixels.settings.numba_allowed():
        pytest.skip("numba disabled")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(width=st.integers(1, 700), height=st.integers(1, 1100), one_block=st.booleans(),
       strips=st.integers(1, 6), pooled=st.booleans(), by_table=st.booleans(),
       seed=st.integers(0, 2**16))
def test_copy_equals_asarray(width, height, one_block, strips, pooled, by_table, seed):
    """Both copies: through the row table (GIL-free kernel), and by Pillow's ``paste``."""
    image = _image(rand_array(seed, width, height), one_block)
    real = pillow_pixels._gather_copy
    if not by_table:
        pillow_pixels._gather_copy = lambda image, workers: None
    try:
        got = rgbx_copy(image, POOL if pooled else None, strips)
    finally:
        pillow_pixels._gather_copy = real
    assert got is not None and not got.flags.writeable
    assert got.shape == (height, width * 4)
    assert np.array_equal(_rgb(got, image), np.asarray(image))


def _rows_at(rows: np.ndarray, width: int) -> np.ndarray:
    return np.stack([np.frombuffer(ctypes.string_at(int(a), width * 4), np.uint8)
                     for a in rows])


@pytest.mark.parametrize("one_block", [True, False])
def test_row_table_addresses_every_row(one_block):
    """The table read from Pillow's header points at each row's RGBX bytes; a many-block
    image's rows jump between blocks (so the table is what reads them, not one stride)."""
    width, height = 37, 300
    array = rand_array(9, width, height)
    image = _image(array, one_block)
    table = row_table(image)
    assert table is not None
    rows, core = table
    assert core is image.im and rows.shape == (height,) and not rows.flags.writeable
    assert np.array_equal(_rows_at(rows, width).reshape(height, width, 4)[:, :, :3], array)
    steps = set(np.diff(rows).tolist())
    assert (steps == {width * 4}) == one_block


def test_row_table_declines_other_modes_and_a_header_that_does_not_match(monkeypatch):
    for mode in ("L", "RGBA", "P", "I;16", "1"):
        assert row_table(Image.new(mode, (5, 5))) is None
    image = _image(rand_array(3, 40, 30), one_block=False)
    assert row_table(image) is not None
    # A layout whose fields do not describe this image (another Pillow's): per-image check.
    layouts = list(pillow_pixels._HEADER_LAYOUTS.values())
    found = pillow_pixels._header_layout()
    other = next(layout for layout in layouts if layout != found)
    monkeypatch.setattr(pillow_pixels, "_header_layout", lambda: other)
    assert row_table(image) is None
    expected = np.asarray(image)
    assert np.array_equal(_rgb(rgbx_copy(image, POOL, 2), image), expected)  # paste then


def test_an_unknown_header_layout_is_found_at_the_probe(monkeypatch):
    """A Pillow whose header is neither known layout: the probe finds none (its size fields
    match no layout), and every copy is Pillow's own."""
    monkeypatch.setattr(pillow_pixels, "_HEADER_LAYOUTS", {"shifted": (12, 16, 40, 64, 68)})
    pillow_pixels._header_layout.cache_clear()
    try:
        assert pillow_pixels._header_layout() is None
        image = _image(rand_array(4, 50, 60), one_block=False)
        assert row_table(image) is None
        assert np.array_equal(_rgb(rgbx_copy(image), image), np.asarray(image))
    finally:
        monkeypatch.undo()
        pillow_pixels._header_layout.cache_clear()
    assert pillow_pixels._header_layout() is not None


def test_the_copy_uses_the_row_table_where_numba_runs():
    _needs_numba()
    image = _image(rand_array(6, 90, 700), one_block=False)
    got = pillow_pixels._gather_copy(image, 2)
    assert got is not None
    assert np.array_equal(_rgb(got, image), np.asarray(image))


def test_view_reads_one_block_in_place_and_declines_many():
    array = rand_array(1, 300, 200)
    image = _image(array, one_block=True)
    view = rgbx_view(image)
    assert view is not None
    assert np.array_equal(_rgb(view[0], image), array)
    assert rgbx_view(_image(array, one_block=False)) is None


def test_other_modes_and_corrupt_files():
    assert rgbx_copy(Image.new("L", (5, 5))) is None
    assert rgbx_copy(Image.new("RGBA", (5, 5))) is None
    buffer = io.BytesIO()
    Image.fromarray(rand_array(2, 64, 64)).save(buffer, "PNG")
    truncated = Image.open(io.BytesIO(buffer.getvalue()[:200]))
    with pytest.raises(OSError):
        rgbx_copy(truncated)


def test_processor_reads_many_block_images_exactly():
    """The Kimi processor's input for a large photo (many Pillow blocks) is Pillow's copy,
    RGBX; its output equals the checkpoint's arithmetic on the same image."""
    processor = FusedKimiProcessor(KIMI_K25_CFG)
    for width, height in ((1000, 700), (333, 1901)):
        image = _image(rand_array(width + height, width, height), one_block=False)
        pixels, cs, _ = resample.frame_pixels(image)
        assert cs == 4 and rgbx_view(image) is None
        medias = [{"type": "image", "image": image}]
        expected = ref_preprocess(medias, KIMI_K25_CFG)[0]
        assert torch.equal(processor.preprocess(medias)["pixel_values"], expected)
