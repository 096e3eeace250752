"""SGLang's own doors reach our processors (issue #50).

- The processor worker pool (``MultimodalProcessorExecutor``, ``--mm-processor-worker-num``,
  auto 2 on the CPU path): each worker runs on a ``deepcopy`` of the shared processor, and the
  async entry a request takes (``process_and_combine_mm_data_async``) goes through it. Qwen-VL
  images and videos and Kimi K2.5 images must be served by ours there, exact.
- Copies (``deepcopy``, pickle) of every object we hand out stay ours.
- SGLang's GPU preprocessing (its default on CUDA): our twin stands aside, the status says
  so, and no decode work is started for it; ``VLM_FASTPATH_CPU_PREPROCESS=1`` serves it on the
  CPU, exact, and turns SGLang's nvJPEG decode off for that processor class.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import pickle

import pytest
import torch

from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.adapters import qwen_twin as adapter
from vlm_fastpath.patches.adapters import qwen_video_twin as video_adapter

from .test_kimi_processor import MEDIA_CFG, CheckpointMediaProcessor, make_wrapper
from .test_qwen_processor import (  # noqa: F401 - fixtures
    PATCH,
    _build,
    _image,
    _images,
    _run,
    checkpoints,
    cpu_path,
    full_rows,
)
from .test_qwen_video_processor import (
    QWEN_VL,
    _clip,
    _Decoder,
    _preprocessed,
)

EXECUTOR = "sglang.srt.multimodal.processors.executor"
BASE = "sglang.srt.multimodal.processors.base_processor"
KIMI = "sglang-kimi-k25-fused-cpu-processor"
KEYS = ("input_ids", "pixel_values", "image_grid_thw")


def _pool(mm, workers: int, holder=None):
    """A processor worker pool for ``mm`` with ``workers`` threads: the one SGLang built in
    ``mm.__init__`` where it has that size (what a request meets: on the CPU path Qwen-VL's is
    2 by default), else one built as this release builds it (a resolver of ``_processor`` from
    0.5.20, the processor itself before: cloned at construction)."""
    executor = pytest.importorskip(EXECUTOR, reason="no processor worker pool in this release")
    own = getattr(mm, "mm_processor_executor", None)
    if holder is None and own is not None and getattr(mm, "mm_processor_worker_num", 0) == workers:
        return own
    target = mm if holder is None else holder
    first = list(inspect.signature(executor.MultimodalProcessorExecutor.__init__).parameters)[1]
    source = (lambda: target._processor) if first.startswith("resolve") else target._processor
    return executor.MultimodalProcessorExecutor(source, workers)


@pytest.fixture
def applied(engine, cpu_path):  # noqa: F811
    adapter.forget_views()
    video_adapter.forget_views()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    yield
    REGISTRY.revert(engine="sglang")
    adapter.forget_views()
    video_adapter.forget_views()


@pytest.fixture
def image_calls(monkeypatch):
    from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

    calls: list[int] = []
    original = FastQwen2VLImageProcessor.preprocess

    def preprocess(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FastQwen2VLImageProcessor, "preprocess", preprocess)
    return calls


def _gather(pool, function, count: int, **kwargs) -> list:
    async def many() -> list:
        return await asyncio.gather(*(pool.run(function, **kwargs) for _ in range(count)))

    return asyncio.run(many())


def _same(ours: dict, theirs: dict, keys=KEYS, mm=None) -> None:
    """Equal outputs; with ``mm``, image rows compared as the model reads them (compact rows
    expanded: ``sglang-qwen-compact-image-rows``)."""
    for key in keys:
        got = full_rows(ours[key], mm) if mm is not None and key == "pixel_values" else ours[key]
        assert got.dtype == theirs[key].dtype and torch.equal(got, theirs[key]), key


def _compact_where_served(mm, architecture: str, pixel_values: torch.Tensor) -> None:
    """The models whose SGLang class expands compact rows got them through this door."""
    from vlm_fastpath.patches.sglang.qwen_compact_images import (
        multimodal_processors_base_processor as compact_side,
    )

    width = pixel_values.shape[1]
    image_processor = mm._processor.image_processor
    patch, temporal = image_processor.patch_size, image_processor.temporal_patch_size
    if architecture in compact_side.ARCHS:
        assert width == 3 * patch * patch < 3 * temporal * patch * patch, (architecture, width)
    else:
        assert width == 3 * temporal * patch * patch, (architecture, width)


def _sglang_processor(root, name: str):
    """SGLang's own multimodal processor for a tiny checkpoint of ``name`` (as the server picks
    it: by architecture), or a skip where this release or its transformers has none."""
    from transformers import AutoConfig, AutoProcessor

    from fixtures import vllm_arch_checkpoints as archs

    from .test_qwen_processor import _server_args

    managers = importlib.import_module("sglang.srt.managers.multimodal_processor")
    if not managers.PROCESSOR_MAPPING:
        managers.import_processors("sglang.srt.multimodal.processors")
    arch = archs.ARCHS[name]
    try:
        path = archs.ensure(root, name)
        config = AutoConfig.from_pretrained(path, trust_remote_code=arch.trust_remote_code)
    except (ImportError, ValueError) as exc:  # a model type this transformers does not know
        pytest.skip(f"{name} under transformers of this release: {str(exc)[:120]}")
    found = [cls for model, cls in managers.PROCESSOR_MAPPING.items()
             if model.__name__ in (config.architectures or ())]
    if not found:
        pytest.skip(f"sglang has no multimodal processor for {config.architectures}")
    hf = AutoProcessor.from_pretrained(path, trust_remote_code=arch.trust_remote_code)
    try:
        mm = found[0](config, _server_args(path), hf, None)
    except AttributeError as exc:  # this release's processor reads what its transformers lacks
        pytest.skip(f"sglang's {found[0].__name__} on this checkpoint: {exc}")
    return mm, arch, config.architectures[0]


# the fixture's architectures SGLang 0.5.23 serves with a processor of its own
SGLANG_ARCHS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3-vl-moe", "qwen3.5", "qwen3.5-moe",
                "qwen4-exp", "qwen3-omni", "clef-omni", "clef-flash", "cosmos3", "dots-ocr")


@pytest.mark.parametrize("name", SGLANG_ARCHS)
def test_every_model_holding_the_image_processor_gets_ours(applied, tmp_path_factory,
                                                          image_calls, name):
    root = tmp_path_factory.mktemp("arch")
    mm, arch, architecture = _sglang_processor(root, name)
    image_calls.clear()  # the probes of the hand-out ran ours on probe images
    text = f"Describe {arch.prompt_image} please."
    images = _images()[:2]
    text = text.replace(arch.prompt_image, arch.prompt_image + " and " + arch.prompt_image)
    ours = mm.process_mm_data(input_text=text, images=images)
    assert image_calls, f"{architecture}: SGLang's processor ran transformers, not ours"
    served = REGISTRY.served(PATCH)
    sub = getattr(getattr(mm, "hf_config", None), "model_type", "?")  # Omni: the thinker's
    assert "" in (served.get(architecture), served.get(f"{type(mm).__name__}({sub})")), served
    _compact_where_served(mm, architecture, ours["pixel_values"])
    REGISTRY.revert(engine="sglang")
    theirs = mm.process_mm_data(input_text=text, images=images)
    _same(ours, theirs, mm=mm)


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_worker_pool_clones_serve_qwen_images_with_ours(applied, checkpoints, image_calls,  # noqa: F811
                                                        name, workers):
    if name not in checkpoints:
        pytest.skip("transformers has no Qwen3-VL")
    mm, _ = _build(checkpoints[name])
    image_calls.clear()  # the probes of the hand-out ran ours on probe images
    pool = _pool(mm, workers)
    images = _images()[:3]
    text = "Describe " + " and ".join(["<|vision_start|><|image_pad|><|vision_end|>"] * 3)
    try:
        outs = _gather(pool, mm.process_mm_data, 2 * workers, input_text=text, images=images)
        clones = _worker_processors(pool)
    finally:
        pool.shutdown()
    assert len(image_calls) >= 2 * workers, "the pool's clones ran transformers, not ours"
    assert clones and all(adapter.is_twin(p.image_processor) for p in clones)
    assert all(p is not mm._processor for p in clones)  # each worker runs on its own clone
    REGISTRY.revert(engine="sglang")
    theirs = mm.process_mm_data(input_text=text, images=images)  # transformers' answer
    for out in outs:
        _compact_where_served(mm, mm.hf_config.architectures[0], out["pixel_values"])
        _same(out, theirs, mm=mm)


def _worker_processors(pool) -> list:
    """The clones the pool's workers hold (each worker thread gets its own on first use)."""
    seen: list = []
    _gather(pool, lambda processor=None: seen.append(processor), 8)
    return seen


def test_the_async_entry_a_request_takes_runs_ours(applied, checkpoints, image_calls):  # noqa: F811
    base = importlib.import_module(BASE)
    output_cls = getattr(base, "BaseMultiModalProcessorOutput", None)
    if output_cls is None or not hasattr(base.BaseMultimodalProcessor,
                                         "process_and_combine_mm_data_async"):
        pytest.skip("no async processor entry in this release")
    mm, _ = _build(checkpoints["qwen2.5"])
    image_calls.clear()  # the probes of the hand-out ran ours on probe images
    mm.mm_processor_executor = _pool(mm, 2)
    text = "Describe <|vision_start|><|image_pad|><|vision_end|>."
    image = _image(9, 457, 300)
    try:
        base_output = output_cls(input_text=text, images=[image])
        items, input_ids, _ = asyncio.run(
            mm.process_and_combine_mm_data_async(base_output, mm.mm_tokens))
    finally:
        mm.mm_processor_executor.shutdown()
    assert image_calls, "the request's async entry ran transformers, not ours"
    REGISTRY.revert(engine="sglang")
    theirs = mm.process_mm_data(input_text=text, images=[image])
    _compact_where_served(mm, mm.hf_config.architectures[0], items[0].feature)
    assert torch.equal(full_rows(items[0].feature, mm), theirs["pixel_values"])


def test_worker_pool_clones_serve_qwen_videos_with_ours(applied, checkpoints, monkeypatch):  # noqa: F811
    proc_mod = importlib.import_module(QWEN_VL)
    monkeypatch.setattr(proc_mod, "VideoDecoderWrapper", _Decoder)
    monkeypatch.setattr(proc_mod, "is_cpu", lambda: True, raising=False)
    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)
    video, _meta = _preprocessed(proc_mod, _clip(4, 8, 160, 224))
    from vlm_fastpath.qwen_integration import video_processor

    runs: list[int] = []
    fill = video_processor.fill_videos
    monkeypatch.setattr(video_processor, "fill_videos",
                        lambda *a, **k: runs.append(1) or fill(*a, **k))
    mm, _ = _build(checkpoints["qwen2.5"])
    runs.clear()  # the probes of the hand-out ran our kernel on probe clips
    pool = _pool(mm, 2)
    text = "Describe <|vision_start|><|video_pad|><|vision_end|>."
    try:
        outs = _gather(pool, mm.process_mm_data, 4, input_text=text, videos=[video])
    finally:
        pool.shutdown()
    assert len(runs) >= 4, "the pool's clones ran transformers' video path, not ours"
    REGISTRY.revert(engine="sglang")
    theirs = mm.process_mm_data(input_text=text, videos=[video])
    for out in outs:
        _same(out, theirs, ("input_ids", "pixel_values_videos", "video_grid_thw"))


def test_worker_pool_clones_serve_kimi_with_ours(applied):
    proc = importlib.import_module("sglang.srt.multimodal.processors.kimi_k25")
    if not hasattr(proc, "KimiGPUProcessorWrapper"):
        pytest.skip("no Kimi CPU preprocessing path in this release")
    from fixtures.reference_kimi import ref_preprocess
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    wrapper = make_wrapper()
    assert isinstance(wrapper.media_processor, FusedKimiProcessor)
    pool = _pool(None, 2, holder=type("Holder", (), {"_processor": wrapper})())
    images = [_image(11, 517, 333), _image(12, 64, 900)]
    calls = CheckpointMediaProcessor.calls

    def call(processor=None):  # noqa: ANN001, ANN202 - what process_mm_data does with it
        assert isinstance(processor.media_processor, FusedKimiProcessor), type(processor)
        return processor._cpu_call("<|media_pad|> and <|media_pad|>", images)

    try:
        outs = _gather(pool, call, 4)
    finally:
        pool.shutdown()
    assert CheckpointMediaProcessor.calls == calls, "a clone ran the checkpoint's processor"
    medias = [{"type": "image", "image": image} for image in images]
    pixels, grids, _ = ref_preprocess(medias, MEDIA_CFG)
    for out in outs:
        assert torch.equal(torch.as_tensor(out["pixel_values"]), torch.as_tensor(pixels))
        assert torch.equal(torch.as_tensor(out["image_grid_thw"]), torch.as_tensor(grids))


def test_copies_of_what_we_hand_out_stay_ours(applied, checkpoints):  # noqa: F811
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    mm, _ = _build(checkpoints["qwen2.5"])
    image = _image(13, 300, 200)
    want = mm._processor.image_processor(images=[image], return_tensors="pt")["pixel_values"]
    for clone in (copy.deepcopy(mm._processor), pickle.loads(pickle.dumps(mm._processor))):
        assert adapter.is_twin(clone.image_processor), type(clone.image_processor)
        assert video_adapter.is_twin(clone.video_processor), type(clone.video_processor)
        got = clone.image_processor(images=[image], return_tensors="pt")["pixel_values"]
        assert torch.equal(got, want)
    proc = importlib.import_module("sglang.srt.multimodal.processors.kimi_k25")
    if hasattr(proc, "KimiGPUProcessorWrapper"):
        wrapper = make_wrapper()
        for clone in (copy.deepcopy(wrapper), pickle.loads(pickle.dumps(wrapper.media_processor))):
            media = getattr(clone, "media_processor", clone)
            assert isinstance(media, FusedKimiProcessor), type(media)


def _on_cuda(monkeypatch) -> None:
    """SGLang's device choice on a CUDA host, as the release makes it (``cuda:0``)."""
    base = importlib.import_module(BASE)
    cls = base.BaseMultimodalProcessor
    if hasattr(base, "_is_cpu"):
        monkeypatch.setattr(base, "_is_cpu", False)
    if hasattr(cls, "_fast_image_processor_device"):
        monkeypatch.setattr(cls, "_fast_image_processor_device", lambda self, p: "cuda:0")


def test_gpu_preprocessing_is_reported_and_starts_no_work(engine, checkpoints, monkeypatch):  # noqa: F811
    from vlm_fastpath.imaging.decode import speculation

    _on_cuda(monkeypatch)
    adapter.forget_views()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        speculation.withdraw(speculation.offered())
        mm, _ = _build(checkpoints["qwen2.5"])
        twin = mm._processor.image_processor
        assert adapter.is_twin(twin)  # it hands every device call to transformers
        assert speculation.offered() is None, "work offered for a processor that will not take it"
        _assert_a_large_image_starts_no_work(monkeypatch)
        status = {r.name: r for r in REGISTRY.status("sglang")}[PATCH]
        assert status.status.value == "stood-aside", status
        assert "SGLang preprocesses on cuda" in status.reason  # "cuda:0" from 0.5.17
        assert "VLM_FASTPATH_CPU_PREPROCESS=1" in status.reason
        assert type(mm).gpu_image_decode is True  # SGLang's nvJPEG decode, untouched
    finally:
        REGISTRY.revert(engine="sglang")
        adapter.forget_views()


def _assert_a_large_image_starts_no_work(monkeypatch) -> None:
    """SGLang's own loader on a large JPEG (nvJPEG off, as for PNGs): the decode layer starts
    no processor work (none would be taken: SGLang preprocesses on its GPU)."""
    from PIL import Image

    from fixtures import decode_corpus
    from vlm_fastpath.imaging.decode import layer
    from vlm_fastpath.qwen_integration import speculative

    common = pytest.importorskip("sglang.srt.utils.common")
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    started: list[int] = []
    start = speculative.start
    monkeypatch.setattr(speculative, "start",
                        lambda *a, **k: started.append(1) or start(*a, **k))
    data = decode_corpus.save(Image.fromarray(decode_corpus.photo_like(1203, 917, seed=3)),
                              "JPEG")
    loaded = common.load_image(data, False)
    assert (loaded[0] if isinstance(loaded, tuple) else loaded).size == (1203, 917)
    assert started == [], "the loader started work for a processor that will not take it"


def test_cpu_preprocess_switch_serves_sglangs_gpu_calls(engine, checkpoints, monkeypatch,  # noqa: F811
                                                       image_calls):
    _on_cuda(monkeypatch)
    monkeypatch.setenv("VLM_FASTPATH_CPU_PREPROCESS", "1")
    adapter.forget_views()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, _ = _build(checkpoints["qwen2.5"])
        image_calls.clear()  # the probes of the hand-out ran ours on probe images
        images = _images()[:2]
        twin = mm._processor.image_processor
        ours = twin(images=images, device="cuda:0", return_tensors="pt")  # as SGLang calls it
        assert image_calls, "the switch did not put ours in place of SGLang's GPU call"
        want = twin.vlm_original()(images=images, device="cpu", return_tensors="pt")
        assert torch.equal(ours["pixel_values"], want["pixel_values"])  # transformers, CPU
        assert type(mm).gpu_image_decode is False  # Pillow decodes for this class now
        status = {r.name: r for r in REGISTRY.status("sglang")}[PATCH]
        assert status.status.value == "applied" and "serves" in status.reason, status
        monkeypatch.delenv("VLM_FASTPATH_CPU_PREPROCESS")
        assert type(mm).gpu_image_decode is True
    finally:
        REGISTRY.revert(engine="sglang")
        adapter.forget_views()
