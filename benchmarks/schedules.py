"""How the side-by-side benchmarks call their contenders: ``interleaved`` or in ``blocks``.

``interleaved`` calls each contender once per round, the order rotating. ``blocks`` first calls
each one untimed for at least ``SETTLE_S`` (at least once), then times ``BLOCK`` calls back to
back. Why both: after every transformers call torch's GNU OpenMP workers spin-wait for their
next parallel region (tens of ms on this machine), so in ``interleaved`` the call after a
transformers call shares the cores with them. Measured 2048² uint8 image, same process: ours
5.7 ms after ours, 10.7 ms right after a transformers call, 6.1 ms after one with
``OMP_WAIT_POLICY=passive``; a 32-frame 1280x720 Qwen3-VL uint8 clip: ours 23.8 ms after
ours, 27.7 ms after transformers. ``blocks`` times each contender in its own steady state
(torch's workers warm for transformers, idle for ours), as a server running one of them
would; ``interleaved`` keeps the cost of sharing a process with torch's spinning workers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SCHEDULES = ("interleaved", "blocks")
BLOCK = 3  # timed calls per contender per round in the ``blocks`` schedule
SETTLE_S = 0.1  # untimed calls before them: the previous contender's threads have settled


def timed_calls(fns: dict[str, Callable[[], Any]], rounds: int, schedule: str
                ) -> dict[str, list[float]]:
    """Seconds of each timed call of each contender, ``rounds`` rounds of ``schedule``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; one of {SCHEDULES}")
    blocks = schedule == "blocks"
    times: dict[str, list[float]] = {n: [] for n in fns}
    order = list(fns)
    for r in range(rounds):
        for n in order[r % len(order):] + order[: r % len(order)]:
            if blocks:
                settle_end = time.perf_counter() + SETTLE_S
                while True:
                    fns[n]()
                    if time.perf_counter() >= settle_end:
                        break
            for _ in range(BLOCK if blocks else 1):
                t0 = time.perf_counter()
                result = fns[n]()
                times[n].append(time.perf_counter() - t0)
                del result
    return times


@contextlib.contextmanager
def busy_python_thread() -> Iterator[None]:
    """A thread running pure Python (it holds the GIL but to hand it over) while inside."""
    stop = threading.Event()

    def spin() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    thread = threading.Thread(target=spin, name="busy-python", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
