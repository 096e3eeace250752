"""Patch of ``sglang.srt.models.kimi_k25`` (MoonViT) for the SDPA vision attention backend.

Kept apart from ``models_kimi_k25.py`` (the ``max_seqlen``-once patch of the same module) so each
can be reported and disabled on its own; this one wraps whatever ``MoonViT3dEncoder.forward`` is
in place.

sglang-moonvit-sdpa-host-cu-seqlens
    Why: with ``--mm-attention-backend sdpa`` (the default off CUDA), up to 0.5.15.post1 every
    MoonViT attention block builds its mask from ``cu_seqlens.cpu().tolist()``: one
    device-to-host sync per block (27 per forward), although ``sglang-moonvit-max-seqlen-once``
    already keeps ``grid_thws`` on the host and derives ``cu_seqlens`` from it once per forward.
    How: while ``MoonViT3dEncoder.forward`` runs with a host ``grid_thws`` it publishes that grid
    in the context variable ``HOST_SEQLENS`` (``_common.py``); the SDPA backend
    (``sglang-vision-host-max-seqlen``) computes the host ``cu_seqlens`` from it once, on first
    use, and passes the release's own mask built from them when the call carries our
    ``HostMaxSeqlen`` and the length, total and maximum agree. Device grids, other backends and
    other models run the release's code; outputs are bit-identical (same mask values).
    Result: 0 syncs per MoonViT forward with SDPA, as with FA3/FA4/Triton.
    Upstream: none yet (0.5.17 and 0.5.23 still call ``cu_seqlens.cpu().tolist()`` in
    ``VisionSdpaAttention.generate_patch_attention_mask``); related: sglang PR #30878.
    Applies to: sglang 0.5.12 - 0.5.15.post1, after ``sglang-moonvit-max-seqlen-once`` (which
    supplies the host ``max_seqlen``; "not-needed" while that one is not in place); stands aside
    ("upstream") where the SDPA mask builder no longer reads ``cu_seqlens`` back with ``.cpu()``.
"""

from __future__ import annotations

import functools

from ..base import Patch, PatchContext
from ..registry import register
from ._common import HOST_SEQLENS, HostSeqlens, module, require, source_of

KIMI_K25 = "sglang.srt.models.kimi_k25"
VISION = "sglang.srt.layers.attention.vision"


def _make_encoder_forward(current):
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


def _moonvit_patch_in_place(kimi) -> bool:
    """``sglang-moonvit-max-seqlen-once``'s layer forward is the one in place (possibly wrapped).

    Recognized by the file its code lives in (``functools.wraps`` copies names, not code)."""
    from . import models_kimi_k25 as moonvit_patch

    func = kimi.MoonViTEncoderLayer.__dict__.get("forward")
    while func is not None:
        code = getattr(func, "__code__", None)
        if code is not None and code.co_filename == moonvit_patch.__file__:
            return True
        func = getattr(func, "__wrapped__", None)
    return False


@register
class MoonViTSdpaHostCuSeqlens(Patch):
    name = "sglang-moonvit-sdpa-host-cu-seqlens"
    engine = "sglang"
    versions = ">=0.5.12,<0.5.16"
    trigger = KIMI_K25
    modules = (KIMI_K25,)
    upstream_pr = "sgl-project/sglang#30878"
    summary = "MoonViT: the SDPA vision backend builds its mask from host cu_seqlens"

    def upstream_equivalent(self) -> str | None:
        sdpa = getattr(module(VISION), "VisionSdpaAttention", None)
        build = getattr(sdpa, "generate_patch_attention_mask", None)
        if build is not None and ".cpu()" not in source_of(build):
            return "VisionSdpaAttention builds its mask without reading cu_seqlens back"
        return None

    def not_needed(self) -> str | None:
        kimi = module(KIMI_K25)
        if not hasattr(kimi, "MoonViTEncoderLayer") or not _moonvit_patch_in_place(kimi):
            return "sglang-moonvit-max-seqlen-once is not in place: no host max_seqlen to use"
        return None

    def apply(self, ctx: PatchContext) -> None:
        kimi = module(KIMI_K25)
        require(kimi, "MoonViT3dEncoder")
        require(module(VISION), "VisionSdpaAttention")
        encoder = kimi.MoonViT3dEncoder
        ctx.set_attr(encoder, "forward", _make_encoder_forward(encoder.__dict__["forward"]))
