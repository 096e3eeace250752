"""Qwen-VL images sent with each patch once: the release's own towers give equal embeddings.

The towers are vLLM's own ``Qwen2VisionTransformer``/``Qwen2_5_VisionTransformer``/
``Qwen3_VisionTransformer`` of the installed release, built on the CPU from tiny vision configs
(random weights; a one-process gloo group and a CPU ``VllmConfig`` for construction only; the
attention runs the release's ``forward_native``, pinned staging is off: no CUDA here). The
frontend half runs vLLM's whole ``apply`` on the processor vLLM builds for a tiny Qwen2.5-VL
checkpoint, after a real ``InputProcessor`` was built from a ``VllmConfig``.
"""

from __future__ import annotations

import importlib
import inspect
import socket
from types import SimpleNamespace

import numpy as np
import PIL.Image
import pytest
import torch

import vlm_fastpath
from vlm_fastpath.patches import REGISTRY
from vlm_fastpath.qwen_integration import compact

vllm = pytest.importorskip("vllm")

FRONT = "vllm-qwen-compact-image-rows"
MODELS = "vllm.model_executor.models."
TOWERS = {
    "qwen2-vl": ("qwen2_vl", "Qwen2VisionTransformer", "vllm-qwen2-vl-compact-rows"),
    "qwen2.5-vl": ("qwen2_5_vl", "Qwen2_5_VisionTransformer", "vllm-qwen2-5-vl-compact-rows"),
    "qwen3-vl": ("qwen3_vl", "Qwen3_VisionTransformer", "vllm-qwen3-vl-compact-rows"),
}
GRIDS = [[1, 8, 12], [1, 4, 4], [1, 6, 10]]  # several images of different grids in one batch
PROMPT_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
MEAN, STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _vision_config(name: str):
    if name == "qwen2-vl":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

        return Qwen2VLVisionConfig(depth=2, embed_dim=32, hidden_size=32, num_heads=2,
                                   mlp_ratio=2)
    if name == "qwen2.5-vl":
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import (
            Qwen2_5_VLVisionConfig,
        )

        return Qwen2_5_VLVisionConfig(depth=2, hidden_size=32, num_heads=2,
                                      intermediate_size=64, out_hidden_size=32,
                                      window_size=112, fullatt_block_indexes=[1])
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    return Qwen3VLVisionConfig(depth=2, hidden_size=32, num_heads=2, intermediate_size=64,
                               out_hidden_size=32, num_position_embeddings=64,
                               deepstack_visual_indexes=[0])


def _input_norm():
    try:
        from vllm.model_executor.layers.fusion.mm_input_norm import FusedMMInputNorm
    except ImportError:
        return None
    return FusedMMInputNorm(list(MEAN), list(STD), 1 / 255)


def _build(name: str, module, uint8: bool = False):
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(config):
        kwargs = {}
        tower_cls = getattr(module, TOWERS[name][1])
        if uint8:
            norm = _input_norm()
            if norm is None:
                pytest.skip(f"vllm {vllm.__version__} normalizes no uint8 on the device")
            if "input_norm" not in inspect.signature(tower_cls.__init__).parameters:
                pytest.skip(f"vllm {vllm.__version__}'s {TOWERS[name][1]} takes no input norm")
            kwargs["input_norm"] = norm
        if not ps.model_parallel_is_initialized():
            ps.init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
            )
            ps.initialize_model_parallel(1, 1, backend="gloo")
        torch.manual_seed(0)
        tower = tower_cls(_vision_config(name), **kwargs)
    for param in tower.parameters():
        torch.nn.init.normal_(param, std=0.05)
    for layer in tower.modules():  # the release's own SDPA path (no CUDA kernels here)
        if hasattr(layer, "forward_native") and hasattr(layer, "_forward_method"):
            layer._forward_method = layer.forward_native
    return tower.eval()


@pytest.fixture()
def no_pinned_staging(monkeypatch):
    from vllm.utils import torch_utils

    monkeypatch.setattr(torch_utils, "PIN_MEMORY", False, raising=False)
    for module in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        loaded = importlib.import_module(MODELS + module)
        if hasattr(loaded, "PIN_MEMORY"):
            monkeypatch.setattr(loaded, "PIN_MEMORY", False)
        if hasattr(loaded, "is_pin_memory_available"):  # 0.22-0.2x
            monkeypatch.setattr(loaded, "is_pin_memory_available", lambda: False)


def _module(name: str):
    module_name, tower, patch = TOWERS[name]
    try:
        module = importlib.import_module(MODELS + module_name)
    except ImportError as exc:
        pytest.skip(f"no {module_name} in vllm {vllm.__version__}: {exc}")
    if not hasattr(module, tower):
        pytest.skip(f"no {tower} in vllm {vllm.__version__}")
    return module


def _rows(tower, uint8: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Compact rows for ``GRIDS`` in the tower's geometry, and the same rows full."""
    from vlm_fastpath.qwen_integration.compact import geometry

    channels, temporal, patch = geometry(tower)
    gen = torch.Generator().manual_seed(seed)
    shape = (sum(t * h * w for t, h, w in GRIDS), channels * patch * patch)
    if uint8:
        rows = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    else:
        rows = torch.randn(shape, generator=gen)
    # the full layout as transformers tiles an image: [channel, temporal copy, py, px]
    planes = rows.reshape(shape[0], channels, patch, patch)
    return rows, torch.stack([planes] * temporal, dim=2).reshape(shape[0], -1)


def _forward(tower, rows):
    with torch.no_grad():
        return tower(rows, grid_thw=GRIDS)


def test_status_per_release():
    for name, (module_name, _, patch) in TOWERS.items():
        try:
            importlib.import_module(MODELS + module_name)
        except ImportError:
            continue
        status = {r["name"]: r for r in vlm_fastpath.status("vllm")}
        assert status[patch]["status"] == "applied", (name, status[patch])
    assert {r["name"]: r for r in vlm_fastpath.status("vllm")}[FRONT]["status"] in (
        "applied", "pending")


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8+device-normalize"])
@pytest.mark.parametrize("name", list(TOWERS))
def test_tower_embeddings_equal_from_compact_rows(name, uint8, no_pinned_staging):
    module = _module(name)
    tower = _build(name, module, uint8)
    rows, full = _rows(tower, uint8)
    expected = _forward(tower, full)
    got = _forward(tower, rows)
    assert torch.equal(got, expected)
    # the full rows themselves still pass untouched
    assert torch.equal(_forward(tower, full), expected)
    # and without the expansion the release cannot read compact rows (the test can fail)
    vlm_fastpath.revert("vllm", patches=[TOWERS[name][2]])
    with pytest.raises(RuntimeError):
        _forward(tower, rows)


def test_encoder_data_parallel_path_expands(no_pinned_staging):
    """``--mm-encoder-tp-mode data``: vLLM's sharded runner slices the rows per image and
    calls the tower; the compact rows give the full rows' embeddings (one rank here)."""
    module = _module("qwen2.5-vl")
    from vllm.model_executor.models.vision import run_dp_sharded_mrope_vision_model

    tower = _build("qwen2.5-vl", module)
    rows, full = _rows(tower, False, seed=3)
    with torch.no_grad():
        expected = run_dp_sharded_mrope_vision_model(tower, full, GRIDS, rope_type="rope_3d")
        got = run_dp_sharded_mrope_vision_model(tower, rows, GRIDS, rope_type="rope_3d")
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


# -- the API server ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen25(tmp_path_factory):
    """A tiny Qwen2.5-VL checkpoint, its ``ModelConfig`` and the processor vLLM builds."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    from fixtures import qwen_checkpoint

    try:
        importlib.import_module("vllm.v1.engine.input_processor")  # as in every API server
    except Exception as exc:  # noqa: BLE001 - 0.22.1's env: its xgrammar binding does not load
        pytest.skip(f"vllm.v1.engine.input_processor does not import in this env: {exc!r}")
    path = qwen_checkpoint.ensure(tmp_path_factory.mktemp("qwen-compact"), qwen_checkpoint.QWEN25)
    config = ModelConfig(model=str(path), tokenizer=str(path), dtype="float32",
                         max_model_len=8192)
    return config, MULTIMODAL_REGISTRY.create_processor(config)


def _input_processor(model_config, **parallel):
    from vllm.config import DeviceConfig, ParallelConfig, VllmConfig
    from vllm.v1.engine.input_processor import InputProcessor

    config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"),
                        parallel_config=ParallelConfig(**parallel))
    return InputProcessor(config)


@pytest.fixture()
def forget_topology():
    from vlm_fastpath.patches.vllm.qwen_compact_images import v1_engine_input_processor as front

    front.forget()
    yield front
    front.forget()


def _images(seed: int = 0) -> list[PIL.Image.Image]:
    rng = np.random.default_rng(seed)
    return [PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), np.uint8))
            for h, w in ((300, 400), (129, 517))]


def _apply(processor, images, **mm_kwargs):
    prompt = "Describe " + " and ".join([PROMPT_IMAGE] * len(images)) + "."
    items = processor.info.parse_mm_data({"image": images})
    out = processor(prompt, items, hf_processor_mm_kwargs=mm_kwargs)
    found = out["mm_kwargs"]["image"]
    return [{key: elem.data for key, elem in item.items()} for item in found], out


def _full(processor, images, **mm_kwargs):
    """vLLM's own answer: every patch of ours reverted for the call."""
    vlm_fastpath.revert("vllm")
    try:
        return _apply(processor, images, **mm_kwargs)[0]
    finally:
        vlm_fastpath.apply("vllm")


def _device_normalize(model_config) -> dict[str, bool]:
    return {"do_rescale": False, "do_normalize": False}


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_api_server_sends_compact_rows_that_expand_to_vllms_own(qwen25, forget_topology, uint8):
    model_config, processor = qwen25
    _input_processor(model_config)
    kwargs = _device_normalize(model_config) if uint8 else {}
    images = _images()
    items, out = _apply(processor, images, **kwargs)
    assert REGISTRY.served(FRONT)["Qwen2_5_VLForConditionalGeneration"] == ""
    theirs = _full(processor, images, **kwargs)
    for ours, full in zip(items, theirs, strict=True):
        assert ours["pixel_values"].shape[1] == 3 * 14 * 14
        assert full["pixel_values"].shape[1] == 3 * 2 * 14 * 14
        assert torch.equal(compact.expand(ours["pixel_values"], 3, 2, 14), full["pixel_values"])
        assert torch.equal(ours["image_grid_thw"], full["image_grid_thw"])
    assert out["prompt_token_ids"] == _apply_prompt(processor, images, **kwargs)


def _apply_prompt(processor, images, **kwargs):
    vlm_fastpath.revert("vllm")
    try:
        return _apply(processor, images, **kwargs)[1]["prompt_token_ids"]
    finally:
        vlm_fastpath.apply("vllm")


def test_answer_from_transformers_is_cut_to_one_copy(qwen25, forget_topology, monkeypatch):
    """Where our processor stands aside (here: the probes say it differs), transformers'
    full rows are cut, so every item of the model has one layout."""
    from vlm_fastpath.patches.adapters import qwen_twin

    model_config, processor = qwen25
    _input_processor(model_config)
    qwen_twin.forget_views()
    monkeypatch.setattr("vlm_fastpath.qwen_integration.check_compatible",
                        lambda *_: "behaviour: injected difference")
    try:
        items, _ = _apply(processor, _images(1))
    finally:
        monkeypatch.undo()
        qwen_twin.forget_views()
    theirs = _full(processor, _images(1))
    for ours, full in zip(items, theirs, strict=True):
        assert ours["pixel_values"].shape[1] == 3 * 14 * 14
        assert torch.equal(compact.expand(ours["pixel_values"], 3, 2, 14), full["pixel_values"])


def test_without_the_expansion_the_full_rows_are_sent(qwen25, forget_topology):
    """The mixed fleet: where the tower's expansion is not applied (an engine without it),
    the API server sends the full rows."""
    model_config, processor = qwen25
    _input_processor(model_config)
    vlm_fastpath.revert("vllm", patches=["vllm-qwen2-5-vl-compact-rows"])
    items, _ = _apply(processor, _images(2))
    assert all(item["pixel_values"].shape[1] == 3 * 2 * 14 * 14 for item in items)
    assert "not applied" in REGISTRY.served(FRONT)["Qwen2_5_VLForConditionalGeneration"]


def test_unknown_topology_sends_full_rows(qwen25, forget_topology):
    _, processor = qwen25
    items, _ = _apply(processor, _images(3))
    assert all(item["pixel_values"].shape[1] == 3 * 2 * 14 * 14 for item in items)
    assert "topology unknown" in REGISTRY.served(FRONT)["Qwen2_5_VLForConditionalGeneration"]


def test_remote_engines_get_full_rows(qwen25, forget_topology):
    model_config, processor = qwen25
    _input_processor(model_config, data_parallel_size=2, data_parallel_size_local=1)
    items, _ = _apply(processor, _images(4))
    assert all(item["pixel_values"].shape[1] == 3 * 2 * 14 * 14 for item in items)
    assert "other nodes" in REGISTRY.served(FRONT)["Qwen2_5_VLForConditionalGeneration"]


@pytest.mark.parametrize(
    ("parallel", "compilation", "expected"),
    [
        ({}, {}, ""),
        ({"nnodes": 2}, {}, "nnodes=2"),
        ({"data_parallel_size": 4, "data_parallel_size_local": 2}, {}, "other nodes"),
        ({"data_parallel_size": 4, "data_parallel_size_local": 2,
          "data_parallel_hybrid_lb": True}, {}, ""),
        ({"data_parallel_size": 4, "data_parallel_size_local": 1,
          "data_parallel_external_lb": True}, {}, ""),
        ({"distributed_executor_backend": "ray"}, {}, "Ray"),
        ({}, {"cudagraph_mm_encoder": True}, "CUDA graphs"),
    ],
)
def test_topology_clause(parallel, compilation, expected, forget_topology):
    base = {"nnodes": 1, "data_parallel_size": 1, "data_parallel_size_local": 1,
            "distributed_executor_backend": "mp"}
    config = SimpleNamespace(parallel_config=SimpleNamespace(**{**base, **parallel}),
                             compilation_config=SimpleNamespace(**compilation))
    clause = forget_topology.topology_clause(config)
    assert (expected in clause) if expected else clause == ""


def test_payload_to_the_engine_core_is_halved(qwen25, forget_topology):
    """What the API server serializes for the engine core: vLLM's own msgpack encoder."""
    from vllm.v1.serial_utils import MsgpackEncoder

    model_config, processor = qwen25
    _input_processor(model_config)
    images = _images(5)
    _, ours = _apply(processor, images, do_rescale=False, do_normalize=False)
    vlm_fastpath.revert("vllm")
    try:
        _, theirs = _apply(processor, images, do_rescale=False, do_normalize=False)
    finally:
        vlm_fastpath.apply("vllm")

    def size(out) -> int:
        return sum(len(memoryview(buf).cast("B")) for item in out["mm_kwargs"]["image"]
                   for buf in MsgpackEncoder().encode(item))

    assert size(ours) < 0.55 * size(theirs)


def test_a_batch_mixing_compact_and_full_rows_is_not_padded():
    """vLLM's own batching of one field (``MultiModalFlatField``): compact items next to full
    ones are expanded, never zero-padded; other batches are vLLM's."""
    from vllm.multimodal.inputs import MultiModalFlatField

    field = MultiModalFlatField(slices=[[slice(0, 1)]], dim=0)
    gen = torch.Generator().manual_seed(7)
    narrow = torch.randint(0, 256, (5, 3 * 14 * 14), generator=gen, dtype=torch.uint8)
    full = torch.randint(0, 256, (4, 3 * 2 * 14 * 14), generator=gen, dtype=torch.uint8)
    planes = narrow.reshape(5, 3, 14, 14)
    narrow_as_full = torch.stack([planes, planes], dim=2).reshape(5, -1)
    got = field._reduce_data([full, narrow], pin_memory=False)
    assert torch.equal(got, torch.cat([full, narrow_as_full]))
    # widths of no Qwen geometry: vLLM's own padding, untouched
    other = [torch.ones(2, 6), torch.ones(3, 4)]
    padded = field._reduce_data(other, pin_memory=False)
    vlm_fastpath.revert("vllm", patches=["vllm-qwen-compact-mixed-batch"])
    assert torch.equal(padded, field._reduce_data(other, pin_memory=False))
    # without the guard vLLM pads the compact rows with zeros (the test can fail)
    unguarded = field._reduce_data([full, narrow], pin_memory=False)
    assert not torch.equal(unguarded, torch.cat([full, narrow_as_full]))
