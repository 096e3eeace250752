"""What a step of check_all.py reports: checks (pass/fail), measurements, and what it skipped.

A step never decides its own status: ``status`` is derived, so a step cannot report "ok" while
one of its checks failed, and a CUDA-only measurement it did not take is always named with its
reason instead of silently missing.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

NEEDS_CUDA = "skipped (needs CUDA)"


class StepSkipped(Exception):
    """The whole step cannot run here (e.g. SGLang does not import); the reason is reported."""


@dataclasses.dataclass
class StepContext:
    """What every step gets: the device, the size of the run, and the injected fault (tests)."""

    device: str
    quick: bool
    inject: str | None = None  # "raise", "wrong" or "hang": set by the dry-run tests only
    budget_s: float | None = None  # the step's time budget, for steps that pace themselves

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def wrong(self) -> bool:
        """True when the dry-run tests ask this step to corrupt one compared value."""
        return self.inject == "wrong"


@dataclasses.dataclass
class StepResult:
    name: str
    device: str
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    measurements: dict[str, Any] = dataclasses.field(default_factory=dict)
    skipped: list[dict[str, str]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    skip_reason: str | None = None
    error: str | None = None
    started: float = dataclasses.field(default_factory=time.perf_counter)

    def check(self, name: str, ok: bool, **detail: Any) -> bool:
        """Record one pass/fail check (any False fails the step)."""
        self.checks.append({"name": name, "ok": bool(ok), **detail})
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}" + (f"  {detail}" if detail else ""),
              flush=True)
        return bool(ok)

    def skip(self, what: str, reason: str = NEEDS_CUDA) -> None:
        """Name a measurement or check that was not taken here, with why."""
        self.skipped.append({"what": what, "reason": reason})
        print(f"  [SKIP] {what}: {reason}", flush=True)

    def measure(self, key: str, value: Any) -> Any:
        self.measurements[key] = value
        return value

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    @property
    def status(self) -> str:
        if self.error is not None or any(not c["ok"] for c in self.checks):
            return "failed"
        if self.skip_reason is not None:
            return "skipped"
        return "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.error or self.skip_reason,
            "device": self.device,
            "seconds": round(time.perf_counter() - self.started, 2),
            "checks": self.checks,
            "measurements": self.measurements,
            "skipped": self.skipped,
            "notes": self.notes,
        }
