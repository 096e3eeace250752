"""The device resize of deferred preprocessing against Pillow (the checkpoint's resize)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from vlm_fastpath.kimi_integration.deferred import (
    mismatch_histogram,
    pillow_resize,
    torch_antialias_resize,
)
from vlm_fastpath.kimi_integration.deferred.resize import pillow_coefficients, vertical_first

from .helpers import rand_array


def _pil(array: np.ndarray, w: int, h: int) -> torch.Tensor:
    out = np.array(Image.fromarray(array).resize((w, h), Image.Resampling.BICUBIC))
    if out.ndim == 2:
        out = out[:, :, None]
    return torch.from_numpy(out).permute(2, 0, 1)


def _chw(array: np.ndarray) -> torch.Tensor:
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


SIZES = [
    (517, 389, 300, 200),  # both shrink, horizontal first
    (300, 900, 280, 300),  # height shrinks a lot: vertical first on Pillow 13
    (389, 517, 389, 200),  # height only
    (517, 389, 200, 389),  # width only
    (61, 47, 150, 120),  # both grow
    (100, 300, 400, 200),  # width grows, height shrinks: vertical first
    (300, 100, 200, 400),  # width shrinks, height grows
    (1531, 1203, 1001, 787),  # a Kimi video-frame plan
    (7, 5, 3, 2),
    (1, 1, 1, 1),
    (40, 1, 13, 1),
]


@pytest.mark.parametrize("size", SIZES, ids=[f"{a}x{b}-{c}x{d}" for a, b, c, d in SIZES])
@pytest.mark.parametrize("channels", [0, 3])
def test_pillow_resize_bit_exact(size, channels):
    w, h, ow, oh = size
    array = rand_array(sum(size) + channels, w, h, channels)
    assert torch.equal(pillow_resize(_chw(array), ow, oh), _pil(array, ow, oh))


@pytest.mark.slow
def test_pillow_resize_kimi_size_2048():
    array = rand_array(1, 2048, 2048, 3)
    assert torch.equal(pillow_resize(_chw(array), 1795, 1795), _pil(array, 1795, 1795))


def test_batched_equals_single():
    arrays = [rand_array(i, 300, 200, 3) for i in range(3)]
    batch = torch.stack([_chw(a) for a in arrays])
    out = pillow_resize(batch, 170, 90)
    for i, array in enumerate(arrays):
        assert torch.equal(out[i], _pil(array, 170, 90))


def test_pass_order_matters_and_follows_the_version():
    assert vertical_first(300, 900, 280, 300, (13, 0, 0))
    assert not vertical_first(300, 900, 280, 300, (12, 2, 0))
    assert not vertical_first(100, 100, 150, 300, (13, 0, 0))  # growing height never first
    array = rand_array(5, 300, 900, 3)
    old = pillow_resize(_chw(array), 280, 300, version=(12, 2, 0))
    new = pillow_resize(_chw(array), 280, 300, version=(13, 0, 0))
    assert not torch.equal(old, new)  # the 8-bit intermediate differs


def test_coefficients_are_normalized_fixed_point():
    xmin, count, weights = pillow_coefficients(2048, 1795)
    sums = weights.astype(np.int64).sum(axis=1)
    assert np.all(np.abs(sums - (1 << 22)) <= weights.shape[1])
    assert xmin.min() == 0 and (xmin + count).max() == 2048


@settings(max_examples=40, deadline=None)
@given(
    w=st.integers(1, 90), h=st.integers(1, 90), ow=st.integers(1, 120), oh=st.integers(1, 120),
    seed=st.integers(0, 2**16),
)
def test_pillow_resize_property(w, h, ow, oh, seed):
    array = rand_array(seed, w, h, 3)
    assert torch.equal(pillow_resize(_chw(array), ow, oh), _pil(array, ow, oh))


def test_torch_antialias_within_one_level_on_a_photo():
    from skimage import data

    photo = np.array(Image.fromarray(data.astronaut()).resize((1024, 1024)))
    hist = mismatch_histogram(torch_antialias_resize(_chw(photo), 700, 600),
                              _pil(photo, 700, 600))
    assert hist.within_one >= 0.999, hist.row()


def test_input_validation():
    with pytest.raises(TypeError):
        pillow_resize(torch.zeros((3, 4, 4)), 2, 2)
    with pytest.raises(TypeError):
        torch_antialias_resize(torch.zeros((3, 4, 4)), 2, 2)
    with pytest.raises(ValueError):
        pillow_coefficients(0, 3)
