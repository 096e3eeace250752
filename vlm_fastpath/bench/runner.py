"""Timing: exactness check on the first call, then rounds in rotating order, medians.

The first call of each contender is both the warm-up (numba compilation, thread pools, lazy
imports) and the exactness check against our output; it is reported separately as "first ms"
because that is what the first request after a server start pays.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import torch

from .contenders import Contender, Family, Tensors
from .workloads import Workload


@dataclass
class Row:
    """One contender on one workload (what the table, the chart and the JSON show)."""

    family: str
    workload: str
    contender: str
    images: int
    first_ms: float
    median_ms: float
    images_per_s: float
    speedup: float | None = None
    exact: bool | None = None
    baseline: bool = False
    ours: bool = False
    origin: str = ""
    runs_ms: list[float] = field(default_factory=list)
    # Ours: does the installed engine hand this processor out? The engine's rows: the reverse.
    engine_uses: str = "-"


@dataclass(frozen=True)
class Failure:
    """A contender that raised on a workload: reported, and left out of that workload's rows."""

    family: str
    workload: str
    contender: str
    error: str


class Progress:
    """Progress on a stream: one redrawn ``\\r`` line on a terminal, plain lines otherwise.

    Redrawing is only done when both stdout and the stream are terminals, so logs and pipes
    never collect carriage returns.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = enabled and _isatty(self.stream) and _isatty(sys.stdout)
        self._width = 0

    def update(self, message: str) -> None:
        """A transient status: redrawn on a terminal, dropped elsewhere (too chatty for logs)."""
        if not self.live:
            return
        self._width = max(self._width, len(message))
        self.stream.write("\r" + message.ljust(self._width))
        self.stream.flush()

    def step(self, message: str) -> None:
        """A milestone: its own line everywhere."""
        if not self.enabled:
            return
        self.clear()
        self.stream.write(message + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _same(a: Tensors, b: Tensors) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
        for x, y in zip(a, b, strict=True)
    )


def _timed(contender: Contender, workload: Workload) -> tuple[Tensors, float]:
    start = time.perf_counter()
    out = contender.run(workload.images)
    return out, (time.perf_counter() - start) * 1000.0


def bench_workload(
    family: Family, workload: Workload, rounds: int, progress: Progress
) -> tuple[list[Row], list[Failure]]:
    """Rows for every contender of ``family`` that ran on ``workload`` (ours first-checked)."""
    label = f"{family.name} {workload.name}"
    ours = next(c for c in family.contenders if c.ours)
    order = [ours] + [c for c in family.contenders if not c.ours]
    failures: list[Failure] = []
    first: dict[str, float] = {}
    exact: dict[str, bool | None] = {}
    reference: Tensors | None = None
    progress.step(f"{label}: {_plural(len(order), 'contender')}, first call + "
                  f"{_plural(rounds, 'round')} each")
    for contender in order:
        progress.update(f"{label}: first call, {contender.name}")
        try:
            out, ms = _timed(contender, workload)
        except Exception as exc:  # noqa: BLE001 - an engine contender failing is a finding
            if contender.ours:
                raise
            failures.append(
                Failure(family.name, workload.name, contender.name, f"{type(exc).__name__}: {exc}")
            )
            continue
        first[contender.name] = ms
        if reference is None:
            reference, exact[contender.name] = out, None
        else:
            exact[contender.name] = _same(out, reference)
            verdict = "yes" if exact[contender.name] else "no"
            progress.step(f"{label}: {contender.name} output equals {ours.name}'s: exact {verdict}")
        del out
    del reference
    running = [c for c in order if c.name in first]
    times: dict[str, list[float]] = {c.name: [] for c in running}
    for round_ in range(rounds):
        # Rotate so no contender always runs right after the same other one (caches, clocks).
        shift = round_ % len(running)
        for contender in running[shift:] + running[:shift]:
            progress.update(f"{label}: round {round_ + 1}/{rounds}, {contender.name}")
            gc.collect()
            out, ms = _timed(contender, workload)
            del out
            times[contender.name].append(ms)
    done = f"{_plural(rounds, 'round')} x {_plural(len(running), 'contender')}"
    progress.step(f"{label}: done, {done}")
    return _rows(family, workload, running, first, exact, times), failures


def _rows(
    family: Family,
    workload: Workload,
    running: Sequence[Contender],
    first: dict[str, float],
    exact: dict[str, bool | None],
    times: dict[str, list[float]],
) -> list[Row]:
    medians = {name: statistics.median(ts) if ts else first[name] for name, ts in times.items()}
    base = next((c.name for c in running if c.baseline), None)
    rows = []
    # The engine's processor first and ours last: the table reads "theirs, then ours".
    for contender in sorted(running, key=lambda c: (not c.baseline, c.ours)):
        median = medians[contender.name]
        rows.append(
            Row(
                family=family.name,
                workload=workload.name,
                contender=contender.name,
                images=workload.count,
                first_ms=round(first[contender.name], 3),
                median_ms=round(median, 3),
                images_per_s=round(workload.count / (median / 1000.0), 3) if median else 0.0,
                speedup=round(medians[base] / median, 3) if base and median else None,
                exact=exact[contender.name],
                baseline=contender.baseline,
                ours=contender.ours,
                origin=contender.origin,
                runs_ms=[round(t, 3) for t in times[contender.name]],
            )
        )
    return rows
