"""vLLM's own Qwen2.5-VL / Qwen3-VL processors hand out our video processor, same outputs.

The processors are the ones vLLM builds for a local tiny checkpoint; every comparison runs
vLLM's whole ``apply`` on a video request (HF processor call, field configs, prompt
replacement, Qwen3-VL's timestamps) with the plugin and without it (after ``revert``) in the
same process, on the same processor object.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import vlm_fastpath
from vlm_fastpath.patches.adapters import qwen_video_twin as video_adapter

vllm = pytest.importorskip("vllm")

VIDEO_PATCH = "vllm-qwen-vl-video-processor"
IMAGE_PATCH = "vllm-qwen-vl-image-processor"
PROMPT_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


def _clip(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (frames, -(-height // 8), -(-width // 8), 3))
    big = np.repeat(np.repeat(small, 8, axis=1), 8, axis=2)[:, :height, :width]
    noise = rng.integers(0, 32, (frames, height, width, 3))
    return np.clip(big + noise, 0, 255).astype(np.uint8)


def _item(clip: np.ndarray, fps: float = 4.0) -> tuple[np.ndarray, dict[str, object]]:
    frames = len(clip)
    return clip, {"fps": fps, "duration": frames / fps, "total_num_frames": frames,
                  "frames_indices": list(range(frames)), "video_backend": "opencv",
                  "do_sample_frames": False}


def _videos() -> list[tuple[np.ndarray, dict[str, object]]]:
    return [_item(_clip(1, 6, 240, 320)), _item(_clip(2, 5, 97, 131))]  # even, odd frames


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    from fixtures import qwen_checkpoint

    root = tmp_path_factory.mktemp("qwen-video-ckpt")
    found = {"qwen2.5": qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN25)}
    try:
        found["qwen3"] = qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN3)
    except ImportError:
        pass
    return found


def _model_config(path: Path):
    from vllm.config import ModelConfig

    return ModelConfig(model=str(path), tokenizer=str(path), dtype="float32", max_model_len=32768)


@pytest.fixture(scope="session")
def processors(checkpoints):
    from vllm.multimodal import MULTIMODAL_REGISTRY

    built = {}
    for name, path in checkpoints.items():
        try:
            config = _model_config(path)
        except Exception as exc:  # noqa: BLE001 - e.g. a release without Qwen3-VL
            if name == "qwen2.5":
                raise
            print(f"no {name} processor on vllm {vllm.__version__}: {exc}")
            continue
        built[name] = (config, MULTIMODAL_REGISTRY.create_processor(config))
    return built


@pytest.fixture()
def fresh_decisions():
    video_adapter.forget_views()
    yield
    video_adapter.forget_views()


def _run(processor, videos, **mm_kwargs) -> dict[str, object]:
    """vLLM's ``apply`` on one prompt with ``videos``: every tensor and the prompt tokens."""
    prompt = "Describe " + " and ".join([PROMPT_VIDEO] * len(videos)) + "."
    items = processor.info.parse_mm_data({"video": videos})
    out = processor(prompt, items, hf_processor_mm_kwargs=mm_kwargs)
    flat: dict[str, object] = {"prompt_token_ids": list(out["prompt_token_ids"])}
    for modality, entries in out["mm_kwargs"].items():
        for index, item in enumerate(entries):
            for key, field in item.items():
                flat[f"{modality}.{index}.{key}"] = getattr(field, "data", field)
    flat["placeholders"] = [(p.offset, p.length) for p in out["mm_placeholders"].get("video", [])]
    return flat


def _assert_same(ours: dict[str, object], theirs: dict[str, object]) -> None:
    assert ours.keys() == theirs.keys()
    for key, want in theirs.items():
        got = ours[key]
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def _video_processor(processor):
    return processor.info.get_hf_processor().video_processor


def _status() -> dict[str, dict]:
    return {r["name"]: r for r in vlm_fastpath.status("vllm")}


def _with_and_without(processor, videos, **kwargs) -> None:
    with_plugin = _run(processor, videos, **kwargs)
    vlm_fastpath.revert("vllm")
    try:
        assert not video_adapter.is_twin(_video_processor(processor))
        without = _run(processor, videos, **kwargs)
    finally:
        vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)
    pixels = [v for k, v in without.items() if k.endswith("pixel_values_videos")]
    assert pixels, sorted(without)


def test_status(processors):
    for _, processor in processors.values():
        _video_processor(processor)  # handed out: the status names the model
    status = _status()[VIDEO_PATCH]
    assert status["status"] == "applied", status
    assert "serves Qwen2_5_VLForConditionalGeneration" in status["reason"], status
    if "qwen3" in processors:
        assert "Qwen3VLForConditionalGeneration" in status["reason"], status


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_engine_hands_out_ours_and_outputs_are_equal(processors, name, fresh_decisions):
    if name not in processors:
        pytest.skip(f"no {name} processor on vllm {vllm.__version__}")
    _, processor = processors[name]
    twin = _video_processor(processor)
    assert video_adapter.is_twin(twin), (type(twin), _status()[VIDEO_PATCH])
    assert isinstance(twin, type(twin.vlm_original()))
    assert twin.__dict__ is twin.vlm_original().__dict__  # one set of settings
    calls = []
    original = type(twin).__mro__[1].preprocess

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return original(self, *args, **kwargs)

    from vlm_fastpath.qwen_integration import video_processor

    kernel_runs = []
    fill = video_processor.fill_videos
    type(twin).__mro__[1].preprocess = spy
    video_processor.fill_videos = lambda *a, **k: kernel_runs.append(1) or fill(*a, **k)
    try:
        with_plugin = _run(processor, _videos())
    finally:
        type(twin).__mro__[1].preprocess = original
        video_processor.fill_videos = fill
    assert calls, "vLLM did not call our video processor"
    assert kernel_runs, "our video processor left the frames to transformers' own path"
    vlm_fastpath.revert("vllm")
    without = _run(processor, _videos())
    vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)


@pytest.mark.parametrize("normalize_on_device", [False, True], ids=["float32", "uint8"])
@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_float32_and_device_normalize(processors, monkeypatch, name, normalize_on_device,
                                      fresh_decisions):
    if name not in processors:
        pytest.skip(f"no {name} processor on vllm {vllm.__version__}")
    config, processor = processors[name]
    mm = config.multimodal_config
    if not hasattr(mm, "mm_device_do_normalize"):
        if normalize_on_device:
            pytest.skip(f"vllm {vllm.__version__} has no device-side normalization")
    else:
        monkeypatch.setattr(mm, "mm_device_do_normalize", normalize_on_device)
    _with_and_without(processor, _videos()[:1])


def test_size_overrides(processors, fresh_decisions):
    _, processor = processors["qwen2.5"]
    for kwargs in ({"max_pixels": 64 * 28 * 28}, {"min_pixels": 300 * 28 * 28},
                   {"size": {"shortest_edge": 3136, "longest_edge": 100 * 28 * 28}}):
        _with_and_without(processor, _videos(), **kwargs)


def test_probe_difference_keeps_vllms(processors, monkeypatch, fresh_decisions):
    from vlm_fastpath.qwen_integration import video_compat

    _, processor = processors["qwen2.5"]
    monkeypatch.setattr(video_compat, "check_video_compatible",
                        lambda hf, fast=None: "pixel_values_videos differ")
    assert not video_adapter.is_twin(_video_processor(processor))
    assert "pixel_values_videos differ" in _status()[VIDEO_PATCH]["reason"]
    _with_and_without(processor, _videos()[:1])


def test_bad_video_is_a_value_error(processors, fresh_decisions):
    _, processor = processors["qwen2.5"]
    empty = _item(np.zeros((0, 64, 64, 3), np.uint8))
    with pytest.raises(ValueError):
        _run(processor, [empty])


def test_skipping_the_image_patch_skips_this(processors, monkeypatch, fresh_decisions):
    from vllm.multimodal.processing.context import InputProcessingContext

    vlm_fastpath.revert("vllm")
    original = InputProcessingContext.__dict__["get_hf_processor"]
    monkeypatch.setenv("VLM_FASTPATH_SKIP", IMAGE_PATCH)
    vlm_fastpath.apply("vllm")
    try:
        assert _status()[VIDEO_PATCH]["status"] == "not-needed"
        assert InputProcessingContext.__dict__["get_hf_processor"] is original
    finally:
        vlm_fastpath.revert("vllm")
        monkeypatch.undo()
        vlm_fastpath.apply("vllm")
    assert _status()[VIDEO_PATCH]["status"] == "applied"
