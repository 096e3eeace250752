"""Every vLLM model whose processor holds transformers' Qwen-VL image or video processor gets
ours, through vLLM's own entry points (issue #50).

Each architecture is a tiny local checkpoint (``fixtures/vllm_arch_checkpoints.py``) loaded by
vLLM's ``ModelConfig`` and ``MULTIMODAL_REGISTRY.create_processor``; one image (and one video
where the model takes video) goes through vLLM's whole ``apply`` with the plugin and after
``revert``. Our processor must have produced the pixels (a spy on its call, not the class
handed out), and every output (pixel values, grids, prompt ids, placeholders) must be equal.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from packaging.version import Version
from PIL import Image

import vlm_fastpath
from fixtures import vllm_arch_checkpoints as archs
from vlm_fastpath.patches.adapters import qwen_twin, qwen_video_twin
from vlm_fastpath.patches.core.registry import REGISTRY

vllm = pytest.importorskip("vllm")

IMAGE_PATCH = "vllm-qwen-vl-image-processor"
VIDEO_PATCH = "vllm-qwen-vl-video-processor"
IMAGE_ARCHS = sorted(name for name in archs.ARCHS if name not in archs.missing)
VIDEO_ARCHS = sorted(name for name in IMAGE_ARCHS if archs.ARCHS[name].prompt_video)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("arch-ckpt")


_BUILT: dict[str, object] = {}


def _processor(root: Path, name: str):
    """vLLM's multimodal processor for the architecture (built once; skipped where this
    release has no such model)."""
    if name in _BUILT:
        return _BUILT[name]
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    arch = archs.ARCHS[name]
    if arch.min_vllm and Version(vllm.__version__) < Version(arch.min_vllm):
        pytest.skip(f"{arch.architecture} is served from vllm {arch.min_vllm} "
                    f"(checkpoint fixture: {arch.min_vllm} is its first working anchor)")
    try:
        path = archs.ensure(root, name)
        config = ModelConfig(model=str(path), tokenizer=str(path), dtype="float32",
                             max_model_len=8192, trust_remote_code=arch.trust_remote_code)
        processor = MULTIMODAL_REGISTRY.create_processor(config)
    except Exception as exc:  # noqa: BLE001 - a release without this model
        pytest.skip(f"{arch.architecture} on vllm {vllm.__version__}: "
                    f"{type(exc).__name__}: {str(exc)[:200]}")
    _BUILT[name] = processor
    return processor


def _image() -> Image.Image:
    rng = np.random.default_rng(7)
    return Image.fromarray(rng.integers(0, 256, (333, 517, 3), dtype=np.uint8))


def _video():
    rng = np.random.default_rng(8)
    clip = rng.integers(0, 256, (4, 160, 224, 3), dtype=np.uint8)
    meta = {"fps": 2.0, "duration": 2.0, "total_num_frames": 4, "frames_indices": [0, 1, 2, 3],
            "video_backend": "opencv", "do_sample_frames": False}
    return (clip, meta)


def _run(processor, modality: str, prompt: str, item) -> dict[str, object]:
    items = processor.info.parse_mm_data({modality: [item]})
    out = processor(f"Describe {prompt} please.", items, hf_processor_mm_kwargs={})
    flat: dict[str, object] = {"prompt_token_ids": list(out["prompt_token_ids"])}
    for mod, entries in out["mm_kwargs"].items():
        for index, entry in enumerate(entries):
            for key, field in entry.items():
                flat[f"{mod}.{index}.{key}"] = getattr(field, "data", field)
    flat["placeholders"] = {m: [(p.offset, p.length) for p in v]
                            for m, v in out["mm_placeholders"].items()}
    return flat


def _assert_same(ours: dict[str, object], theirs: dict[str, object]) -> None:
    assert ours.keys() == theirs.keys()
    for key, want in theirs.items():
        got = ours[key]
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def _with_and_without(processor, modality: str, prompt: str, item,
                      patch: str = IMAGE_PATCH) -> tuple[dict[str, object], dict[str, str]]:
    """The outputs with the plugin (equal to those after ``revert``) and what ``patch``'s
    status recorded per model while it served them."""
    with_plugin = _run(processor, modality, prompt, item)
    served = REGISTRY.served(patch)
    vlm_fastpath.revert("vllm")
    try:
        without = _run(processor, modality, prompt, item)
    finally:
        vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)
    return with_plugin, served


@pytest.fixture()
def image_calls(monkeypatch):
    """Every call of our image processor (a spy on the class: whatever object serves it)."""
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    calls: list[int] = []
    original = FastQwen2VLImageProcessor.preprocess

    def preprocess(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FastQwen2VLImageProcessor, "preprocess", preprocess)
    return calls


@pytest.fixture()
def video_kernel_runs(monkeypatch):
    """Every run of our video kernel (our processor left nothing to transformers' path)."""
    from vlm_fastpath.qwen_integration import video_processor

    runs: list[int] = []
    fill = video_processor.fill_videos
    monkeypatch.setattr(video_processor, "fill_videos",
                        lambda *a, **k: runs.append(1) or fill(*a, **k))
    return runs


def _handed_out(processor, calls: list[int]) -> None:
    """Have vLLM hand the HF processor out once (the probes of a first hand-out run ours on
    probe images), then forget those calls: what is counted after is the request's."""
    processor.info.get_hf_processor()
    calls.clear()


@pytest.mark.parametrize("name", IMAGE_ARCHS)
def test_every_model_holding_the_image_processor_gets_ours(root, name, image_calls):
    arch = archs.ARCHS[name]
    processor = _processor(root, name)
    _handed_out(processor, image_calls)
    out, served = _with_and_without(processor, "image", arch.prompt_image, _image())
    assert any(key.startswith("image.") for key in out), sorted(out)
    assert image_calls, f"{arch.architecture}: vLLM's apply did not run our image processor"
    assert served.get(arch.architecture) == "", served


@pytest.mark.parametrize("name", VIDEO_ARCHS)
def test_every_model_holding_the_video_processor_gets_ours(root, name, video_kernel_runs):
    arch = archs.ARCHS[name]
    processor = _processor(root, name)
    _handed_out(processor, video_kernel_runs)
    out, served = _with_and_without(processor, "video", arch.prompt_video, _video(),
                                    VIDEO_PATCH)
    assert any(key.startswith("video.") for key in out), sorted(out)
    assert video_kernel_runs, f"{arch.architecture}: vLLM's apply did not run our video kernel"
    assert served.get(arch.architecture) == "", served


def _qwen25(root: Path):
    return _processor(root, "qwen2.5-vl")


def test_settings_changed_after_hand_out_are_followed(root, image_calls):
    """D3's pattern: ``processor.image_processor.size`` set on what vLLM handed out. Ours
    follows it (a new decision, probed), so the pixels are the engine's for that size."""
    processor = _qwen25(root)
    image_processor = processor.info.get_hf_processor().image_processor
    assert qwen_twin.is_twin(image_processor)
    saved = copy.deepcopy(image_processor.size)
    try:
        image_processor.size = {"shortest_edge": 56 * 56, "longest_edge": 112 * 112}
        assert image_processor.vlm_original().size == image_processor.size  # one setting
        image_processor.vlm_fast()  # the new settings probed (ours runs on probe images)
        image_calls.clear()
        out, _ = _with_and_without(processor, "image", archs.QWEN_IMAGE, _image())
        assert image_calls, "ours handed the changed settings to transformers"
        grid = out["image.0.image_grid_thw"]
        assert int(grid.prod()) * 14 * 14 <= 112 * 112, grid  # the new limit took effect
    finally:
        image_processor.size = saved


def test_copies_of_twins_are_twins(root, image_calls, video_kernel_runs):
    """``copy``, ``deepcopy`` and pickling give twins with the same pixels (SGLang's worker
    pool deep-copies the processor; process pools pickle it)."""
    hf = _qwen25(root).info.get_hf_processor()
    image, video = _image(), _video()[0]
    want_image = hf.image_processor(images=[image], return_tensors="pt")
    want_video = hf.video_processor(videos=[video], do_sample_frames=False, return_tensors="pt")
    for clone in (copy.copy(hf), copy.deepcopy(hf), pickle.loads(pickle.dumps(hf))):
        assert qwen_twin.is_twin(clone.image_processor), type(clone.image_processor)
        assert qwen_video_twin.is_twin(clone.video_processor), type(clone.video_processor)
        got = clone.image_processor(images=[image], return_tensors="pt")
        assert torch.equal(got["pixel_values"], want_image["pixel_values"])
        got = clone.video_processor(videos=[video], do_sample_frames=False, return_tensors="pt")
        assert torch.equal(got["pixel_values_videos"], want_video["pixel_values_videos"])
    deep = copy.deepcopy(hf.image_processor)
    assert deep.__dict__ is deep.vlm_original().__dict__
    assert deep.__dict__ is not hf.image_processor.__dict__  # a copy's settings are its own
    calls = len(image_calls)
    deep(images=[image], return_tensors="pt")
    assert len(image_calls) == calls + 1, "the copy did not run ours"


def test_device_preprocessing_is_reported_and_offers_nothing(root, monkeypatch):
    """``--mm-processor-device cuda``: the twin hands every call to transformers there, so the
    status says so for the model and the decode layer is offered nothing."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    from vlm_fastpath.imaging.decode import speculation

    path = archs.ensure(root, "qwen2.5-vl")
    try:
        config = ModelConfig(model=str(path), tokenizer=str(path), dtype="float32",
                             max_model_len=8192, mm_processor_kwargs={"device": "cuda"})
    except Exception as exc:  # noqa: BLE001 - a release that refuses the setting here
        pytest.skip(f"mm_processor_kwargs device on vllm {vllm.__version__}: {exc}")
    speculation.withdraw(speculation.offered())
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    twin = processor.info.get_hf_processor().image_processor
    assert qwen_twin.is_twin(twin)
    offered = speculation.offered()
    assert offered is None or offered is not twin._vlm_offer
    status = {r["name"]: r for r in vlm_fastpath.status("vllm")}[IMAGE_PATCH]
    assert "preprocesses on cuda" in status["reason"], status


def test_the_status_table_lists_exactly_the_models_tested():
    """What ``doctor`` says the patches serve is what this file proves (data, not comments)."""
    image = REGISTRY.get(IMAGE_PATCH).models
    video = REGISTRY.get(VIDEO_PATCH).models
    assert {a for a, why in image.items() if not why} == {
        archs.ARCHS[n].architecture for n in archs.ARCHS}
    assert {a for a, why in video.items() if not why} == {
        archs.ARCHS[n].architecture for n in archs.ARCHS if archs.ARCHS[n].prompt_video}
    unverified = {a for a, why in image.items() if why}
    assert {text.partition(":")[0] for text in archs.missing.values()} == unverified
