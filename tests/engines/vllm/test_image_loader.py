"""vLLM's ``ImageMediaIO.load_bytes``: every bad image is a ``ValueError`` (HTTP 400)."""

from __future__ import annotations

import pytest
from PIL import Image

import vlm_fastpath
from tests.support import bad_images

NAME = "vllm-image-loader-client-errors"
BAD = {
    "bomb": bad_images.bomb_png(),
    "truncated-jpeg": bad_images.truncated(bad_images.jpeg_bytes(256, 256)),
    "garbage": bad_images.garbage(),
}


def _io():
    from vllm.multimodal.media.image import ImageMediaIO

    return ImageMediaIO()


def _status() -> str:
    return next(r["status"] for r in vlm_fastpath.status("vllm") if r["name"] == NAME)


def test_status():
    assert _status() == "applied"


def test_bomb_escapes_as_a_non_value_error_without_the_patch():
    vlm_fastpath.revert("vllm")
    with pytest.raises(Image.DecompressionBombError):
        _io().load_bytes(BAD["bomb"])


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_bad_image_is_a_value_error(name):
    with pytest.raises(ValueError, match="Failed to load image") as info:
        _io().load_bytes(BAD[name])
    if name == "bomb":
        assert "decompression bomb" in str(info.value)
        assert isinstance(info.value.__cause__, Image.DecompressionBombError)


def test_good_image_is_the_releases():
    data = bad_images.png_bytes(40, 30)
    vlm_fastpath.revert("vllm")
    theirs = _io().load_bytes(data)
    vlm_fastpath.apply("vllm")
    ours = _io().load_bytes(data)
    assert ours.media.tobytes() == theirs.media.tobytes()
    assert ours.media.size == (40, 30)


def test_revert_restores_the_original():
    from vllm.multimodal.media.image import ImageMediaIO

    vlm_fastpath.revert("vllm")
    original = ImageMediaIO.__dict__["load_bytes"]
    vlm_fastpath.apply("vllm")
    assert ImageMediaIO.__dict__["load_bytes"] is not original
    vlm_fastpath.revert("vllm")
    assert ImageMediaIO.__dict__["load_bytes"] is original
