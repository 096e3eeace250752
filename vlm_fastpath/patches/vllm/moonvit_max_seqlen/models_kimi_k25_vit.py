"""vLLM ``vllm.model_executor.models.kimi_k25_vit``: MoonViT computes ``max_seqlen`` once.

Why: up to vLLM 0.22.x every ``MoonViTEncoderLayer.attention_qkvpacked`` of the Kimi K2.5/K2.6
vision tower recomputes ``max_seqlen = (cu_seqlens[1:] - cu_seqlens[:-1]).max()`` from the
device ``cu_seqlens`` and hands that 0-dim device tensor to ``MMEncoderAttention``, whose
flash-attention/Triton/FlashInfer wrappers call ``max_seqlen.item()``: one device-to-host sync
per block, 27 per forward for K2.5 (the SDPA backend's wrapper instead does
``cu_seqlens.tolist()`` per block). On top of that the tower reads the device ``grid_thws`` with
``.tolist()`` four times (position embedding, rope table, twice in ``tpool_patch_merger``).

How: ``MoonViT3dPretrainedModel.forward`` reads the grid once (``tolist``: one sync when it lives
on the device, none when it is already on the host) and passes a host copy to the patch
embedding, the encoder and the merger, whose own ``tolist`` calls then read host memory.
``MoonViT3dEncoder.forward`` computes the sequence lengths, ``cu_seqlens`` (one non-blocking
copy, staged through pinned memory on CUDA) and ``max_seqlen`` (a host 0-dim int32 tensor, what
the attention custom ops take; ``.item()`` of it is a host read) once, and hands both to every
block through ``MoonViTEncoderLayer.forward`` (new keyword arguments; without them the original
forward runs). Blocks whose attention uses the SDPA backend get the host ``cu_seqlens`` too, so
the wrapper's ``tolist`` is free as well. Values are the ones the release computes (the same
raw maximum, the same int32 ``cu_seqlens``), so outputs are bit-identical. Only class attributes
are replaced (through ``ctx.set_attr``); ``vision_tower_forward`` and the DP-sharded path call
the tower as before.

Upstream: vLLM 0.23.0 (``MoonViT3dEncoder.prepare_encoder_metadata``, host ``max_seqlen``,
``grid_thws`` kept on the CPU). Applies to vLLM >=0.15, open-ended (verified on 0.22.1); on 0.23+
(``prepare_encoder_metadata`` on the encoder) it reports ``upstream``. Kimi-VL's
``moonvit.py`` tower is not covered (fixed upstream in 0.24).
"""

from __future__ import annotations

import functools
import sys
from itertools import accumulate
from typing import Any

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register

KIMI_K25_VIT = "vllm.model_executor.models.kimi_k25_vit"
TOWER_CLASS = "MoonViT3dPretrainedModel"
ENCODER_CLASS = "MoonViT3dEncoder"
LAYER_CLASS = "MoonViTEncoderLayer"
# Attention backends whose wrapper reads cu_seqlens on the host (``.tolist()``) each call.
_HOST_CU_SEQLENS_BACKENDS = frozenset({"TORCH_SDPA"})
PATCH = "vllm-moonvit-max-seqlen"


def host_grid(grid_thws: Any) -> Any:
    """``grid_thws`` (tensor or nested list) as a fresh host int64 tensor: one read at most."""
    import torch

    rows = grid_thws.tolist() if isinstance(grid_thws, torch.Tensor) else grid_thws
    return torch.tensor([[int(v) for v in row] for row in rows], dtype=torch.long).reshape(-1, 3)


def _uses_host_cu_seqlens(layer: Any) -> bool:
    backend = getattr(getattr(layer, "attn", None), "attn_backend", None)
    return getattr(backend, "name", None) in _HOST_CU_SEQLENS_BACKENDS


def _make_tower_forward(original: Any, g: dict[str, Any]) -> Any:
    @contained(PATCH, original)  # reads its inputs only: the original may answer after a fault
    @functools.wraps(original)
    def forward(self, pixel_values, grid_thws):
        if getattr(self, "merge_type", None) != "sd2_tpool":
            return original(self, pixel_values, grid_thws)
        grid = host_grid(grid_thws)
        hidden_states = self.patch_embed(pixel_values, grid)
        hidden_states = self.encoder(hidden_states, grid)
        return g["tpool_patch_merger"](
            hidden_states, grid, merge_kernel_size=self.merge_kernel_size
        )

    return forward


def _make_encoder_forward(original: Any) -> Any:
    import torch

    @contained(PATCH, original)  # local tensors only: the original may answer after a fault
    @functools.wraps(original)
    def forward(self, hidden_states, grid_thws):
        grid = host_grid(grid_thws)
        device = hidden_states.device
        rope_freqs_cis = self.rope_2d.get_freqs_cis(grid_thws=grid, device=device)
        lengths = [t * h * w for t, h, w in grid.tolist()]
        cu_host = torch.tensor([0, *accumulate(lengths)], dtype=torch.int32)
        max_seqlen = torch.tensor(max(lengths, default=0), dtype=torch.int32)
        if device.type == "cuda" and torch.cuda.is_available():
            cu_host = cu_host.pin_memory()
        cu_seqlens = cu_host.to(device, non_blocking=True)
        for block in self.blocks:
            hidden_states = block(
                hidden_states,
                cu_seqlens,
                rope_freqs_cis=rope_freqs_cis,
                max_seqlen=max_seqlen,
                host_cu_seqlens=cu_host,
            )
        return self.final_layernorm(hidden_states)

    return forward


def _attention(layer: Any, x: Any, cu_seqlens: Any, rope_freqs_cis: Any, max_seqlen: Any) -> Any:
    """``attention_qkvpacked`` of the release with ``max_seqlen`` given instead of recomputed."""
    apply_rope = sys.modules[KIMI_K25_VIT].apply_rope
    heads = layer.num_attention_heads_per_partition
    head_dim = layer.hidden_size_per_attention_head
    seq_length = x.size(0)
    xqkv, _ = layer.wqkv(x)
    xqkv = xqkv.view(*xqkv.size()[:-1], 3, heads, head_dim)
    xq, xk, xv = xqkv.unbind(dim=-3)
    xq, xk = apply_rope(xq, xk, rope_freqs_cis)
    out = layer.attn(
        xq.unsqueeze(0),
        xk.unsqueeze(0),
        xv.unsqueeze(0),
        cu_seqlens=cu_seqlens,
        max_seqlen=max_seqlen,
    )
    out, _ = layer.wo(out.reshape(seq_length, heads * head_dim))
    return out


def _make_layer_forward(original: Any) -> Any:
    @functools.wraps(original)
    def engine_forward(self, hidden_states, cu_seqlens, rope_freqs_cis=None, **_hints):
        return original(self, hidden_states, cu_seqlens, rope_freqs_cis)  # hints dropped

    @contained(PATCH, engine_forward)  # pure on its inputs: the original may answer
    @functools.wraps(original)
    def forward(
        self,
        hidden_states,
        cu_seqlens,
        rope_freqs_cis=None,
        *,
        max_seqlen=None,
        host_cu_seqlens=None,
    ):
        if max_seqlen is None:
            return original(self, hidden_states, cu_seqlens, rope_freqs_cis)
        if host_cu_seqlens is not None and _uses_host_cu_seqlens(self):
            cu_seqlens = host_cu_seqlens
        residual = hidden_states
        attended = _attention(
            self, self.norm0(hidden_states), cu_seqlens, rope_freqs_cis, max_seqlen
        )
        hidden_states = residual + attended
        return hidden_states + self.mlp(self.norm1(hidden_states))

    return forward


@register
class MoonViTMaxSeqlenPatch(Patch):
    name = PATCH
    engine = "vllm"
    versions = ">=0.15"
    trigger = KIMI_K25_VIT
    modules = (KIMI_K25_VIT,)
    upstream_pr = ""  # shipped in vLLM 0.23.0; no PR number known
    summary = "Kimi K2.5 MoonViT: grid read once, max_seqlen/cu_seqlens once per forward"

    def upstream_equivalent(self) -> str | None:
        encoder = getattr(sys.modules[KIMI_K25_VIT], ENCODER_CLASS, None)
        if encoder is not None and hasattr(encoder, "prepare_encoder_metadata"):
            return "MoonViT3dEncoder.prepare_encoder_metadata computes max_seqlen on the host"
        return None

    def not_needed(self) -> str | None:
        module = sys.modules[KIMI_K25_VIT]
        if not all(hasattr(module, n) for n in (TOWER_CLASS, ENCODER_CLASS, LAYER_CLASS)):
            return f"{KIMI_K25_VIT} has no MoonViT tower classes"
        return None

    def apply(self, ctx: PatchContext) -> None:
        module = sys.modules[KIMI_K25_VIT]
        for name in ("tpool_patch_merger", "apply_rope"):
            if not callable(module.__dict__.get(name)):
                raise LookupError(f"{KIMI_K25_VIT} has no {name} (renamed?)")
        tower = getattr(module, TOWER_CLASS)
        encoder = getattr(module, ENCODER_CLASS)
        layer = getattr(module, LAYER_CLASS)
        for cls, attrs in ((tower, ("forward",)), (encoder, ("forward",)),
                           (layer, ("forward", "attention_qkvpacked"))):
            missing = [a for a in attrs if a not in cls.__dict__]
            if missing:
                raise LookupError(f"{cls.__name__} lacks {', '.join(missing)}")
        ctx.set_attr(tower, "forward", _make_tower_forward(tower.__dict__["forward"],
                                                           module.__dict__))
        ctx.set_attr(encoder, "forward", _make_encoder_forward(encoder.__dict__["forward"]))
        ctx.set_attr(layer, "forward", _make_layer_forward(layer.__dict__["forward"]))
