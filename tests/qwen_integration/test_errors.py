"""Bad input gives a clear ValueError subclass: no crash, no silent garbage."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.qwen_integration import (
    AspectRatioError,
    FastQwen2VLImageProcessor,
    QwenConfigError,
    QwenImageTooLargeError,
    QwenInputError,
    QwenProcessorError,
)

from .helpers import CONFIGS, rand_array, rand_image


@pytest.fixture(scope="module", params=["torchvision", "pil"])
def fast(request: pytest.FixtureRequest) -> FastQwen2VLImageProcessor:
    return FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode=request.param)


BAD_INPUTS = {
    "float-array": rand_array(1, 40, 30).astype(np.float32),
    "nan-array": np.full((30, 40, 3), np.nan, dtype=np.float32),
    "float-tensor": torch.rand(3, 30, 40),
    "int64-array": rand_array(1, 40, 30).astype(np.int64),
    "bool-array": np.ones((30, 40, 3), dtype=bool),
    "gray-2d-array": rand_array(1, 40, 30, 0),
    "rgba-array": rand_array(1, 40, 30, 4),
    "1-channel-array": rand_array(1, 40, 30, 1),
    "1d-array": np.zeros(10, dtype=np.uint8),
    "zero-size-array": np.zeros((0, 40, 3), dtype=np.uint8),
    "zero-size-tensor": torch.zeros((3, 0, 4), dtype=torch.uint8),
    "string": "not an image",
    "bytes": b"\x89PNG",
    "none-in-list": [None],
    "dict": {"image": 1},
    "empty-list": [],
    "aspect-ratio-201": rand_image(1, 201, 1),
    "aspect-ratio-8000x20": rand_image(1, 8000, 20),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_inputs_raise_value_errors(fast, name):
    with pytest.raises(QwenInputError):
        fast(images=BAD_INPUTS[name])
    assert issubclass(QwenInputError, ValueError)


def test_aspect_ratio_error_type(fast):
    with pytest.raises(AspectRatioError, match="aspect ratio must be smaller than 200"):
        fast(images=[rand_image(2, 20, 8000)])


def test_zero_size_pil_image(fast):
    with pytest.raises(QwenInputError, match="zero size"):
        fast(images=[Image.new("RGB", (0, 5))])


def test_decompression_bomb(fast, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(QwenImageTooLargeError):
        fast(images=[rand_image(1, 30, 30)])


def test_videos_are_refused(fast):
    with pytest.raises(QwenInputError, match="video"):
        fast(images=None, videos=[[rand_image(1, 30, 30)]])


def test_not_divisible_without_resize(fast):
    with pytest.raises(QwenInputError, match="multiple"):
        fast(images=[rand_image(1, 30, 30)], do_resize=False)
    out = fast(images=[rand_image(1, 56, 84)], do_resize=False)
    assert out["image_grid_thw"].tolist() == [[1, 6, 4]]


@pytest.mark.parametrize(
    "kwargs",
    [{"resample": 2}, {"image_std": [0.5, 0.0, 0.5]}, {"patch_size": 0}, {"merge_size": -1},
     {"image_mean": [0.5, 0.5]}, {"min_pixels": "a lot"}, {"device": "cuda"},
     {"return_tensors": "tf"}],
)
def test_bad_settings(fast, kwargs):
    with pytest.raises(QwenConfigError):
        fast(images=[rand_image(1, 60, 60)], **kwargs)


def test_bad_config_file(tmp_path):
    with pytest.raises(QwenConfigError):
        FastQwen2VLImageProcessor.from_pretrained(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(QwenConfigError):
        FastQwen2VLImageProcessor.from_pretrained(tmp_path)


def test_every_error_is_a_value_error():
    for cls in (QwenConfigError, QwenInputError, AspectRatioError, QwenImageTooLargeError):
        assert issubclass(cls, QwenProcessorError) and issubclass(cls, ValueError)


def test_truncated_jpeg(fast):
    import io

    buf = io.BytesIO()
    rand_image(3, 200, 200).save(buf, format="JPEG")
    truncated = Image.open(io.BytesIO(buf.getvalue()[: len(buf.getvalue()) // 3]))
    with pytest.raises(QwenInputError):
        fast(images=[truncated])
