"""SGLang's Qwen-VL multimodal processor uses our image processor on its CPU path, same outputs.

The processor is SGLang's own ``QwenVLImageProcessor`` built for a local tiny Qwen2.5-VL (and
Qwen3-VL) checkpoint; outputs of its ``process_mm_data`` (what every request goes through) are
compared with the plugin and without it (after ``revert``) in the same process.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.speculation_waits import wait_picked_up
from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.adapters import qwen_twin as adapter

PATCH = "sglang-qwen-vl-cpu-image-processor"
QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl"
BASE = "sglang.srt.multimodal.processors.base_processor"
PROMPT_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def _image(seed: int, width: int, height: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "P": 1}[mode]
    pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    if mode in ("L", "P"):
        image = Image.fromarray(pixels[..., 0], "L")
        return image.convert("RGB").quantize(colors=64) if mode == "P" else image
    return Image.fromarray(pixels, mode)


def _images() -> list[Image.Image]:
    return [_image(1, 457, 300), _image(2, 333, 517, "RGBA"), _image(3, 57, 29, "L"),
            _image(4, 200, 151, "P"), _image(5, 1003, 751)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from fixtures import qwen_checkpoint

    root = tmp_path_factory.mktemp("qwen-ckpt")
    found = {"qwen2.5": qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN25)}
    try:
        found["qwen3"] = qwen_checkpoint.ensure(root, qwen_checkpoint.QWEN3)
    except ImportError:
        pass
    return found


_SERVER_ARGS: list = []


def _server_args(path):
    """Server args published the way this release's processors read them (built once)."""
    if _SERVER_ARGS:
        return _SERVER_ARGS[0]
    from fixtures.sglang_cpu import server_args_sealed, setup_sglang_cpu

    setup_sglang_cpu()
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    if server_args_sealed():  # 0.5.23: built (and published) for real
        args = ServerArgs(model_path=str(path), device="cpu")
        set_global_server_args_for_scheduler(args)
    else:
        from sglang.srt.server_args import get_global_server_args

        args = copy.copy(get_global_server_args())
        if getattr(args, "mm_process_config", None) is None:  # filled by __post_init__
            args.mm_process_config = {}
            if importlib.util.find_spec("sglang.srt.runtime_context") is not None:
                # 0.5.18+: processors read a snapshot published from the args (get_mm())
                set_global_server_args_for_scheduler(args)
    _SERVER_ARGS.append(args)
    return args


def _build(path):
    """SGLang's QwenVLImageProcessor for ``path``, on the CPU path, as the server builds it."""
    import importlib

    from transformers import AutoConfig, AutoProcessor

    proc_mod = importlib.import_module(QWEN_VL)
    hf_config = AutoConfig.from_pretrained(path)
    hf_processor = AutoProcessor.from_pretrained(path)
    mm = proc_mod.QwenVLImageProcessor(hf_config, _server_args(path), hf_processor, None)
    return mm, hf_processor


@pytest.fixture
def cpu_path(monkeypatch):
    """The release's CPU device choice ("cpu"), whatever this machine's torch build says."""
    base = pytest.importorskip("sglang.srt.multimodal.processors.base_processor")
    if hasattr(base, "_is_cpu"):
        monkeypatch.setattr(base, "_is_cpu", True)
    cls = base.BaseMultimodalProcessor
    if hasattr(cls, "_fast_image_processor_device"):
        monkeypatch.setattr(cls, "_fast_image_processor_device", lambda self, p: "cpu")
    adapter.forget_views()
    yield
    adapter.forget_views()


def full_rows(pixel_values: torch.Tensor, mm) -> torch.Tensor:
    """Image rows as the model's tower reads them: compact rows (each patch once,
    ``sglang-qwen-compact-image-rows``) expanded, full rows as they are."""
    from vlm_fastpath.qwen_integration import compact

    image_processor = mm._processor.image_processor
    temporal, patch = image_processor.temporal_patch_size, image_processor.patch_size
    if compact.is_compact(pixel_values, 3, temporal, patch):
        return compact.expand(pixel_values, 3, temporal, patch)
    return pixel_values


def _run(mm, images) -> dict[str, torch.Tensor]:
    text = "Describe " + " and ".join([PROMPT_IMAGE] * len(images)) + "."
    out = dict(mm.process_mm_data(input_text=text, images=images))
    out["pixel_values"] = full_rows(out["pixel_values"], mm)
    return {k: out[k] for k in ("input_ids", "pixel_values", "image_grid_thw")}


def _assert_same(ours, theirs) -> None:
    for key, want in theirs.items():
        assert ours[key].dtype == want.dtype and torch.equal(ours[key], want), key


def _status() -> dict[str, str]:
    return {r.name: r.status.value for r in REGISTRY.status("sglang")}


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_cpu_path_uses_ours_with_equal_outputs(engine, checkpoints, cpu_path, name):
    if name not in checkpoints:
        pytest.skip("transformers has no Qwen3-VL")
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        assert _status()[PATCH] == "applied"
        mm, hf_processor = _build(checkpoints[name])
        assert adapter.is_twin(mm._processor.image_processor)
        assert not adapter.is_twin(hf_processor.image_processor)  # the engine's object kept
        assert mm._processor.tokenizer is hf_processor.tokenizer
        images = _images()
        with_plugin = _run(mm, images)
        REGISTRY.revert(engine="sglang")
        without = _run(mm, images)  # the view answers with transformers' code after revert
        fresh, _ = _build(checkpoints[name])
        assert not adapter.is_twin(fresh._processor.image_processor)
        _assert_same(with_plugin, without)
        _assert_same(_run(fresh, images), without)
        grid = without["image_grid_thw"]
        image_token = mm._processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        merge = hf_processor.image_processor.merge_size ** 2
        tokens = int((with_plugin["input_ids"] == image_token).sum())
        assert tokens == int(grid.prod(-1).sum()) // merge
    finally:
        REGISTRY.revert(engine="sglang")


def test_gpu_calls_stay_sglangs(engine, checkpoints, cpu_path, monkeypatch):
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, _ = _build(checkpoints["qwen2.5"])
        twin = mm._processor.image_processor
        seen = []
        # the engine's own answer, spied on: the twin hands the calls it does not serve to the
        # original it holds (a replacement on the object itself would replace the twin's own
        # method too: they share the object's attributes)
        engine_side = type("Engine", (), {"preprocess": lambda self, images, **kw:
                                          seen.append(kw) or "hf"})()
        monkeypatch.setattr(twin, "_vlm_original", engine_side)
        assert twin(images=[_image(0, 64, 64)], device="cuda:0", return_tensors="pt") == "hf"
        assert seen and seen[0]["device"] == "cuda:0"
        out = twin([_image(0, 64, 64)], device="cpu", return_tensors="pt")
        assert len(seen) == 1 and out["image_grid_thw"].tolist() == [[1, 4, 4]]
        REGISTRY.revert(engine="sglang")  # a view built before the revert: SGLang's code again
        assert twin([_image(0, 64, 64)], device="cpu", return_tensors="pt") == "hf"
        assert len(seen) == 2
    finally:
        REGISTRY.revert(engine="sglang")


def test_behaviour_change_makes_it_stand_aside(engine, checkpoints, cpu_path, monkeypatch):
    import vlm_fastpath.qwen_integration as qwen

    monkeypatch.setattr(qwen, "check_compatible", lambda hf, fast=None: "pixel_values differ")
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, hf_processor = _build(checkpoints["qwen2.5"])
        # (the video patch may still hand out a view carrying its own twin)
        assert mm._processor.image_processor is hf_processor.image_processor
        reason = {r.name: r.reason for r in REGISTRY.status("sglang")}[PATCH]
        assert "pixel_values differ" in reason
    finally:
        REGISTRY.revert(engine="sglang")


def _base_class():
    import importlib

    return importlib.import_module(BASE).BaseMultimodalProcessor


def test_revert_skip_and_off_restore_sglang(engine, checkpoints, cpu_path, monkeypatch):
    cls = _base_class()
    REGISTRY.revert(engine="sglang")
    original = cls.__dict__["__init__"]
    REGISTRY.apply(engine="sglang")
    assert cls.__dict__["__init__"] is not original
    REGISTRY.revert(engine="sglang")
    assert cls.__dict__["__init__"] is original
    for env in ({"VLM_FASTPATH_SKIP": PATCH}, {"VLM_FASTPATH": "0"}):
        with monkeypatch.context() as m:
            for key, value in env.items():
                m.setenv(key, value)
            REGISTRY.apply(engine="sglang")
            assert _status()[PATCH] == "disabled"
            assert cls.__dict__["__init__"] is original
            mm, hf_processor = _build(checkpoints["qwen2.5"])
            assert mm._processor is hf_processor
            REGISTRY.revert(engine="sglang")


def test_missing_target_fails_cleanly(engine, monkeypatch):
    cls = _base_class()
    REGISTRY.revert(engine="sglang")
    original = cls.__dict__["__init__"]
    monkeypatch.setattr(cls, "__init__", None)  # as if upstream changed the class
    results = {r.name: r for r in REGISTRY.apply(engine="sglang")}
    assert results[PATCH].status.value == "stood-aside", results[PATCH]  # a contract clause
    assert "structure: BaseMultimodalProcessor.__init__ is missing" in results[PATCH].reason
    assert cls.__dict__["__init__"] is None
    REGISTRY.revert(engine="sglang")
    monkeypatch.undo()
    assert cls.__dict__["__init__"] is original


def test_an_image_sglang_loads_is_patchified_while_it_decodes(engine, checkpoints, cpu_path,
                                                              monkeypatch):
    """SGLang's own ``load_image`` (with ``sglang-fast-image-decode``) starts our processor on
    the rows as they decode; ``process_mm_data`` takes that work, and its output equals
    SGLang's own loader and processor (the plugin reverted)."""
    from sglang.srt.utils import common

    from fixtures import decode_corpus
    from vlm_fastpath.imaging import row_progress
    from vlm_fastpath.imaging.decode import layer, speculation

    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        if _status().get("sglang-fast-image-decode") != "applied":
            pytest.skip("SGLang's loader does not decode through vlm-fastpath here")
        if not row_progress.supported():
            pytest.skip("rows cannot be followed on this machine")
        monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
        mm, _ = _build(checkpoints["qwen2.5"])
        fast = mm._processor.image_processor.vlm_fast()
        assert speculation.offered().fast is fast
        _run(mm, [_image(6, 300, 200)])  # the settings SGLang asks for, learnt from a call
        fills = []
        fill = fast._fill
        monkeypatch.setattr(fast, "_fill", lambda *a, **k: (fills.append(1), fill(*a, **k))[1])

        def load(data: bytes, wait: bool = True) -> Image.Image:
            loaded = common.load_image(data, False)
            image = loaded[0] if isinstance(loaded, tuple) else loaded
            if wait:  # else the call does the work itself (by design): nothing to take
                wait_picked_up(image)
            return image

        for size, fmt in (((1203, 917), "JPEG"), ((1176, 840), "PNG")):
            data = decode_corpus.save(
                Image.fromarray(decode_corpus.photo_like(*size, seed=size[0])), fmt)
            before = len(fills)
            with_plugin = _run(mm, [load(data)])
            assert len(fills) == before, "SGLang's call computed what the loader had prepared"
            REGISTRY.revert(engine="sglang")
            without = _run(mm, [load(data, wait=False)])
            REGISTRY.apply(engine="sglang")
            _assert_same(with_plugin, without)
    finally:
        REGISTRY.revert(engine="sglang")
