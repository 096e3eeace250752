"""vLLM's own Qwen2.5-VL / Qwen3-VL processors hand out our image processor, same outputs.

The processors are the ones vLLM builds for a local tiny checkpoint (``ModelConfig`` +
``MULTIMODAL_REGISTRY.create_processor``); every comparison runs vLLM's whole ``apply``
(HF processor call, field configs, prompt replacement) with the plugin and without it (after
``revert``) in the same process, on the same processor object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import PIL.Image
import pytest
import torch

import vlm_fastpath
from fixtures.speculation_waits import wait_picked_up
from fixtures.vllm_requests import qwen_image as _image
from fixtures.vllm_requests import qwen_images as _images
from vlm_fastpath.patches.adapters import qwen_twin as adapter

vllm = pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[3]
IMAGE_PATCH = "vllm-qwen-vl-image-processor"
PATCHES = (IMAGE_PATCH,)
CONTEXT_METHODS = ("get_hf_processor", "call_hf_processor")
PROMPT_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


# -- vLLM objects --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    from fixtures import qwen_checkpoint

    root = tmp_path_factory.mktemp("qwen-ckpt")
    found = {"qwen2.5": qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN25)}
    try:
        found["qwen3"] = qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN3)
    except ImportError:  # transformers without Qwen3-VL
        pass
    return found


def _model_config(path: Path):
    from vllm.config import ModelConfig

    return ModelConfig(model=str(path), tokenizer=str(path), dtype="float32", max_model_len=8192)


@pytest.fixture(scope="session")
def processors(checkpoints):
    """vLLM's multimodal processor per checkpoint, built once (the patch acts per call)."""
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


def _run(processor, images, cache=None, **mm_kwargs) -> dict[str, object]:
    """vLLM's ``apply`` on one prompt with ``images``: every tensor and the prompt tokens
    (``cache``: a processor cache, where the call takes one)."""
    prompt = "Describe " + " and ".join([PROMPT_IMAGE] * len(images)) + "."
    items = processor.info.parse_mm_data({"image": images})
    extra = {} if cache is None else {"cache": cache}
    out = processor(prompt, items, hf_processor_mm_kwargs=mm_kwargs, **extra)
    flat: dict[str, object] = {"prompt_token_ids": list(out["prompt_token_ids"])}
    for modality, entries in out["mm_kwargs"].items():
        for index, item in enumerate(entries):
            for key, field in item.items():
                flat[f"{modality}.{index}.{key}"] = getattr(field, "data", field)
    flat["placeholders"] = [
        (p.offset, p.length) for p in out["mm_placeholders"].get("image", [])
    ]
    return flat


def _assert_same(ours: dict[str, object], theirs: dict[str, object]) -> None:
    assert ours.keys() == theirs.keys()
    for key, want in theirs.items():
        got = ours[key]
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def _hf_image_processor(processor):
    return processor.info.get_hf_processor().image_processor


def _status() -> dict[str, dict]:
    return {r["name"]: r for r in vlm_fastpath.status("vllm")}


@pytest.fixture()
def fresh_decisions():
    adapter.forget_views()
    yield
    adapter.forget_views()


# -- tests ---------------------------------------------------------------------------------------
def test_status_per_release(processors):
    for _, processor in processors.values():
        _hf_image_processor(processor)  # handed out: the status names the model
    status = _status()[IMAGE_PATCH]
    assert status["status"] == "applied", status
    assert status["engine_version"] == vllm.__version__
    assert "serves Qwen2_5_VLForConditionalGeneration" in status["reason"], status
    if "qwen3" in processors:
        assert "Qwen3VLForConditionalGeneration" in status["reason"], status


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_engine_hands_out_ours_and_outputs_are_equal(processors, name, fresh_decisions):
    if name not in processors:
        pytest.skip(f"no {name} processor on vllm {vllm.__version__}")
    config, processor = processors[name]
    hf_ip = _hf_image_processor(processor)
    assert adapter.is_twin(hf_ip), type(hf_ip)
    assert isinstance(hf_ip, type(hf_ip.vlm_original()))
    assert hf_ip.__dict__ is hf_ip.vlm_original().__dict__  # one set of settings
    images = _images()
    with_plugin = _run(processor, images)
    vlm_fastpath.revert("vllm")
    assert not adapter.is_twin(_hf_image_processor(processor))
    without = _run(processor, images)
    vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)
    pixels = [v for k, v in without.items() if k.endswith("pixel_values")]
    assert pixels and all(p.shape[-1] == 3 * 2 * hf_ip.patch_size**2 for p in pixels)


def _device_normalize(config) -> bool:
    mm = config.multimodal_config
    return bool(getattr(mm, "mm_device_do_normalize", False))


@pytest.mark.parametrize("normalize_on_device", [False, True], ids=["float32", "uint8"])
def test_float32_and_device_normalize_paths(processors, monkeypatch, normalize_on_device,
                                            fresh_decisions):
    config, processor = processors["qwen2.5"]
    mm = config.multimodal_config
    if not hasattr(mm, "mm_device_do_normalize"):
        if normalize_on_device:
            pytest.skip(f"vllm {vllm.__version__} has no device-side normalization")
    else:
        monkeypatch.setattr(mm, "mm_device_do_normalize", normalize_on_device)
    images = _images()[:3]
    with_plugin = _run(processor, images)
    assert adapter.is_twin(_hf_image_processor(processor))
    vlm_fastpath.revert("vllm")
    without = _run(processor, images)
    vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)
    dtypes = {v.dtype for k, v in without.items() if k.endswith("pixel_values")}
    assert dtypes == ({torch.uint8} if normalize_on_device else {torch.float32})


def test_size_overrides_reach_ours(processors, fresh_decisions):
    _, processor = processors["qwen2.5"]
    images = _images()[:2] + [_image(6, 1400, 900)]
    for kwargs in ({"max_pixels": 200704}, {"min_pixels": 401408},
                   {"size": {"shortest_edge": 3136, "longest_edge": 100352}}):
        with_plugin = _run(processor, images, **kwargs)
        assert adapter.is_twin(processor.info.get_hf_processor(**kwargs).image_processor)
        vlm_fastpath.revert("vllm")
        without = _run(processor, images, **kwargs)
        vlm_fastpath.apply("vllm")
        _assert_same(with_plugin, without)


def _context_class():
    from vllm.multimodal.processing.context import InputProcessingContext

    return InputProcessingContext


def test_revert_and_skip_restore_vllm(processors, monkeypatch, fresh_decisions):
    cls = _context_class()
    vlm_fastpath.revert("vllm")
    originals = {name: cls.__dict__[name] for name in CONTEXT_METHODS}
    vlm_fastpath.apply("vllm")
    assert all(cls.__dict__[name] is not f for name, f in originals.items())
    vlm_fastpath.revert("vllm")
    assert all(cls.__dict__[name] is f for name, f in originals.items())
    _, processor = processors["qwen2.5"]
    assert not adapter.is_twin(_hf_image_processor(processor))
    monkeypatch.setenv("VLM_FASTPATH_SKIP", IMAGE_PATCH)
    vlm_fastpath.apply("vllm")
    assert _status()[IMAGE_PATCH]["status"] == "disabled"
    assert all(cls.__dict__[name] is f for name, f in originals.items())
    assert not adapter.is_twin(_hf_image_processor(processor))
    vlm_fastpath.revert("vllm")
    monkeypatch.setenv("VLM_FASTPATH", "0")
    vlm_fastpath.apply("vllm")
    assert {_status()[name]["status"] for name in PATCHES} == {"disabled"}
    assert all(cls.__dict__[name] is f for name, f in originals.items())
    monkeypatch.undo()


def test_behaviour_change_makes_it_stand_aside(processors, monkeypatch, fresh_decisions):
    """A transformers release whose processor differs from ours: the engine's is handed out."""
    import vlm_fastpath.qwen_integration as qwen

    _, processor = processors["qwen2.5"]
    monkeypatch.setattr(qwen, "check_compatible", lambda hf, fast=None: "pixel_values differ")
    hf_ip = _hf_image_processor(processor)
    assert not adapter.is_twin(hf_ip)
    assert "pixel_values differ" in _status()[IMAGE_PATCH]["reason"]
    images = _images()[:2]
    with_plugin = _run(processor, images)
    vlm_fastpath.revert("vllm")
    without = _run(processor, images)
    vlm_fastpath.apply("vllm")
    _assert_same(with_plugin, without)


def test_other_processor_classes_are_not_mirrored(processors, fresh_decisions):
    _, processor = processors["qwen2.5"]
    hf = processor.info.get_hf_processor()
    video = hf.video_processor
    twin, reason = adapter.twin_of(video, IMAGE_PATCH)
    assert twin is None and "not a class vlm-fastpath mirrors" in reason
    assert adapter.is_twin(hf.image_processor) and not adapter.is_twin(hf.video_processor)


def test_missing_target_fails_cleanly(monkeypatch, fresh_decisions):
    vlm_fastpath.revert("vllm")
    cls = _context_class()
    original = cls.__dict__["call_hf_processor"]
    monkeypatch.delattr(cls, "call_hf_processor")  # as if upstream renamed it
    results = {r["name"]: r for r in vlm_fastpath.apply("vllm")}
    assert results[IMAGE_PATCH]["status"] == "stood-aside"  # a contract clause, named
    assert "structure: InputProcessingContext.call_hf_processor is missing" in (
        results[IMAGE_PATCH]["reason"]
    )
    assert "call_hf_processor" not in cls.__dict__
    vlm_fastpath.revert("vllm")
    monkeypatch.undo()
    assert cls.__dict__["call_hf_processor"] is original


def test_doctor_lists_the_patches():
    out = subprocess.run(
        [sys.executable, "-m", "vlm_fastpath", "doctor", "--json"], cwd=REPO,
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for name in PATCHES:
        assert name in out.stdout


FRESH = r"""
import json, sys
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.model_executor.models import qwen2_5_vl
from vllm.multimodal.processing.context import InputProcessingContext
import vlm_fastpath
status = {r["name"]: r["status"] for r in vlm_fastpath.status("vllm")}
get = InputProcessingContext.__dict__["get_hf_processor"]
print("RESULT" + json.dumps({"status": status,
                             "wrapped": hasattr(get, "__vlm_fastpath_original__")}))
"""


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_fresh_process_entry_point(enabled):
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLM_FASTPATH": enabled}
    proc = subprocess.run([sys.executable, "-c", FRESH], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT"):])
    want = "applied" if enabled == "1" else "disabled"
    assert result["status"][IMAGE_PATCH] == want
    assert result["wrapped"] is (enabled == "1")


def _image_media_io():
    try:
        from vllm.multimodal.media.image import ImageMediaIO
    except ImportError:  # releases before media/ was a package
        from vllm.multimodal.image import ImageMediaIO
    return ImageMediaIO()


def test_an_image_vllm_loads_is_patchified_while_it_decodes(processors, monkeypatch,
                                                            fresh_decisions):
    """vLLM's own ``load_bytes`` (with ``vllm-fast-image-decode``) starts the processor vLLM
    hands out on the rows as they decode; vLLM's ``apply`` then takes that work, and its
    output equals vLLM's own loader and processor (the plugin reverted)."""
    from fixtures import decode_corpus
    from vlm_fastpath.imaging import row_progress
    from vlm_fastpath.imaging.decode import layer, speculation

    if _status().get("vllm-fast-image-decode", {}).get("status") != "applied":
        pytest.skip("vLLM's loader does not decode through vlm-fastpath in this release")
    if not row_progress.supported():
        pytest.skip("rows cannot be followed on this machine")
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    _, processor = processors["qwen2.5"]
    hf_ip = _hf_image_processor(processor)  # handing it out offers it to the decode layer
    fast = hf_ip.vlm_fast()
    assert speculation.offered().fast is fast
    fills = []
    fill = fast._fill
    monkeypatch.setattr(fast, "_fill", lambda *a, **k: (fills.append(1), fill(*a, **k))[1])
    # the settings vLLM asks for (bytes, where it normalizes on the device) are learnt from a
    # call, as vLLM's start-up profiling run makes one before any request
    _run(processor, [_image(5, 300, 200)])
    for size, fmt in (((1203, 917), "JPEG"), ((1176, 840), "PNG")):
        data = decode_corpus.save(
            PIL.Image.fromarray(decode_corpus.photo_like(*size, seed=size[0])), fmt)
        loaded = _image_media_io().load_bytes(data)
        wait_picked_up(getattr(loaded, "media", loaded))  # else the call does it (by design)
        before = len(fills)
        with_plugin = _run(processor, [getattr(loaded, "media", loaded)])
        assert len(fills) == before, "vLLM's apply computed what the loader had prepared"
        vlm_fastpath.revert("vllm")
        assert speculation.offered().start("RGB", None, None) is None  # reverted: no work
        loaded = _image_media_io().load_bytes(data)
        without = _run(processor, [getattr(loaded, "media", loaded)])
        vlm_fastpath.apply("vllm")
        _assert_same(with_plugin, without)


def test_an_image_vllm_answers_from_its_cache_starts_no_work_again(processors, monkeypatch,
                                                                   fresh_decisions):
    """A conversation sends its earlier images again and vLLM's processor cache answers them:
    the processor is not called, so the work the loader started on such an image is dropped.
    Once it has been, the same bytes start none (``speculation.abandoned``)."""
    import gc
    import inspect

    from vllm.multimodal import MULTIMODAL_REGISTRY

    from fixtures import decode_corpus
    from vlm_fastpath.imaging import row_progress
    from vlm_fastpath.imaging.decode import layer, speculation
    from vlm_fastpath.qwen_integration import speculative

    if _status().get("vllm-fast-image-decode", {}).get("status") != "applied":
        pytest.skip("vLLM's loader does not decode through vlm-fastpath in this release")
    if not row_progress.supported():
        pytest.skip("rows cannot be followed on this machine")
    try:
        from vllm.multimodal.cache import MultiModalProcessorOnlyCache
    except ImportError:
        pytest.skip("no processor-only cache in this release")
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    monkeypatch.setattr(speculation, "_ABANDONED", {})
    config, processor = processors["qwen2.5"]
    cache = MultiModalProcessorOnlyCache(config)
    if "cache" in inspect.signature(type(processor).__call__).parameters:
        def run(images):
            return _run(processor, images, cache=cache)
    else:  # releases that bind the cache to the processor
        cached = MULTIMODAL_REGISTRY.create_processor(config, cache=cache)

        def run(images):
            return _run(cached, images)
    run([_image(5, 300, 200)])  # the settings vLLM asks for, learnt (its profiling run)
    starts = []
    start = speculative.start
    monkeypatch.setattr(speculative, "start",
                        lambda *a, **k: (starts.append(1), start(*a, **k))[1])
    data = decode_corpus.save(PIL.Image.fromarray(decode_corpus.photo_like(1203, 917, seed=7)),
                              "JPEG")
    loaded = _image_media_io().load_bytes(data)
    wait_picked_up(getattr(loaded, "media", loaded))
    first = run([getattr(loaded, "media", loaded)])  # a miss: the processor takes the work
    image = _image_media_io().load_bytes(data)
    image = getattr(image, "media", image)
    assert len(starts) == 2 and speculation.pending(image)
    again = run([image])  # the cache answers: the work is never taken
    assert speculation.pending(image)
    _assert_same(again, first)
    del loaded, image
    gc.collect()
    third = _image_media_io().load_bytes(data)
    third = getattr(third, "media", third)
    assert len(starts) == 2 and not speculation.pending(third)
    _assert_same(run([third]), first)
