"""Patches of ``sglang.srt.models.kimi_k25`` (the MoonViT vision tower of Kimi K2.5/K2.7).

sglang-moonvit-max-seqlen-once
    Why: up to 0.5.15.post1 ``get_image_feature`` moves ``grid_thws`` to the GPU, so the tower's
    rope table, position embedding and patch merger each call ``grid_thws.tolist()`` on a device
    tensor (3 syncs), and ``MoonViTEncoderLayer.forward`` drops ``max_seqlen``, so every one of
    the 27 attention blocks recomputes it with ``.item()``: 30 device-to-host syncs per forward.
    How: ``get_image_feature`` keeps ``grid_thws`` on the host; ``MoonViT3dEncoder.forward``
    computes the sequence lengths, ``cu_seqlens`` (one non-blocking copy) and ``max_seqlen``
    (a ``HostMaxSeqlen`` int) once on the host; ``MoonViTEncoderLayer.forward`` passes it to
    ``self.attn``, whose FA3/FA4/Triton backends use it (``sglang-vision-host-max-seqlen``).
    Result: 0 syncs per forward (with the encoder-DP path, the release's own ``tolist`` of the
    host grid is free too).
    Upstream: sglang PR #30878 (+#31227), released in 0.5.16.
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where
    ``MoonViTEncoderLayer.forward`` already passes ``max_seqlen`` to its attention.

sglang-moonvit-sdpa-host-cu-seqlens
    Why: with ``--mm-attention-backend sdpa`` (the default off CUDA), up to 0.5.15.post1 every
    MoonViT attention block builds its mask from ``cu_seqlens.cpu().tolist()``: one
    device-to-host sync per block (27 per forward), although ``sglang-moonvit-max-seqlen-once``
    already keeps ``grid_thws`` on the host and derives ``cu_seqlens`` from it once per forward.
    How: while ``MoonViT3dEncoder.forward`` runs with a host ``grid_thws`` it publishes that grid
    in the context variable ``HOST_SEQLENS`` (``_host_seqlens.py``); the SDPA backend
    (``sglang-vision-host-max-seqlen``) computes the host ``cu_seqlens`` from it once, on first
    use, and passes the release's own mask built from them when the call carries our
    ``HostMaxSeqlen`` and the length, total and maximum agree. Device grids, other backends and
    other models run the release's code; outputs are bit-identical (same mask values).
    Result: 0 syncs per MoonViT forward with SDPA, as with FA3/FA4/Triton.
    Upstream: none yet (0.5.17 and 0.5.23 still call ``cu_seqlens.cpu().tolist()`` in
    ``VisionSdpaAttention.generate_patch_attention_mask``); related: sglang PR #30878.
    Applies to: sglang 0.5.12 - 0.5.15.post1; requires ``sglang-moonvit-max-seqlen-once`` (which
    supplies the host ``max_seqlen``; "not-needed" while that one is not applied); stands aside
    ("upstream") where the SDPA mask builder no longer reads ``cu_seqlens`` back with ``.cpu()``.
"""

from __future__ import annotations

import functools
from itertools import accumulate

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register
from .._common import cuda_available, grid_of, module, require, source_of
from ._host_seqlens import HOST_SEQLENS, HostMaxSeqlen, HostSeqlens

KIMI_K25 = "sglang.srt.models.kimi_k25"
VISION = "sglang.srt.layers.attention.vision"
PATCH = "sglang-moonvit-max-seqlen-once"


def _host_grid(grid):
    """``grid`` as a host int64 tensor (one copy only if it already lives on a device)."""
    import torch

    if grid.device.type != "cpu":
        grid = grid.cpu()
    return grid.to(torch.long) if grid.dtype != torch.long else grid


def _make_get_image_feature(original, g):
    import torch

    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def get_image_feature(self, items):
        tower = self.vision_tower
        device = tower.device
        dtype = tower.patch_embed.proj.weight.dtype
        pixel_values = torch.cat([item.feature for item in items], dim=0).to(
            device=device, dtype=dtype
        )
        grids = [grid_of(getattr(item, "model_specific_data", None), item) for item in items]
        grid_thws = torch.cat([_host_grid(grid) for grid in grids], dim=0)
        if self.use_data_parallel:
            image_embeds = g["run_dp_sharded_mrope_vision_model"](
                tower, pixel_values, grid_thws.tolist(), rope_type="rope_2d"
            )
            return self.mm_projector(image_embeds)
        image_embeds = tower(pixel_values, grid_thws)
        return torch.cat(g["mm_projection_auto"](self.mm_projector, image_embeds), dim=0)

    return get_image_feature


def _make_encoder_forward(original):
    import torch

    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def forward(self, hidden_states, grid_thws):
        host = _host_grid(grid_thws)
        lengths = [t * h * w for t, h, w in host.tolist()]
        max_seqlen = HostMaxSeqlen(max(lengths) if lengths else 0)
        cu_host = torch.tensor([0, *accumulate(lengths)], dtype=torch.int32)
        device = hidden_states.device
        if device.type == "cuda" and cuda_available():
            cu_host = cu_host.pin_memory()
        cu_seqlens = cu_host.to(device, non_blocking=True)
        rope_freqs_cis = self.rope_2d.get_freqs_cis(grid_thws=host, device=device)
        for block in self.blocks:
            hidden_states = block(
                hidden_states, cu_seqlens, max_seqlen, rope_freqs_cis=rope_freqs_cis
            )
        return self.final_layernorm(hidden_states)

    return forward


def _make_layer_forward(original):
    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def forward(self, hidden_states, cu_seqlens, max_seqlen, rope_freqs_cis=None):
        extra = {"max_seqlen": max_seqlen} if isinstance(max_seqlen, HostMaxSeqlen) else {}
        residual = hidden_states
        attended = self.attn(
            self.norm0(hidden_states),
            cu_seqlens=cu_seqlens,
            position_embeddings=rope_freqs_cis,
            **extra,
        )
        hidden_states = residual + attended
        return hidden_states + self.mlp(self.norm1(hidden_states))

    return forward


@register
class MoonViTMaxSeqlenOncePatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "sgl-project/sglang#30878"
    summary = "MoonViT: grid_thws stays on the host, max_seqlen computed once per forward"

    def upstream_equivalent(self) -> str | None:
        layer = getattr(module(KIMI_K25), "MoonViTEncoderLayer", None)
        if layer is None:
            return None
        if "max_seqlen=" in source_of(layer.forward):
            return "MoonViTEncoderLayer.forward passes max_seqlen to its attention"
        return None

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(KIMI_K25)
        require(
            kimi,
            "KimiK25ForConditionalGeneration",
            "MoonViT3dEncoder",
            "MoonViTEncoderLayer",
            "mm_projection_auto",
            "run_dp_sharded_mrope_vision_model",
        )
        g = kimi.__dict__
        model_cls = kimi.KimiK25ForConditionalGeneration
        ctx.set_attr(
            model_cls,
            "get_image_feature",
            _make_get_image_feature(model_cls.__dict__["get_image_feature"], g),
        )
        encoder = kimi.MoonViT3dEncoder
        ctx.set_attr(encoder, "forward", _make_encoder_forward(encoder.__dict__["forward"]))
        layer = kimi.MoonViTEncoderLayer
        ctx.set_attr(layer, "forward", _make_layer_forward(layer.__dict__["forward"]))


def _make_sdpa_encoder_forward(current):
    @functools.wraps(current)
    def forward(self, hidden_states, grid_thws, *args, **kwargs):
        device = getattr(grid_thws, "device", None)
        if getattr(device, "type", None) != "cpu":
            return current(self, hidden_states, grid_thws, *args, **kwargs)
        token = HOST_SEQLENS.set(HostSeqlens(grid_thws))
        try:
            return current(self, hidden_states, grid_thws, *args, **kwargs)
        finally:
            HOST_SEQLENS.reset(token)

    return forward


@register
class MoonViTSdpaHostCuSeqlensPatch(Patch):
    name = "sglang-moonvit-sdpa-host-cu-seqlens"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = ""  # none yet: 0.5.23 still reads cu_seqlens back (related: #30878)
    summary = "MoonViT: the SDPA vision backend builds its mask from host cu_seqlens"
    # It publishes the host grid that sglang-moonvit-max-seqlen-once keeps on the host, around
    # the encoder forward that patch replaced.
    requires = ("sglang-moonvit-max-seqlen-once",)
    after = ("sglang-moonvit-max-seqlen-once",)

    def upstream_equivalent(self) -> str | None:
        sdpa = getattr(module(VISION), "VisionSdpaAttention", None)
        build = getattr(sdpa, "generate_patch_attention_mask", None)
        if build is not None and ".cpu()" not in source_of(build):
            return "VisionSdpaAttention builds its mask without reading cu_seqlens back"
        return None

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(KIMI_K25)
        require(kimi, "MoonViT3dEncoder")
        require(module(VISION), "VisionSdpaAttention")
        encoder = kimi.MoonViT3dEncoder
        ctx.set_attr(encoder, "forward", _make_sdpa_encoder_forward(encoder.__dict__["forward"]))
