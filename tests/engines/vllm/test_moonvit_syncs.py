"""Kimi K2.5 MoonViT (``kimi_k25_vit``): device-to-host syncs per tower forward, real tower.

The real ``MoonViT3dPretrainedModel`` is built on the CPU from a tiny ``KimiK25VisionConfig``
(a one-process gloo TP group and a CPU ``VllmConfig`` for construction only). Stand-ins: the
``TransferRecorder`` (``fixtures.sglang_cpu``) simulates a device; vLLM's
attention custom ops are called through their Python bodies (``flash_attn_maxseqlen_wrapper``,
``torch_sdpa_wrapper`` -- the ``torch.ops`` layer would hide their ``.item()``/``.tolist()``
from a ``TorchFunctionMode``) and ``flash_attn_varlen_func`` is an exact per-segment SDPA.
"""

from __future__ import annotations

import contextlib
import socket

import pytest
import torch
from packaging.version import Version

from fixtures import transfers as _testing
from vlm_fastpath.patches import REGISTRY

NAME = "vllm-moonvit-max-seqlen"
VIT = "vllm.model_executor.models.kimi_k25_vit"
UPSTREAM = Version("0.23")
LAYERS = 27
GRIDS = [(1, 4, 4), (1, 8, 6), (1, 6, 6)]
# Unpatched on 0.22.x, grid on the device: one max_seqlen.item() (flash attention) or one
# cu_seqlens.tolist() (SDPA) per block, plus grid_thws.tolist() in the position embedding, the
# rope table and twice in tpool_patch_merger.
BEFORE = LAYERS + 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def vit_module(vllm_version):
    if vllm_version >= UPSTREAM:
        pytest.skip(f"vLLM {vllm_version} computes MoonViT max_seqlen on the host itself")
    import importlib

    try:
        return importlib.import_module(VIT)
    except ImportError as exc:
        pytest.skip(f"no {VIT} in this vLLM ({exc})")


def _tiny_tower(vit):
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.transformers_utils.configs.kimi_k25 import KimiK25VisionConfig

    config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(config):
        if not ps.model_parallel_is_initialized():
            ps.init_distributed_environment(
                world_size=1,
                rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
                local_rank=0,
                backend="gloo",
            )
            ps.initialize_model_parallel(1, 1, backend="gloo")
        torch.manual_seed(0)
        cfg = KimiK25VisionConfig(
            num_hidden_layers=LAYERS,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            init_pos_emb_height=8,
            init_pos_emb_width=8,
            mm_hidden_size=32,
        )
        tower = vit.MoonViT3dPretrainedModel(cfg)
    for param in tower.parameters():
        torch.nn.init.normal_(param, std=0.05)
    return tower.eval()


@pytest.fixture(scope="module")
def tower(vit_module):
    return _tiny_tower(vit_module)


@contextlib.contextmanager
def attention(tower, backend: str, recorder):
    """Route every block's ``MMEncoderAttention`` to ``backend`` with observable wrappers."""
    from vllm.model_executor.layers.attention import mm_encoder_attention as mea
    from vllm.v1.attention.backends import fa_utils
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.ops import vit_attn_wrappers as wrappers

    # Plain Python forwarders (the release's are custom ops): their signatures differ per
    # release (0.15 has no ``enable_gqa``), so pass everything through.
    def flash(*args, **kwargs):
        return wrappers.flash_attn_maxseqlen_wrapper(*args, **kwargs)

    def sdpa(*args, **kwargs):
        return wrappers.torch_sdpa_wrapper(*args, **kwargs)

    enum = AttentionBackendEnum[backend]
    saved_globals = {
        (mea, "vit_flash_attn_wrapper"): mea.vit_flash_attn_wrapper,
        (mea, "vit_torch_sdpa_wrapper"): mea.vit_torch_sdpa_wrapper,
        (fa_utils, "flash_attn_varlen_func"): fa_utils.__dict__.get("flash_attn_varlen_func"),
    }
    attns = [block.attn for block in tower.encoder.blocks]
    saved_attrs = [(a, dict(a.__dict__)) for a in attns]
    mea.vit_flash_attn_wrapper = flash
    mea.vit_torch_sdpa_wrapper = sdpa
    fa_utils.flash_attn_varlen_func = _testing.reference_varlen_attention(recorder)
    for attn in attns:
        attn.attn_backend = enum
        attn.is_flash_attn_backend = backend == "FLASH_ATTN"
        attn._fa_version = None
        attn._forward_method = attn.forward_cuda
    try:
        yield
    finally:
        for (owner, name), value in saved_globals.items():
            setattr(owner, name, value)
        for attn, state in saved_attrs:
            attn.__dict__.clear()
            attn.__dict__.update(state)


def _inputs(grids, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    grid = torch.tensor(grids, dtype=torch.long)
    pixels = torch.randn(int(grid.prod(-1).sum()), 3, 14, 14, generator=gen)
    return pixels, grid


def run_forward(tower, backend: str, grid_on_device: bool = True):
    pixels, grid = _inputs(GRIDS)
    recorder = _testing.TransferRecorder()
    with attention(tower, backend, recorder), recorder, torch.no_grad():
        recorder.place(tower)
        recorder.mark(pixels)
        if grid_on_device:
            recorder.mark(grid)
        out = tower(pixels, grid)
    return out, recorder


def _equal(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("backend", ["FLASH_ATTN", "TORCH_SDPA"])
def test_syncs_before_and_after(tower, backend):
    REGISTRY.revert(engine="vllm")
    run_forward(tower, backend)  # warm-up: the rope table is built lazily
    before, rec_before = run_forward(tower, backend)
    results = {r.name: r.status for r in REGISTRY.apply(engine="vllm")}
    assert results[NAME] == "applied"
    try:
        after, rec_after = run_forward(tower, backend)
        after_host, rec_host = run_forward(tower, backend, grid_on_device=False)
    finally:
        REGISTRY.revert(engine="vllm")
    reverted, rec_reverted = run_forward(tower, backend)
    assert rec_before.sync_count == BEFORE, rec_before.syncs
    assert rec_after.syncs == ["tolist"]  # the one read of the device grid
    assert rec_host.sync_count == 0, rec_host.syncs
    assert rec_reverted.sync_count == BEFORE
    assert _equal(before, after)
    assert _equal(before, after_host)
    assert _equal(before, reverted)
    assert [o.shape[0] for o in before] == [h * w // 4 for _, h, w in GRIDS]
    # cu_seqlens crosses once per forward instead of never (the release builds it on the
    # grid's device); max_seqlen never crosses.
    assert len(rec_after.h2d) == len(rec_before.h2d) + 1


def test_revert_restores_originals(vit_module):
    classes = {
        "MoonViT3dPretrainedModel": ("forward",),
        "MoonViT3dEncoder": ("forward",),
        "MoonViTEncoderLayer": ("forward", "attention_qkvpacked"),
    }
    REGISTRY.revert(engine="vllm")
    originals = {
        (cls, attr): getattr(vit_module, cls).__dict__[attr]
        for cls, attrs in classes.items()
        for attr in attrs
    }
    REGISTRY.apply(engine="vllm")
    changed = {k for k, v in originals.items() if getattr(vit_module, k[0]).__dict__[k[1]] is not v}
    assert changed == {
        ("MoonViT3dPretrainedModel", "forward"),
        ("MoonViT3dEncoder", "forward"),
        ("MoonViTEncoderLayer", "forward"),
    }
    REGISTRY.revert(engine="vllm")
    assert all(getattr(vit_module, c).__dict__[a] is v for (c, a), v in originals.items())


def test_status_by_version(vllm_version):
    import importlib

    importlib.import_module(VIT)
    status = {r.name: r for r in REGISTRY.status(engine="vllm")}[NAME]
    if vllm_version >= UPSTREAM:
        assert status.status == "upstream", status.reason
        assert "prepare_encoder_metadata" in status.reason
    else:
        assert status.status == "applied", status.reason
