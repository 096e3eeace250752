"""Compact image rows (each patch once): expanded, they are transformers' rows exactly.

References: transformers' own Qwen2-VL processors (torchvision and PIL backends; where
torchvision is installed, as in the Qwen suite's env) and, for the layout alone, a tiling
written with ``torch.stack`` (not the module's broadcast).
"""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, QwenImageConfig, compact

from .helpers import jpeg_roundtrip, rand_image, smooth_image


def _tiled(planes: torch.Tensor, temporal: int) -> torch.Tensor:
    """``[n, C, P, P]`` as full rows: each plane repeated after its channel, as transformers
    tiles an image ``temporal_patch_size`` times."""
    rows, channels, patch = planes.shape[0], planes.shape[1], planes.shape[2]
    return torch.stack([planes] * temporal, dim=2).reshape(rows, channels * temporal * patch**2)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 9), channels=st.integers(1, 4), temporal=st.integers(1, 4),
       patch=st.integers(1, 6), uint8=st.booleans(), seed=st.integers(0, 2**16))
def test_expand_is_the_tiling_and_compact_its_inverse(rows, channels, temporal, patch, uint8,
                                                      seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (rows, channels, patch, patch)
    planes = (torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8) if uint8
              else torch.randn(shape, generator=gen))
    narrow = planes.reshape(rows, channels * patch * patch)
    full = _tiled(planes, temporal)
    assert torch.equal(compact.expand(narrow, channels, temporal, patch), full)
    cut = compact.compact(full, channels, temporal, patch)
    assert cut is not None and cut.is_contiguous() and torch.equal(cut, narrow)
    assert compact.is_compact(narrow, channels, temporal, patch) == (temporal > 1)
    assert not compact.is_compact(full, channels, temporal, patch) or temporal == 1


def test_rows_whose_copies_differ_are_not_cut():
    full = _tiled(torch.randn(5, 3, 4, 4), 2)
    full[3, 16 + 5] += 1  # channel 0, second temporal copy
    assert compact.compact(full, 3, 2, 4) is None


def test_emitting_is_scoped_to_its_context():
    seen = []
    assert not compact.wanted()
    with pytest.raises(RuntimeError), compact.emitting():
        assert compact.wanted()
        thread = threading.Thread(target=lambda: seen.append(compact.wanted()))
        thread.start()
        thread.join()
        raise RuntimeError("left by an exception")
    assert not compact.wanted()
    assert seen == [False]  # another thread's calls are not asked for compact rows


def _images():
    return [rand_image(1, 333, 517), smooth_image(2, 1024, 768), jpeg_roundtrip(
        smooth_image(3, 640, 481)), rand_image(4, 56, 56)]


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_compact_rows_expand_to_transformers_rows(pairs, mode, uint8):
    """Our compact rows, expanded, equal transformers' rows (``torch.equal``), several images
    of different sizes in one call, both configs, both backends."""
    kwargs = {"do_rescale": False, "do_normalize": False} if uint8 else {}
    for config in ("qwen2.5-vl", "qwen3-vl"):
        hf, fast = pairs[(mode, config)]
        images = _images()
        expected = hf(images=images, return_tensors="pt", **kwargs)
        with compact.emitting():
            got = fast(images=images, return_tensors="pt", **kwargs)
        width = 3 * fast.patch_size**2
        assert got["pixel_values"].shape == (expected["pixel_values"].shape[0], width)
        assert got["pixel_values"].dtype == expected["pixel_values"].dtype
        assert torch.equal(
            compact.expand(got["pixel_values"], 3, fast.temporal_patch_size, fast.patch_size),
            expected["pixel_values"])
        assert torch.equal(got["image_grid_thw"], expected["image_grid_thw"])


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_compact_rows_are_the_full_rows_first_copy(uint8):
    """Without transformers: our compact call against our own full call (every kernel path:
    one image, several, a size already in whole patches)."""
    kwargs = {"do_rescale": False, "do_normalize": False} if uint8 else {}
    fast = FastQwen2VLImageProcessor(QwenImageConfig(max_pixels=4 * 1024 * 1024))
    for images in (_images()[:1], _images(), [rand_image(5, 448, 224)]):
        full = fast(images, return_tensors="pt", **kwargs)
        with compact.emitting():
            narrow = fast(images, return_tensors="pt", **kwargs)
        assert torch.equal(compact.expand(narrow["pixel_values"], 3, 2, 14),
                           full["pixel_values"])
        assert torch.equal(narrow["image_grid_thw"], full["image_grid_thw"])
    assert fast(_images()[:1])["pixel_values"].shape[1] == 3 * 2 * 14 * 14  # scope ended
