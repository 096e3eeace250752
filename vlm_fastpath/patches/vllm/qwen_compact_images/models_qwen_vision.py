"""vLLM Qwen2/2.5/3-VL vision towers: compact image rows are expanded before the tower's forward.

One patch per tower module (each is imported on its own: Qwen3-VL's module does not import
the others' towers at the same time). The wrapper reads the geometry from the tower's own
patch embedding (its temporal and spatial patch sizes and the projection's input channels), so
rows are compact exactly when they are ``C*P*P`` wide for a tower with ``T > 1``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...adapters.qwen_tower import embed_clause
from ...core.base import Patch, PatchContext, signature_clause, source_text
from ...core.registry import register

VERSIONS = ">=0.22"


def make_forward(original: Any) -> Any:
    """The tower's ``forward`` taking compact rows too (no containment: the release's own
    forward cannot read compact rows, so there is nothing to fall back to)."""
    from vlm_fastpath.qwen_integration import compact

    @functools.wraps(original)
    def forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        channels, temporal, patch = compact.geometry(self)
        if compact.is_compact(x, channels, temporal, patch):
            device = self.patch_embed.proj.weight.device
            x = compact.expand(x.to(device=device), channels, temporal, patch)
        return original(self, x, *args, **kwargs)

    forward.__vlm_fastpath_original__ = original  # type: ignore[attr-defined]
    return forward


class TowerExpansionPatch(Patch):
    """Wrap ``<TOWER>.forward`` of one module."""

    engine = "vllm"
    versions = VERSIONS
    backport = False
    upstream_pr = "vllm-project/vllm#44787"
    tower: str
    embed: str
    stays_when_faulted = ("compact rows already sent by the API server are read only by the "
                          "expansion: it stays for the life of the process")

    def _module(self) -> Any:
        return sys.modules[self.trigger]

    def not_needed(self) -> str | None:
        if getattr(self._module(), self.tower, None) is None:
            return f"{self.trigger} has no {self.tower}"
        return None

    def contract(self) -> str | None:
        module = self._module()
        tower = getattr(module, self.tower)
        clause = signature_clause(tower, "forward", ("self", "x"))
        if clause:
            return clause
        if "self.patch_embed(" not in source_text(tower.forward):
            return f"structure: {self.tower}.forward does not feed self.patch_embed"
        return embed_clause(module, self.embed)

    def apply(self, ctx: PatchContext) -> None:
        tower = getattr(self._module(), self.tower)
        original = tower.__dict__.get("forward")
        if not callable(original):
            raise LookupError(f"{self.tower}.forward is not defined on the class")
        ctx.set_attr(tower, "forward", make_forward(original))


@register
class Qwen2VLTowerPatch(TowerExpansionPatch):
    name = "vllm-qwen2-vl-compact-rows"
    trigger = "vllm.model_executor.models.qwen2_vl"
    modules = (trigger,)
    tower = "Qwen2VisionTransformer"
    embed = "Qwen2VisionPatchEmbed"
    summary = "Qwen2-VL vision tower expands compact image rows (torch.equal to the full rows)"


@register
class Qwen25VLTowerPatch(TowerExpansionPatch):
    name = "vllm-qwen2-5-vl-compact-rows"
    trigger = "vllm.model_executor.models.qwen2_5_vl"
    modules = (trigger,)
    tower = "Qwen2_5_VisionTransformer"
    embed = "Qwen2_5_VisionPatchEmbed"
    summary = "Qwen2.5-VL vision tower expands compact image rows (torch.equal to the full rows)"


@register
class Qwen3VLTowerPatch(TowerExpansionPatch):
    name = "vllm-qwen3-vl-compact-rows"
    trigger = "vllm.model_executor.models.qwen3_vl"
    modules = (trigger,)
    tower = "Qwen3_VisionTransformer"
    embed = "Qwen3_VisionPatchEmbed"
    summary = "Qwen3-VL vision tower expands compact image rows (torch.equal to the full rows)"
