"""rgb_rules: what the probe concludes from a processor's behaviour, what each rule does, and
check_compatible standing aside when a transformers converts transparent images differently.

Release-independent, so it runs once (the Qwen suite); exactness under each transformers minor
is tests/transformers_matrix, run in every env of ci/transformers/.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.qwen_integration import (
    FastQwen2VLImageProcessor,
    QwenImageConfig,
    check_compatible,
)
from vlm_fastpath.qwen_integration.errors import (
    QwenConfigError,
    QwenInputError,
    UnsupportedTransparencyError,
)
from vlm_fastpath.qwen_integration.rgb_rules import (
    DROP,
    HONOURED,
    IGNORED,
    UNKNOWN,
    WHITE,
    RgbRules,
    has_transparency,
    on_white,
    probe,
)

from .helpers import CONFIGS, hf_classes, hf_kwargs, rand_array, rand_image

CONFIG = QwenImageConfig.from_dict(CONFIGS["qwen2.5-vl"])


def _on_black(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba).convert("RGB")


def _white_except_palettes(image: Image.Image) -> Image.Image:
    return image.convert("RGB") if image.mode == "P" else _white(image)


def _white(image: Image.Image) -> Image.Image:
    return on_white(image) if has_transparency(image) else image.convert("RGB")


class FakeProcessor:
    """Converts like ``to_rgb`` says, then emits every pixel's colour as patch rows: enough of
    a transformers processor for the probe (uniform images, do_resize=False)."""

    patch_size, merge_size = 14, 2

    def __init__(self, to_rgb: Callable[[Image.Image], Image.Image], reads_rgba: bool) -> None:
        self.to_rgb, self.reads_rgba = to_rgb, reads_rgba

    def __call__(self, images: list[Any], **kwargs: Any) -> dict[str, Any]:
        image = images[0]
        if isinstance(image, np.ndarray):
            if image.shape[-1] == 4 and not self.reads_rgba:
                raise ValueError("Unable to infer channel dimension format")
            pixels = image[..., :3]
        else:
            pixels = np.asarray(self.to_rgb(image))
        flat = pixels.reshape(-1, 3).T  # [3, pixels]: channel blocks, as [C, T, P, P] rows
        return {"pixel_values": flat.reshape(1, -1)}


@pytest.mark.parametrize(
    ("to_rgb", "reads_rgba", "rule", "channels"),
    [
        (lambda im: im.convert("RGB"), False, DROP, (1, 3)),
        (_white, True, WHITE, (1, 3, 4)),
        (_on_black, True, UNKNOWN, (1, 3, 4)),
        (_white_except_palettes, True, UNKNOWN, (1, 3, 4)),
    ],
    ids=["drop", "white", "black", "white-but-not-palettes"],
)
def test_probe_names_the_behaviour(to_rgb, reads_rgba, rule, channels):
    rules = probe(FakeProcessor(to_rgb, reads_rgba), CONFIG)
    assert (rules.transparency, rules.array_channels) == (rule, channels), rules.detail


def test_probe_of_a_failing_processor_is_unknown():
    def boom(image: Image.Image) -> Image.Image:
        raise RuntimeError("transformers bug")

    assert probe(FakeProcessor(boom, False), CONFIG).transparency == UNKNOWN


def _transparent() -> list[Image.Image]:
    rgba = Image.fromarray(rand_array(3, 40, 30, 4))
    palette = rand_image(4, 40, 30).quantize(colors=16)
    palette.info["transparency"] = 2
    return [rgba, rgba.convert("LA"), rgba.convert("PA"), palette]


@pytest.mark.parametrize("mode", ["torchvision", "pil"])
def test_unknown_rule_refuses_only_transparent_images(mode):
    fast = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode=mode,
                                     rgb_rules=RgbRules(UNKNOWN, (1, 3), "test"))
    for image in _transparent():
        with pytest.raises(UnsupportedTransparencyError, match="transparency"):
            fast(images=[image])
    assert issubclass(UnsupportedTransparencyError, QwenInputError)
    fast(images=[rand_image(5, 40, 30), rand_image(6, 40, 30).convert("RGBa")])


@pytest.mark.parametrize("mode", ["torchvision", "pil"])
def test_white_rule_is_the_composite_of_the_same_image(mode):
    fast = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode=mode,
                                     rgb_rules=RgbRules(WHITE, (1, 3, 4), "test"))
    for image in _transparent():
        got = fast(images=[image])["pixel_values"]
        want = fast(images=[on_white(image)])["pixel_values"]
        assert np.array_equal(np.asarray(got), np.asarray(want)), image.mode


def test_four_channel_axis_guess_follows_the_rules():
    """An HWC array 4 rows high: channels-last under (1, 3); under (1, 3, 4) its first axis is
    the channels, as transformers 5.21+ reads it, and 4 channels are refused."""
    array = rand_array(7, 90, 4)
    old = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], rgb_rules=RgbRules(DROP, (1, 3)))
    grid = old(images=[array])["image_grid_thw"]
    assert int(grid[0, 1] * grid[0, 2]) == old.get_number_of_image_patches(4, 90)  # 90 wide
    new = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], rgb_rules=RgbRules(WHITE, (1, 3, 4)))
    with pytest.raises(QwenInputError, match="3 channels"):
        new(images=[array])


# -- check_compatible against a transformers that converts transparent images otherwise -------
def _drifted(mode: str, convert: Callable[[Image.Image], Image.Image]) -> Any:
    """The installed transformers processor, converting PIL images with transparency by
    ``convert`` before its own pipeline (a stand-in for a future release)."""
    hf = hf_classes()[mode](**hf_kwargs(CONFIGS["qwen2.5-vl"]))
    original = getattr(hf, "process_image", None)
    if original is None:
        pytest.skip("this transformers has no process_image to wrap")

    def process_image(self: Any, image: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(image, Image.Image) and has_transparency(image):
            image = convert(image)
        return original(image, *args, **kwargs)

    hf.process_image = types.MethodType(process_image, hf)
    return hf


def _partial_alpha_only(image: Image.Image) -> Image.Image:
    """Like compositing onto white, except that partly transparent pixels keep their colour:
    fully transparent probes cannot tell it from WHITE, partial alpha can."""
    rgba = np.asarray(image.convert("RGBA"))
    white = np.asarray(on_white(image)).copy()
    partial = (rgba[..., 3] > 0) & (rgba[..., 3] < 255)
    white[partial] = rgba[..., :3][partial]
    return Image.fromarray(white)


@pytest.mark.parametrize(
    "convert",
    [_on_black, _white_except_palettes, _partial_alpha_only, on_white],
    ids=["black", "white-but-not-palettes", "partial-alpha", "white"],
)
@pytest.mark.parametrize("mode", ["torchvision", "pil"])
def test_check_compatible_follows_or_stands_aside(mode, convert):
    hf = _drifted(mode, convert)
    reason = check_compatible(hf)
    if convert is on_white:  # a behaviour we reproduce: followed, not refused
        assert reason is None, reason
        assert FastQwen2VLImageProcessor.from_hf(hf).rgb_rules().transparency == WHITE
    else:
        assert reason is not None and ("differs" in reason or "failed" in reason), reason


@pytest.mark.parametrize("mode", ["torchvision", "pil"])
def test_lone_pixel_limits_follow_the_rules(mode):
    """Ignored (transformers <5.18): a lone min_pixels/max_pixels changes nothing, the pair
    still overrides; honoured: it applies; unknown: refused (the engine's processor answers)."""
    image = [rand_image(8, 300, 200)]
    small = {"max_pixels": 28 * 28 * 4}

    def fast(lone: str) -> FastQwen2VLImageProcessor:
        rules = RgbRules(DROP, (1, 3), "test", None, lone)
        return FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode=mode, rgb_rules=rules)

    plain = fast(IGNORED)(images=image)["image_grid_thw"].tolist()
    limited = fast(HONOURED)(images=image, **small)["image_grid_thw"].tolist()
    assert limited != plain and limited[0][1] * limited[0][2] <= 4 * 4
    assert fast(IGNORED)(images=image, **small)["image_grid_thw"].tolist() == plain
    pair = fast(IGNORED)(images=image, min_pixels=3136, **small)["image_grid_thw"].tolist()
    assert pair == limited
    with pytest.raises(QwenConfigError, match="max_pixels alone"):
        fast(UNKNOWN)(images=image, **small)


@pytest.mark.parametrize("uint8", [True, False])
def test_unscaled_dtype_follows_the_rules(uint8):
    """The PIL processor before transformers 5.15 returns the bytes as uint8 when rescale and
    normalize are off, later ones as float32: the same values either way."""
    rules = RgbRules(DROP, (1, 3), "test", uint8)
    fast = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode="pil", rgb_rules=rules)
    out = fast(images=[rand_image(9, 90, 70)], return_tensors="pt", do_rescale=False,
               do_normalize=False)["pixel_values"]
    assert out.dtype == (torch.uint8 if uint8 else torch.float32)
    default = FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"], mode="pil",
                                        rgb_rules=RgbRules(DROP, (1, 3), "test"))
    want = default(images=[rand_image(9, 90, 70)], return_tensors="pt", do_rescale=False,
                   do_normalize=False)["pixel_values"]
    assert torch.equal(out.double(), want.double())
