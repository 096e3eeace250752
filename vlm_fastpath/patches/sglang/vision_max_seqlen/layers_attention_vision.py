"""Patch of ``sglang.srt.layers.attention.vision`` (vision attention backends).

sglang-vision-host-max-seqlen
    Why: up to 0.5.15.post1 the FA3, FA4 and Triton vision backends recompute
    ``seq_lens.max().item()`` from the device ``cu_seqlens`` on every call, one device-to-host
    sync per attention block (27 per MoonViT forward), although ``VisionAttention.forward``
    already forwards a ``max_seqlen`` keyword to the backend.
    How: each backend's ``forward`` uses the ``max_seqlen`` keyword when it is a
    ``HostMaxSeqlen`` (the host integer our MoonViT patch computes once per forward) and
    ``cu_seqlens`` is a tensor outside CUDA-graph mode; every other call runs the release's own
    code. The SDPA backend builds its mask from ``cu_seqlens.cpu().tolist()`` (one sync per
    block); given a ``HostMaxSeqlen`` and the host ``cu_seqlens`` of the running MoonViT forward
    (``HOST_SEQLENS``, set by ``sglang-moonvit-sdpa-host-cu-seqlens``) whose length, total and
    maximum agree with the call, it passes the release's own mask built from those host values
    (``generate_patch_attention_mask`` on a host tensor: same values, same cache, no sync),
    moved to the device once per forward without blocking (the release's blocking
    ``attention_mask.to(device)`` in every block was 27 more syncs per forward on an H200).
    Upstream: sglang PR #30878 (+#31227), ``resolve_precomputed_max_seqlen`` in 0.5.16 (the
    SDPA backend still syncs per call in 0.5.17 and 0.5.23; our MoonViT patches stand aside
    there, so this stays a known gap of those releases).
    Applies to: sglang 0.5.12 - 0.5.15.post1; stands aside ("upstream") where the module has
    ``resolve_precomputed_max_seqlen``.
"""

from __future__ import annotations

import functools

from ...core.base import Patch, PatchContext
from ...core.containment import contained
from ...core.registry import register
from .._common import module, require
from ._host_seqlens import HOST_SEQLENS, HostMaxSeqlen

VISION = "sglang.srt.layers.attention.vision"
PATCH = "sglang-vision-host-max-seqlen"


def _host_max_seqlen(kwargs, cu_seqlens, g) -> int | None:
    import torch

    max_seqlen = kwargs.get("max_seqlen")
    if not isinstance(max_seqlen, HostMaxSeqlen) or not isinstance(cu_seqlens, torch.Tensor):
        return None
    envs = g.get("envs")
    flag = getattr(envs, "SGLANG_VIT_ENABLE_CUDA_GRAPH", None)
    if flag is not None and flag.get():
        return None
    return int(max_seqlen)


def _flash_forward(original, g, version: int | None):
    import torch

    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def forward(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, **kwargs):
        max_seqlen = _host_max_seqlen(kwargs, cu_seqlens, g)
        if max_seqlen is None:
            return original(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, **kwargs)
        cu = cu_seqlens.to(dtype=torch.int32).to(q.device)
        fa_kwargs = dict(
            cu_seqlens_q=cu,
            cu_seqlens_k=cu,
            max_seqlen_q=max_seqlen,
            max_seqlen_k=max_seqlen,
            softmax_scale=softmax_scale,
        )
        if version is None:
            fa_kwargs["window_size"] = kwargs.get("window_size", (-1, -1))
            if kwargs.get("s_aux") is not None:
                fa_kwargs["sinks"] = kwargs["s_aux"]
        else:
            fa_kwargs["ver"] = version
        return g["flash_attn_varlen_func"](q, k, v, **fa_kwargs)

    return forward


def _triton_forward(original, g):
    import torch

    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def forward(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, **kwargs):
        max_seqlen = _host_max_seqlen(kwargs, cu_seqlens, g)
        if max_seqlen is None:
            return original(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, **kwargs)
        cu = cu_seqlens.to(q.device)
        seq_lens = cu[1:] - cu[:-1]
        output = torch.empty_like(q)
        g["context_attention_fwd"](
            q, k, v, output, cu, seq_lens, max_seqlen, is_causal=False, sm_scale=softmax_scale
        )
        return output

    return forward


def _host_cu_seqlens(kwargs, cu_seqlens, q, bsz, g):
    """A host ``cu_seqlens`` tensor equal to ``cu_seqlens`` (checked without a sync), or None."""
    max_seqlen = _host_max_seqlen(kwargs, cu_seqlens, g)
    current = HOST_SEQLENS.get()
    if max_seqlen is None or current is None or cu_seqlens.dim() != 1:
        return None
    cu = current.cu_seqlens()
    lengths = [end - start for start, end in zip(cu[:-1], cu[1:], strict=True)]
    if (
        len(cu) != cu_seqlens.shape[0]
        or cu[-1] != q.shape[0]
        or bsz != 1
        or max(lengths, default=0) != max_seqlen
    ):
        return None
    return current.cu_seqlens_tensor()


def _sdpa_forward(original, g):
    @contained(PATCH, original)  # pure on its inputs: the original may answer a fault
    @functools.wraps(original)
    def forward(self, q, k, v, bsz, cu_seqlens=None, attention_mask=None, **kwargs):
        if attention_mask is None and cu_seqlens is not None and q.dim() == 3:
            host = _host_cu_seqlens(kwargs, cu_seqlens, q, bsz, g)
            if host is not None:
                mask = self.generate_patch_attention_mask(
                    q.shape[0] // bsz, host, flatten_batch=self.flatten_batch
                )
                current = HOST_SEQLENS.get()
                attention_mask = mask if current is None else current.on_device(mask, q.device)
        return original(self, q, k, v, bsz, cu_seqlens=cu_seqlens,
                        attention_mask=attention_mask, **kwargs)

    return forward


@register
class VisionHostMaxSeqlenPatch(Patch):
    name = PATCH
    engine = "sglang"
    versions = ">=0.5.12"
    trigger = VISION
    modules = (VISION,)
    upstream_pr = "sgl-project/sglang#30878"
    summary = (
        "FA3/FA4/Triton vision backends use a host max_seqlen instead of .item() per call; "
        "SDPA builds its mask from host cu_seqlens"
    )

    def upstream_equivalent(self) -> str | None:
        if hasattr(module(VISION), "resolve_precomputed_max_seqlen"):
            return "vision backends take a precomputed max_seqlen (resolve_precomputed_max_seqlen)"
        return None

    def apply(self, ctx: PatchContext) -> None:
        vision = module(VISION)
        require(vision, "VisionFlash3Attention", "VisionTritonAttention")
        g = vision.__dict__
        targets = [
            ("VisionFlash3Attention", lambda f: _flash_forward(f, g, None)),
            ("VisionFlash4Attention", lambda f: _flash_forward(f, g, 4)),
            ("VisionTritonAttention", lambda f: _triton_forward(f, g)),
            ("VisionSdpaAttention", lambda f: _sdpa_forward(f, g)),
        ]
        for class_name, make in targets:
            cls = getattr(vision, class_name, None)
            if cls is None:
                continue
            ctx.set_attr(cls, "forward", make(cls.__dict__["forward"]))
