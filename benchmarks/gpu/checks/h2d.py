"""``batched_move_to_device`` (SGLang ``sglang-batched-feature-h2d``) on a real GPU.

Claims: one pinned ``non_blocking`` copy replaces one pageable copy per item; the call returns
before the copy completes (the CPU overlaps it); the values are right even when the caller
overwrites or frees its host tensors right after the call and the pinned pool is reused at once
(the staging buffer must not be handed out again before its copy completes).

``batched_move_to_device`` reads only ``item.feature``, so the items are light stand-ins; SGLang
is not needed. The baseline is the release's ``_move_items_to_device`` loop
(``item.feature.to(device, non_blocking=True)`` per item, from pageable memory).

Sizes: Kimi K2.5 ``[16384, 3, 14, 14]`` float32 per image (a 2048x2048 image, 37.6 MiB) and
Qwen2.5-VL ``[5476, 1176]`` float32 (a 1036x1036 image, 24.6 MiB); ``--quick`` quarters them;
the CPU dry run uses 64-patch features.
"""

from __future__ import annotations

import statistics
import time
import types
from typing import Any

import torch

from ._result import StepContext, StepResult

COUNTS = (1, 4, 8)
SLEEP_MS = 40.0  # GPU work queued ahead of the copy, so the copy is surely still in flight


def _shapes(ctx: StepContext) -> dict[str, tuple[int, ...]]:
    if not ctx.cuda:
        return {"kimi": (64, 3, 14, 14), "qwen": (64, 1176)}
    scale = 4 if ctx.quick else 1
    return {"kimi": (16384 // scale, 3, 14, 14), "qwen": (5476 // scale, 1176)}


def _features(shape: tuple[int, ...], n: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen) for _ in range(n)]


def _items(features: list[torch.Tensor]) -> list[Any]:
    return [types.SimpleNamespace(feature=f) for f in features]


def per_item(items: list[Any], device: torch.device) -> int:
    """The release's per-item move (``_move_items_to_device`` up to 0.5.17)."""
    for item in items:
        item.feature = item.feature.to(device, non_blocking=True)
    return len(items)


_CYCLES_PER_MS: list[float] = []


def _spin(ms: float) -> None:
    """Queue about ``ms`` of GPU work on the current stream (no host wait)."""
    if not _CYCLES_PER_MS:  # calibrate once: the clock is whatever the GPU runs at now
        torch.cuda._sleep(1_000_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
        _CYCLES_PER_MS.append(10_000_000 / max(start.elapsed_time(end), 1e-3))
    torch.cuda._sleep(int(ms * _CYCLES_PER_MS[0]))


def _profile_copies(fn) -> dict[str, int]:
    """cudaMemcpyAsync runtime calls and host-to-device memcpy activities of ``fn()``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    return {"cudaMemcpyAsync": sum(n.startswith("cudaMemcpyAsync") for n in names),
            "memcpy_htod": sum("HtoD" in n for n in names),
            "cudaHostAlloc": sum(n.startswith("cudaHostAlloc") for n in names)}


def _event_ms(fn, repeats: int) -> tuple[float, float]:
    """Median (CUDA-event ms from call start to copy done, host ms until the call returned)."""
    device_ms, host_ms = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        end.record()
        torch.cuda.synchronize()
        device_ms.append(start.elapsed_time(end))
    return statistics.median(device_ms), statistics.median(host_ms)


def check_reuse(ctx: StepContext, result: StepResult, move, label: str,
                shape: tuple[int, ...], n: int, device: torch.device, resident=None) -> None:
    """Values right after the caller scribbles over / frees its host tensors at once."""
    features = _features(shape, n, seed=n)
    expected = [f.clone() for f in features]
    items = _items(features)
    if ctx.cuda:
        _spin(SLEEP_MS)  # the copy queues behind this: it is in flight when we scribble
    move(items, device)
    in_flight = ctx.cuda and not torch.cuda.current_stream().query()
    for f in features:
        f.fill_(float("nan"))  # the caller reuses its buffers...
    del features, f
    scribble = []
    if ctx.cuda:  # ...and the pinned pool hands out blocks again while the copy runs
        for _ in range(3):
            block = torch.empty((n, *shape), pin_memory=True)
            block.fill_(-7.0)
            scribble.append(block)
        other = _items(_features(shape, n, seed=1000 + n))
        move(other, device)
        torch.cuda.synchronize()
    got = [item.feature.cpu() for item in items]
    if ctx.wrong():
        got[0].view(-1)[0] += 1.0
    same = all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    resident = resident or (lambda t: t.device.type == device.type)
    on_device = all(resident(item.feature) for item in items)
    result.check(f"{label} x{n}: values intact after host buffers reused", same and on_device)
    if ctx.cuda:  # else the check above would prove nothing
        result.check(f"{label} x{n}: the copy was still in flight when they were reused",
                     in_flight)


def run(ctx: StepContext, result: StepResult) -> None:
    from vlm_fastpath.patches.sglang.batched_h2d.managers_mm_utils import batched_move_to_device

    shapes = _shapes(ctx)
    if not ctx.cuda:
        run_dry(ctx, result, shapes, batched_move_to_device)
        return
    device = torch.device("cuda")
    torch.cuda.init()
    for label, shape in shapes.items():
        for n in COUNTS:
            check_reuse(ctx, result, batched_move_to_device, label, shape, n, device)
    rows = []
    for label, shape in shapes.items():
        for n in COUNTS:
            features = _features(shape, n, seed=7)
            mib = round(sum(f.numel() * 4 for f in features) / 2**20, 1)
            row: dict[str, Any] = {"model": label, "items": n, "mib": mib}
            for name, move in (("per_item", per_item), ("batched", batched_move_to_device)):
                def call(move=move, features=features):
                    move(_items(features), device)

                call()  # warm-up (pinned pool, allocator)
                row[f"{name}_copies"] = _profile_copies(call)
                row[f"{name}_ms"], row[f"{name}_return_ms"] = (
                    round(v, 3) for v in _event_ms(call, repeats=5))
                torch.cuda.synchronize()
                _spin(SLEEP_MS)
                t0 = time.perf_counter()
                call()
                row[f"{name}_return_ms_behind_{int(SLEEP_MS)}ms_gpu_work"] = round(
                    (time.perf_counter() - t0) * 1e3, 3)
                row[f"{name}_in_flight_after_return"] = not torch.cuda.current_stream().query()
                torch.cuda.synchronize()
            rows.append(row)
            print(f"  {row}", flush=True)
            result.check(f"{label} x{n}: one cudaMemcpyAsync batched ({n} per item)",
                         row["batched_copies"]["cudaMemcpyAsync"] == 1
                         and row["per_item_copies"]["cudaMemcpyAsync"] == n,
                         batched=row["batched_copies"], per_item=row["per_item_copies"])
            result.check(f"{label} x{n}: batched call returns before its copy completes",
                         row["batched_in_flight_after_return"],
                         return_ms=row[f"batched_return_ms_behind_{int(SLEEP_MS)}ms_gpu_work"])
    result.measure("rows", rows)


def run_dry(ctx: StepContext, result: StepResult, shapes, batched) -> None:
    """The same harness on the CPU: copies counted by the test suite's transfer recorder."""
    from fixtures.transfers import TransferRecorder

    device = torch.device("meta")  # the recorder's stand-in accelerator (values on the CPU)
    rows = []
    for label, shape in shapes.items():
        for n in COUNTS:
            row: dict[str, Any] = {"model": label, "items": n}
            for name, move in (("per_item", per_item), ("batched", batched)):
                recorder = TransferRecorder()
                with recorder:
                    check_reuse(ctx, result, move, f"{label} {name}", shape, n, device,
                                resident=recorder.on_device)
                row[f"{name}_h2d_copies"] = len(recorder.h2d)
            rows.append(row)
            result.check(f"{label} x{n}: one host-to-device copy batched ({n} per item)",
                         row["batched_h2d_copies"] == 1 and row["per_item_h2d_copies"] == n)
    result.measure("rows", rows)
    for what in ("pinned staging + overlap with queued GPU work",
                 "cudaMemcpyAsync count (torch.profiler)", "wall time (CUDA events)",
                 "pinned-pool reuse while the copy is in flight"):
        result.skip(what)
