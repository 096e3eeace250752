"""Reading an RGB ``PIL.Image``'s pixels without ``np.asarray``: in place, or copied by Pillow.

The reference is ``np.asarray`` of the same image (Pillow's own 3-byte export). Images are
made in one Pillow block and, with a 4 KiB block size, in many blocks (what a large photo is
under Pillow's default 16 MiB blocks), which only ``rgbx_copy`` can read.
"""

from __future__ import annotations

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
from vlm_fastpath.imaging import resample
from vlm_fastpath.imaging.pillow_pixels import rgbx_copy, rgbx_view
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import rand_array

POOL = ThreadPoolExecutor(2)


def _image(array: np.ndarray, one_block: bool) -> Image.Image:
    with pillow_blocks(one_block):
        return Image.fromarray(array)


def _rgb(rgbx: np.ndarray, image: Image.Image) -> np.ndarray:
    return rgbx.reshape(image.size[1], image.size[0], 4)[:, :, :3]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(width=st.integers(1, 700), height=st.integers(1, 1100), one_block=st.booleans(),
       strips=st.integers(1, 6), pooled=st.booleans(), seed=st.integers(0, 2**16))
def test_copy_equals_asarray(width, height, one_block, strips, pooled, seed):
    image = _image(rand_array(seed, width, height), one_block)
    got = rgbx_copy(image, POOL if pooled else None, strips)
    assert got is not None and not got.flags.writeable
    assert got.shape == (height, width * 4)
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
