"""KimiMediaConfig / FusedKimiProcessor construction from dicts and checkpoint folders."""

from __future__ import annotations

import json

import pytest

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG
from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiMediaConfig
from vlm_fastpath.kimi_integration.errors import KimiConfigError

from .helpers import assert_parity, img, rand_image, video

# Non-default everywhere, so a field that is silently ignored changes the output.
CUSTOM_CFG = dict(
    CLIP_CFG,
    patch_size=16,
    merge_kernel_size=[3, 3],
    in_patch_limit=700,
    patch_limit_on_one_side=40,
    in_patch_limit_each_frame=300,
    in_patch_limit_video=1001,
    temporal_merge_kernel_size=2,
)


def _write_checkpoint(folder, payload) -> None:
    (folder / "preprocessor_config.json").write_text(json.dumps(payload), encoding="utf-8")


def _checkpoint_payload(cfg):
    return {
        "auto_map": {"AutoProcessor": "kimi_k25_processor.KimiK25Processor"},
        "processor_class": "KimiK25Processor",
        "media_proc_cfg": cfg,
    }


def test_config_from_pretrained_folder(tmp_path):
    _write_checkpoint(tmp_path, _checkpoint_payload(CUSTOM_CFG))
    cfg = KimiMediaConfig.from_pretrained(tmp_path)
    assert cfg.patch_size == 16
    assert cfg.merge_kernel_size == 3  # [3, 3] means 3
    assert cfg.in_patch_limit == 700
    assert cfg.patch_limit_on_one_side == 40
    assert cfg.fixed_output_tokens is None
    assert cfg.in_patch_limit_each_frame == 300
    assert cfg.in_patch_limit_video == 1001
    assert cfg.temporal_merge_kernel_size == 2
    assert cfg.image_mean == tuple(CLIP_CFG["image_mean"])
    assert cfg.image_std == tuple(CLIP_CFG["image_std"])
    # str paths and the file itself work too
    assert KimiMediaConfig.from_pretrained(str(tmp_path)) == cfg
    assert KimiMediaConfig.from_pretrained(tmp_path / "preprocessor_config.json") == cfg


def test_kimi_defaults_match_checkpoint():
    """The dataclass defaults are the K2.5 checkpoint's media_proc_cfg (spec section 4)."""
    assert KimiMediaConfig() == KimiMediaConfig.from_dict(KIMI_K25_CFG)


def test_config_flat_json_without_media_proc_cfg_key(tmp_path):
    _write_checkpoint(tmp_path, KIMI_K25_CFG)
    assert KimiMediaConfig.from_pretrained(tmp_path) == KimiMediaConfig.from_dict(KIMI_K25_CFG)


def test_processor_from_pretrained_uses_the_file(tmp_path):
    _write_checkpoint(tmp_path, _checkpoint_payload(CUSTOM_CFG))
    proc = FusedKimiProcessor.from_pretrained(tmp_path)
    assert proc.num_frames_per_chunk == 2
    frames = [rand_image(i, 900, 500) for i in range(3)]
    medias = [img(rand_image(9, 1300, 700)), video(frames), img(rand_image(10, 7, 300))]
    assert_parity(proc, medias, CUSTOM_CFG)
    assert_parity(proc, medias, CUSTOM_CFG, uint8=True)


def test_processor_from_dict_variants():
    image = rand_image(11, 333, 444)
    for source in (
        CUSTOM_CFG,
        {"media_proc_cfg": CUSTOM_CFG, "other": 1},
        KimiMediaConfig.from_dict(CUSTOM_CFG),
    ):
        proc = (
            FusedKimiProcessor(source)
            if isinstance(source, KimiMediaConfig)
            else FusedKimiProcessor.from_dict(source)
        )
        assert_parity(proc, [img(image)], CUSTOM_CFG)


def test_to_dict_round_trip():
    cfg = KimiMediaConfig.from_dict(CUSTOM_CFG)
    as_dict = cfg.to_dict()
    json.dumps(as_dict)  # JSON-serializable, like the checkpoint's file
    assert KimiMediaConfig.from_dict(as_dict) == cfg
    assert as_dict["merge_kernel_size"] == 3
    assert FusedKimiProcessor(CUSTOM_CFG).media_proc_cfg == as_dict


def test_scalar_mean_std_and_unknown_keys():
    cfg = dict(KIMI_K25_CFG, image_mean=0.5, image_std=0.5, some_future_key={"x": 1})
    assert KimiMediaConfig.from_dict(cfg) == KimiMediaConfig.from_dict(KIMI_K25_CFG)


def test_optional_keys_default():
    required = ("patch_size", "merge_kernel_size", "in_patch_limit", "patch_limit_on_one_side")
    cfg = {k: KIMI_K25_CFG[k] for k in (*required, "image_mean", "image_std")}
    parsed = KimiMediaConfig.from_dict(cfg)
    assert parsed.fixed_output_tokens is None
    assert parsed.in_patch_limit_video is None
    assert parsed.temporal_merge_kernel_size == 4


def test_from_pretrained_missing_file(tmp_path):
    with pytest.raises(KimiConfigError, match="no preprocessor config"):
        KimiMediaConfig.from_pretrained(tmp_path)
    with pytest.raises(KimiConfigError, match="no preprocessor config"):
        FusedKimiProcessor.from_pretrained(tmp_path / "nope")


def test_from_pretrained_bad_json(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(KimiConfigError, match="not valid JSON"):
        KimiMediaConfig.from_pretrained(tmp_path)


def test_from_pretrained_json_not_an_object(tmp_path):
    _write_checkpoint(tmp_path, [1, 2, 3])
    with pytest.raises(KimiConfigError, match="JSON object"):
        FusedKimiProcessor.from_pretrained(tmp_path)


def test_from_pretrained_incomplete_media_proc_cfg(tmp_path):
    cfg = {k: v for k, v in KIMI_K25_CFG.items() if k != "in_patch_limit"}
    _write_checkpoint(tmp_path, _checkpoint_payload(cfg))
    with pytest.raises(KimiConfigError, match="in_patch_limit"):
        FusedKimiProcessor.from_pretrained(tmp_path)
