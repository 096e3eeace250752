"""Whether the installed engine will hand out our processor, for each bench family.

A speedup means nothing to a user whose engine keeps its own processor (a release outside a
patch's range, a contract clause that fails, ``VLM_FASTPATH=0``). The answer is the status of
the patches that put our processor in the engine's place, decided as an engine process decides
it (``doctor``'s collection: the engines' trigger modules imported, the patches applied). It
runs after the timing, so the engine's own classes were timed unreplaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_QWEN = ("vllm-qwen-vl-image-processor", "sglang-qwen-vl-cpu-image-processor")
# Family -> the patches that hand our processor of that family to an engine.
FAMILY_PATCHES: Mapping[str, tuple[str, ...]] = {
    "kimi": ("vllm-kimi-fused-processor", "vllm-kimi-processor",
             "sglang-kimi-k25-fused-cpu-processor"),
    "qwen-tv": _QWEN,
    "qwen-pil": _QWEN,
}


@dataclass(frozen=True)
class EngineUse:
    """``used``: True (some engine hands ours out), False (none does), None (no engine)."""

    used: bool | None
    detail: str

    @property
    def mark(self) -> str:
        return {True: "yes", False: "NO", None: "no engine"}[self.used]


def decide(family: str, statuses: Sequence[Mapping[str, Any]]) -> EngineUse:
    """The family's answer from patch statuses (``vlm_fastpath.status()`` entries)."""
    names = FAMILY_PATCHES.get(family, ())
    mine = [s for s in statuses if s["name"] in names and s.get("engine_version")]
    if not mine:
        return EngineUse(None, "neither vLLM nor SGLang is installed here")
    applied = [s for s in mine if s["status"] == "applied"]
    if applied:
        return EngineUse(True, "; ".join(
            f"{s['engine']} {s['engine_version']}: {s['name']} applied ({s['reason']})"
            for s in applied
        ))
    return EngineUse(False, "; ".join(
        f"{s['engine']} {s['engine_version']}: {s['name']} {s['status']} ({s['reason']})"
        for s in mine
    ))


def engine_uses(families: Sequence[str]) -> dict[str, EngineUse]:
    """``decide`` for each family, from this process's decisions (engines imported now)."""
    try:
        from ..doctor import collect

        statuses = collect(import_engines=True)["patches"]
    except Exception as exc:  # noqa: BLE001 - the table still prints, marked unknown
        unknown = EngineUse(None, f"could not decide ({type(exc).__name__}: {exc})")
        return dict.fromkeys(families, unknown)
    return {family: decide(family, statuses) for family in families}
