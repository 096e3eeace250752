"""Compact Qwen-VL image items on SGLang: the tokenizer emits each patch once, the model expands.

Model side: the release's own ``get_image_feature`` of Qwen2-VL, Qwen2.5-VL (over the release's
real vision towers, tiny configs, random weights, on the CPU) and Qwen3-VL/-MoE (over the
release's real patch embedding) gives equal embeddings (``torch.equal``) for compact and full
items. Tokenizer side: SGLang's own ``QwenVLImageProcessor`` on the tiny Qwen2.5-VL checkpoint,
called from a worker thread as its processor pool does, writes compact rows whose expansion
equals the release's full rows; the items, pickled as to the scheduler, give the model the same
embeddings. Where either half cannot apply, the full rows are sent.
"""

from __future__ import annotations

import concurrent.futures
import pickle
import types

import pytest
import torch

from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.patches.sglang.qwen_compact_images import (
    multimodal_processors_base_processor as tokenizer_side,
)
from vlm_fastpath.qwen_integration import compact

from .pipeline import release_items
from .test_qwen_processor import (  # noqa: F401 - fixtures
    PROMPT_IMAGE,
    _build,
    _images,
    checkpoints,
    cpu_path,
)

FRONT = "sglang-qwen-compact-image-rows"
MODEL_PATCH = {"qwen2_vl": "sglang-qwen2-vl-compact-rows",
               "qwen2_5_vl": "sglang-qwen2-5-vl-compact-rows",
               "qwen3_vl": "sglang-qwen3-vl-compact-rows",
               "qwen3_vl_moe": "sglang-qwen3-vl-compact-rows"}
MODEL_CLASS = {"qwen2_vl": "Qwen2VLForConditionalGeneration",
               "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
               "qwen3_vl": "Qwen3VLForConditionalGeneration",
               "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration"}
GRIDS = ((1, 4, 4), (1, 6, 4), (1, 2, 8))


class _PatchEmbedTower(torch.nn.Module):
    """Qwen3-VL's tower stands in as the release's own patch embedding (its full tower needs
    vLLM's rotary kernel on the CPU); the patch embedding is where the rows are read."""

    def __init__(self, embed: torch.nn.Module) -> None:
        super().__init__()
        self.patch_embed = embed

    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embed.proj.weight.dtype

    def forward(self, x: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
        return self.patch_embed(x)


def _tower(family: str):
    """The release's tower for ``family`` (tiny, random weights, float32, CPU)."""
    import importlib

    from fixtures import sglang_cpu

    sglang_cpu.setup_sglang_cpu()
    torch.manual_seed(0)
    if family == "qwen2_5_vl":
        import sglang.srt.models.qwen2_5_vl as mod
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
            Qwen2_5_VLVisionConfig,
        )

        cfg = Qwen2_5_VLVisionConfig(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                                     out_hidden_size=48, fullatt_block_indexes=[1],
                                     window_size=56)
        kwargs = {"use_data_parallel": True}  # attention TP rank 0 without TP groups
        with sglang_cpu.fa3_stub(None):
            tower = mod.Qwen2_5_VisionTransformer(cfg, norm_eps=1e-6, **kwargs)
    elif family == "qwen2_vl":
        import sglang.srt.models.qwen2_vl as mod
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

        cfg = Qwen2VLVisionConfig(depth=2, embed_dim=32, hidden_size=48, mlp_ratio=2,
                                  num_heads=2)
        cfg.in_chans = 3  # the release reads transformers 4's name
        with sglang_cpu.fa3_stub(None), _attention_rank_zero():
            tower = mod.Qwen2VisionTransformer(cfg, norm_eps=1e-6)
    else:
        mod = importlib.import_module("sglang.srt.models.qwen3_vl")
        cfg = types.SimpleNamespace(patch_size=16, temporal_patch_size=2, in_channels=3,
                                    hidden_size=32)
        tower = _PatchEmbedTower(mod.Qwen3VLVisionPatchEmbed(cfg))
    for param in tower.parameters():
        torch.nn.init.normal_(param, std=0.05)
    return tower.eval(), cfg


def _attention_rank_zero():
    """0.5.23 reads the attention TP rank from its runtime context (published by a server)."""
    import contextlib

    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        return contextlib.nullcontext()
    return get_parallel().override(attn_tp_rank=0, attn_tp_size=1, tp_rank=0, tp_size=1)


def _model(family: str):
    import importlib

    cls = getattr(importlib.import_module(f"sglang.srt.models.{family}"), MODEL_CLASS[family])
    tower, cfg = _tower(family)
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    model.visual = tower
    model.use_data_parallel = False
    model.config = types.SimpleNamespace(vision_config=cfg)
    return model


def _rows(model, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Compact rows for ``GRIDS`` in the model's geometry, and the same rows full (each
    channel's patch repeated over the temporal axis, as transformers tiles an image)."""
    channels, temporal, patch = compact.geometry(model.visual)
    gen = torch.Generator().manual_seed(seed)
    count = sum(t * h * w for t, h, w in GRIDS)
    rows = torch.randn((count, channels * patch * patch), generator=gen)
    planes = rows.reshape(count, channels, 1, patch * patch)
    return rows, torch.cat([planes] * temporal, dim=2).reshape(count, -1)


def _items(rows: torch.Tensor):
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

    from fixtures.sglang_cpu import make_item

    items, start = [], 0
    for grid in GRIDS:
        count = grid[0] * grid[1] * grid[2]
        items.append(make_item(MultimodalDataItem, Modality.IMAGE, rows[start:start + count],
                               {"image_grid_thw": torch.tensor([grid])}))
        start += count
    return items


def _embed(model, items) -> torch.Tensor:
    from fixtures import sglang_cpu

    with torch.no_grad(), sglang_cpu.fa3_stub(None):  # the vision kernel, on the CPU
        return model.get_image_feature(items)


def _only(patches) -> None:
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang", patches=list(patches))


@pytest.mark.parametrize("family", list(MODEL_CLASS))
def test_compact_items_give_the_full_rows_embeddings(engine, family):
    model = _model(family)
    small, full = _rows(model)
    REGISTRY.revert(engine="sglang")
    want = _embed(model, _items(full))
    _only([MODEL_PATCH[family]])
    try:
        items = _items(small)
        got = _embed(model, items)
        assert torch.equal(got, want)
        # after the call each item holds its compact rows again (no full copy kept)
        assert all(item.feature.shape[1] == small.shape[1] for item in items)
        assert torch.equal(_embed(model, _items(full)), want)  # full items pass untouched
    finally:
        REGISTRY.revert(engine="sglang")
    # the release alone cannot read compact rows: it fails or answers something else
    try:
        stock = _embed(model, _items(small))
    except (RuntimeError, ValueError):
        return
    assert stock.shape != want.shape or not torch.equal(stock, want)


def test_precomputed_embeddings_of_that_width_are_left_alone(engine):
    """An item whose rows are not one per patch of its grid is not compact rows."""
    model = _model("qwen2_5_vl")
    small, _ = _rows(model)
    item = _items(small)[0]
    merged = small[: small.shape[0] // 4]  # one row per merged token
    item.feature = merged
    _only([MODEL_PATCH["qwen2_5_vl"]])
    try:
        from vlm_fastpath.patches.sglang.qwen_compact_images.models_qwen_vl import expand_items

        assert expand_items(model, [item]) == [] and item.feature is merged
    finally:
        REGISTRY.revert(engine="sglang")


def _prompt(count: int) -> str:
    return "Describe " + " and ".join([PROMPT_IMAGE] * count) + "."


def _call_in_worker(mm, images):
    """``process_mm_data`` on another thread, as SGLang's processor pool runs it
    (``loop.run_in_executor``: no context is carried over)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(mm.process_mm_data, input_text=_prompt(len(images)),
                           images=images).result()


def test_tokenizer_sends_compact_rows_the_model_reads_as_full(engine, checkpoints, cpu_path):  # noqa: F811
    images = _images()
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        assert REGISTRY.served(FRONT).get(MODEL_CLASS["qwen2_5_vl"], "unset") in ("", "unset")
        mm, _ = _build(checkpoints["qwen2.5"])
        assert mm.__dict__[tokenizer_side.FLAG] is True
        assert REGISTRY.served(FRONT)[MODEL_CLASS["qwen2_5_vl"]] == ""
        ours = _call_in_worker(mm, images)
        REGISTRY.revert(engine="sglang")
        stock_mm, _ = _build(checkpoints["qwen2.5"])
        stock = stock_mm.process_mm_data(input_text=_prompt(len(images)), images=images)
    finally:
        REGISTRY.revert(engine="sglang")
    assert ours["pixel_values"].shape[1] == 3 * 14 * 14
    assert stock["pixel_values"].shape[1] == 3 * 2 * 14 * 14
    assert torch.equal(compact.expand(ours["pixel_values"], 3, 2, 14), stock["pixel_values"])
    assert torch.equal(ours["input_ids"], stock["input_ids"])
    assert torch.equal(ours["image_grid_thw"], stock["image_grid_thw"])
    size = len(pickle.dumps(ours["pixel_values"]))
    assert size < 0.55 * len(pickle.dumps(stock["pixel_values"]))

    # what crosses to the scheduler, and what the model makes of it
    from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor

    token = stock_mm._processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    got_items, _ = release_items(QwenVLImageProcessor, ours, token)
    want_items, _ = release_items(QwenVLImageProcessor, stock, token)
    model = _model("qwen2_5_vl")
    want = _embed(model, want_items)
    _only([MODEL_PATCH["qwen2_5_vl"]])
    try:
        assert torch.equal(_embed(model, got_items), want)
    finally:
        REGISTRY.revert(engine="sglang")


def test_full_rows_where_the_model_does_not_expand(engine, checkpoints, cpu_path):  # noqa: F811
    """Mixed fleet: the model's expansion is not applied in this installation -> full rows."""
    others = [r.name for r in REGISTRY.status("sglang")
              if r.name != MODEL_PATCH["qwen2_5_vl"]]
    _only(others)
    try:
        assert FRONT in REGISTRY.installed()
        mm, _ = _build(checkpoints["qwen2.5"])
        assert mm.__dict__[tokenizer_side.FLAG] is False
        assert MODEL_PATCH["qwen2_5_vl"] in REGISTRY.served(FRONT)[MODEL_CLASS["qwen2_5_vl"]]
        out = _call_in_worker(mm, _images()[:2])
        assert out["pixel_values"].shape[1] == 3 * 2 * 14 * 14
    finally:
        REGISTRY.revert(engine="sglang")


def test_full_rows_on_sglangs_gpu_path_and_other_topologies(engine, checkpoints, cpu_path,  # noqa: F811
                                                            monkeypatch):
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, _ = _build(checkpoints["qwen2.5"])
        assert tokenizer_side.why_full(mm) == ""
        monkeypatch.setattr(tokenizer_side, "preprocessing_device", lambda mm: "cuda:0")
        monkeypatch.delenv("VLM_FASTPATH_CPU_PREPROCESS", raising=False)
        assert "preprocesses on cuda:0" in tokenizer_side.why_full(mm)
        # older releases read their device choice from the server args: keep it "cpu"
        monkeypatch.setattr(tokenizer_side, "preprocessing_device", lambda mm: "cpu")
        for args, words in ((types.SimpleNamespace(nnodes=2), "nnodes=2"),
                            (types.SimpleNamespace(nnodes=1, language_only=True),
                             "language_only"),
                            (types.SimpleNamespace(nnodes=1, encoder_only=True),
                             "encoder_only")):
            monkeypatch.setattr(mm, "server_args", args)
            assert words in tokenizer_side.why_full(mm)
        monkeypatch.setattr(mm, "server_args", types.SimpleNamespace(nnodes=1))
        assert tokenizer_side.why_full(mm) == ""
        mm.hf_config.architectures = ["Qwen3_5ForConditionalGeneration"]
        assert "not one whose" in tokenizer_side.why_full(mm)
    finally:
        REGISTRY.revert(engine="sglang")


def test_revert_restores_exact_originals(engine):
    import importlib

    owners = [importlib.import_module(f"sglang.srt.models.{f}") for f in
              ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")]
    classes = [getattr(mod, MODEL_CLASS[f]) for mod, f in
               zip(owners, ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"), strict=True)]
    base = importlib.import_module(tokenizer_side.BASE).BaseMultimodalProcessor
    qwen = importlib.import_module(tokenizer_side.QWEN_VL).QwenVLImageProcessor
    REGISTRY.revert(engine="sglang")
    before = [dict(vars(cls)) for cls in (*classes, base, qwen)]
    REGISTRY.apply(engine="sglang")
    REGISTRY.apply(engine="sglang")  # idempotent
    assert {FRONT, *MODEL_PATCH.values()} <= set(REGISTRY.installed())
    REGISTRY.revert(engine="sglang")
    for cls, saved in zip((*classes, base, qwen), before, strict=True):
        after = dict(vars(cls))
        assert after.keys() == saved.keys(), cls
        assert all(after[name] is value for name, value in saved.items()), cls


def _artifacts(mm, images):
    """``prepare_artifact_batch`` (0.5.20+: the image-artifact door, Qwen3-VL's default) on a
    worker thread, as the artifact layer runs it."""
    from sglang.srt.managers.schedule_batch import Modality
    from sglang.srt.multimodal.media_artifacts.base import MediaArtifactInput

    entries = [MediaArtifactInput(content_digest="sha256:" + f"{i:064x}",
                                  artifact_key="sha256:" + f"{i + 100:064x}",
                                  modality=Modality.IMAGE, media=image)
               for i, image in enumerate(images)]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(mm.prepare_artifact_batch, entries).result()


def test_image_artifacts_are_compact_too(engine, checkpoints, cpu_path):  # noqa: F811
    from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor

    if "prepare_artifact_batch" not in vars(QwenVLImageProcessor):
        pytest.skip(f"sglang {engine['version']}: no image-artifact door")
    if "qwen3" not in checkpoints:
        pytest.skip("transformers has no Qwen3-VL")
    images = _images()[:3]
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    try:
        mm, _ = _build(checkpoints["qwen3"])
        assert mm.__dict__[tokenizer_side.FLAG] is True
        ours = _artifacts(mm, images)
        REGISTRY.revert(engine="sglang")
        stock = _artifacts(_build(checkpoints["qwen3"])[0], images)
    finally:
        REGISTRY.revert(engine="sglang")
    for got, want in zip(ours, stock, strict=True):
        assert got.feature.shape[1] * 2 == want.feature.shape[1] == 3 * 2 * 16 * 16
        assert torch.equal(compact.expand(got.feature, 3, 2, 16), want.feature)
        assert torch.equal(got.model_specific_data["image_grid_thw"],
                           want.model_specific_data["image_grid_thw"])


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_encoder_data_parallel_path_expands(engine, family):
    """``--mm-enable-dp-encoder``: the release's ``run_dp_sharded_mrope_vision_model`` (one
    rank here) reads expanded rows; the items hold their compact rows afterwards."""
    model = _model(family)
    small, full = _rows(model)
    REGISTRY.revert(engine="sglang")
    want = _embed(model, _items(full))
    model.use_data_parallel = True
    _only([MODEL_PATCH[family]])
    try:
        items = _items(small)
        got = _embed(model, items)
    finally:
        REGISTRY.revert(engine="sglang")
    assert torch.equal(got, want)
    assert all(item.feature.shape[1] == small.shape[1] for item in items)
