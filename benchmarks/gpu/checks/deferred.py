"""Deferred preprocessing's owner side on the device: ``deferred_check.py``'s logic as a step.

Claims: the torch port of Pillow's bicubic (``torch-pillow``) is bit-exact with Pillow on CUDA
(|diff| histogram all zeros), and the K2.5 owner path on CUDA is ``torch.equal`` with the eager
CPU path. ``torch-antialias`` is reported, not required (see ``deferred_check.py``).
"""

from __future__ import annotations

import torch

from ._result import StepContext, StepResult


def run(ctx: StepContext, result: StepResult) -> None:
    from benchmarks.gpu import deferred_check as dc

    device = torch.device(ctx.device)
    tiny = not ctx.cuda  # the CPU dry run: the same code on two small cases
    if tiny:
        result.note("CPU dry run: small images; the Kimi-sized cases run on CUDA only")
        result.skip("Kimi-sized parity cases and owner timings on CUDA")
    rows: list[dict] = []
    totals = dc.check_parity(device, ctx.quick, tiny=tiny, records=rows)
    if ctx.wrong():
        totals["torch-pillow"].one += 1
    exact = totals["torch-pillow"]
    result.check(f"torch-pillow resize on {ctx.device} == Pillow (|diff| all 0)",
                 exact.zero == exact.total, histogram=exact.row())
    aa = totals["torch-antialias"]
    result.measure("torch_antialias_within_one_level", round(aa.within_one, 6))
    result.measure("parity_rows", rows)
    e2e: list[dict] = []
    repeats = 1 if tiny else 3
    dc.check_end_to_end(device, ctx.quick, repeats, tiny=tiny, records=e2e)
    pillow = [r for r in e2e if r["backend"] == "torch-pillow"]
    result.check(f"K2.5 owner path (torch-pillow) on {ctx.device} torch.equal eager CPU",
                 bool(pillow) and all(r["identical"] for r in pillow),
                 workloads=[r["workload"] for r in pillow])
    result.measure("owner_rows", e2e)
