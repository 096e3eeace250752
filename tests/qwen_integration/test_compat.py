"""``from_hf`` mirrors a live transformers processor; ``check_compatible`` stands aside when
transformers (or torchvision/torch/Pillow under it) computes anything differently."""

from __future__ import annotations

import types

import pytest
import torch

from vlm_fastpath.qwen_integration import (
    FastQwen2VLImageProcessor,
    QwenConfigError,
    check_compatible,
    config_from_hf,
)

from .helpers import CONFIGS, hf_classes, hf_kwargs, rand_image, run_both


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_compatible_with_installed_transformers(mode, config_name):
    hf = hf_classes()[mode](**hf_kwargs(CONFIGS[config_name]))
    assert check_compatible(hf) is None
    fast = FastQwen2VLImageProcessor.from_hf(hf)
    assert fast.mode == mode
    assert fast.size == dict(hf.size)
    assert (fast.patch_size, fast.merge_size, fast.temporal_patch_size) == (
        hf.patch_size, hf.merge_size, hf.temporal_patch_size)
    assert fast.image_mean == tuple(hf.image_mean) and fast.image_std == tuple(hf.image_std)


def _changed(hf, name: str, wrapper):  # noqa: ANN001, ANN202
    original = getattr(hf, name)
    setattr(hf, name, types.MethodType(lambda self, *a, **k: wrapper(original, *a, **k), hf))
    return hf


def _tv_nudge_resize(original, images, *args, **kwargs):  # noqa: ANN001, ANN202
    out = original(images, *args, **kwargs)
    out = out.clone()
    out[..., 0, 0] ^= 1  # one byte off: a resize that changed by one level
    return out


def _pil_nudge_resize(original, image, *args, **kwargs):  # noqa: ANN001, ANN202
    out = original(image, *args, **kwargs).copy()
    out[..., 0, 0] ^= 1
    return out


def _tv_nudge_normalize(original, images, *args, **kwargs):  # noqa: ANN001, ANN202
    out = original(images, *args, **kwargs)
    if out.is_floating_point():
        out = torch.nextafter(out, torch.full_like(out, 10.0))  # one ulp
    return out


def _pil_nudge_normalize(original, image, *args, **kwargs):  # noqa: ANN001, ANN202
    import numpy as np

    out = original(image, *args, **kwargs)
    return np.nextafter(out, np.float32(10.0)).astype(out.dtype)


def _patch_order(original, images, *args, **kwargs):  # noqa: ANN001, ANN202
    patches, gh, gw = original(images, *args, **kwargs)
    flipped = patches.flip(-2) if isinstance(patches, torch.Tensor) else patches[::-1].copy()
    return flipped, gh, gw


CHANGES = {
    "torchvision": [("resize", _tv_nudge_resize), ("rescale_and_normalize", _tv_nudge_normalize),
                    ("patchify", _patch_order)],
    "pil": [("resize", _pil_nudge_resize), ("normalize", _pil_nudge_normalize),
            ("patchify", _patch_order)],
}


@pytest.mark.parametrize("change", range(3), ids=["resize", "normalize", "patch-order"])
def test_detects_a_changed_transformers(mode, change):
    name, wrapper = CHANGES[mode][change]
    hf = _changed(hf_classes()[mode](**hf_kwargs(CONFIGS["qwen2.5-vl"])), name, wrapper)
    reason = check_compatible(hf)
    assert reason is not None and "differs" in reason, reason


def test_detects_a_failing_transformers(mode):
    def boom(original, *args, **kwargs):  # noqa: ANN001, ANN202
        raise RuntimeError("new transformers bug")

    hf = _changed(hf_classes()[mode](**hf_kwargs(CONFIGS["qwen2.5-vl"])), "patchify", boom)
    assert "failed" in check_compatible(hf)


@pytest.mark.parametrize(
    "settings",
    [{"resample": 2}, {"do_pad": True}, {"device": "cuda"}],
    ids=["bilinear", "pad", "cuda"],
)
def test_stands_aside_for_unsupported_settings(mode, settings):
    hf = hf_classes()[mode](**hf_kwargs(CONFIGS["qwen2.5-vl"]))
    for key, value in settings.items():
        setattr(hf, key, value)
    with pytest.raises(QwenConfigError):
        config_from_hf(hf)
    assert check_compatible(hf) is not None


def test_rejects_other_processor_classes():
    class SomeOtherImageProcessor:
        pass

    with pytest.raises(QwenConfigError, match="unsupported"):
        config_from_hf(SomeOtherImageProcessor())
    assert "unsupported" in check_compatible(SomeOtherImageProcessor())


def test_from_hf_follows_later_attribute_changes_only_when_rebuilt(mode):
    """from_hf copies settings (the engines build processors once, then call them)."""
    hf = hf_classes()[mode](**hf_kwargs(CONFIGS["qwen2.5-vl"]))
    fast = FastQwen2VLImageProcessor.from_hf(hf)
    images = [rand_image(1, 300, 220)]
    run_both(hf, fast, images)
    hf.image_mean = (0.1, 0.2, 0.3)
    run_both(hf, FastQwen2VLImageProcessor.from_hf(hf), images)
