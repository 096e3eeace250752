"""SGLang's real MoonViT on the device: syncs per forward, unpatched vs patched.

Claim (``sglang-moonvit-max-seqlen-once`` + ``sglang-vision-host-max-seqlen`` +
``sglang-moonvit-sdpa-host-cu-seqlens``, sglang 0.5.12-0.5.15.post1): the tower does 0
synchronizing operations per forward where the release does 30 (27 per-block ``max_seqlen``
``.item()`` or SDPA ``cu_seqlens.cpu()``, + 3 ``grid_thws.tolist()``), with identical outputs.

On CUDA the count is ``torch.cuda.set_sync_debug_mode("warn")`` (every synchronizing CUDA call,
by source line). The features are on the device before the forward, as SGLang's
``_move_items_to_device`` leaves them. Backends: SGLang's own SDPA vision backend, and FA3 with
the real kernel when it imports, else a stand-in kernel (its own syncs not counted). Without
SGLang's kernel packages (``sgl_kernel``, ``flashinfer``) SGLang is imported, set up and built in
its CPU-CI mode (``torch.cuda.is_available()`` reads False while it imports), then the model runs
on CUDA in native torch layers. The CPU dry run counts with the test suite's transfer recorder.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import linecache
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ._result import StepContext, StepResult, StepSkipped

MODULES = ("sglang.srt.managers.schedule_batch", "sglang.srt.layers.attention.vision",
           "sglang.srt.models.kimi_k25")
UNPATCHED_30 = ("0.5.12", "0.5.13", "0.5.14", "0.5.15")  # releases that sync 30 times


def kernels_present() -> bool:
    return all(importlib.util.find_spec(n) is not None for n in ("sgl_kernel", "flashinfer"))


@contextlib.contextmanager
def no_kernel_mode(active: bool) -> Iterator[None]:
    """Make SGLang take its no-CUDA import paths (native torch layers) while active."""
    if not active:
        yield
        return
    saved = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_available = saved


def import_sglang(ctx: StepContext, result: StepResult | None, modules=MODULES) -> Any:
    """Import SGLang's modules or raise StepSkipped with the reason."""
    mode = ctx.cuda and not kernels_present()
    try:
        with no_kernel_mode(mode):
            sglang = importlib.import_module("sglang")
            for name in modules:
                importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure means: cannot run here
        raise StepSkipped(f"sglang not importable: {type(exc).__name__}: {exc}") from exc
    if result is not None:
        result.measure("sglang", sglang.__version__)
        if mode:
            result.note("sgl_kernel/flashinfer absent: SGLang imported in its no-kernel mode "
                        "(torch.cuda.is_available() False during import and build only)")
    return sglang


def _quiet(kernel):
    """A stand-in kernel whose own host reads are not counted (a real kernel has none)."""
    def call(*args, **kwargs):
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        try:
            return kernel(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    return call


@contextlib.contextmanager
def fa3_kernel(stand_in: bool, recorder=None, quiet: bool = False) -> Iterator[None]:
    """The FA3 path's kernel: the stand-in (quiet on CUDA) unless the real one imported."""
    if not stand_in:
        yield
        return
    from fixtures.sglang_cpu import fa3_stub

    with fa3_stub(recorder, _quiet if quiet else None):
        yield


def build(ctx: StepContext, backend: str):
    """``KimiK25ForConditionalGeneration`` with the release's MoonViT (K2.5 sizes on CUDA)."""
    import sglang.srt.models.kimi_k25 as kimi
    from sglang.srt import server_args as sa
    from sglang.srt.configs.kimi_k25 import KimiK25VisionConfig

    from fixtures import sglang_cpu

    if not ctx.cuda or ctx.quick:
        cfg = sglang_cpu.tiny_moonvit_config(27)
    else:  # MoonViT's own sizes (K2.5: 27 blocks, 1152 wide, 16 heads)
        cfg = KimiK25VisionConfig(num_hidden_layers=27, hidden_size=1152, num_attention_heads=16,
                                  intermediate_size=4304, patch_size=14, init_pos_emb_height=64,
                                  init_pos_emb_width=64, mm_hidden_size=1152,
                                  text_hidden_size=2048)
        if not hasattr(cfg, "vt_hidden_size"):
            cfg.vt_hidden_size = cfg.hidden_size
    sglang_cpu.setup_sglang_cpu()
    torch.manual_seed(0)
    args = (getattr(sa, "get_global_server_args", None) or sa.get_server_args)()
    saved = args.mm_attention_backend
    args.mm_attention_backend = backend
    try:
        with fa3_kernel(backend == "fa3"):
            tower = kimi.MoonViT3dPretrainedModel(cfg, use_data_parallel=True)
    finally:
        args.mm_attention_backend = saved
    model = kimi.KimiK25ForConditionalGeneration.__new__(kimi.KimiK25ForConditionalGeneration)
    torch.nn.Module.__init__(model)
    model.vision_tower = tower
    model.mm_projector = kimi.K2VLMultiModalProjector(cfg)
    model.use_data_parallel = False
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.02)
    return model.eval()


def count_cuda_syncs(fn) -> tuple[Any, list[str]]:
    """``fn()`` under sync debug mode "warn": its result and one 'file:line: code' per sync."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()  # after the mode is off: this wait is ours, not the forward's
    where = []
    for w in caught:
        if "synchroniz" in str(w.message).lower():
            code = linecache.getline(w.filename, w.lineno).strip()
            where.append(f"{Path(w.filename).name}:{w.lineno}: {code}")
    return out, where


def _grids(ctx: StepContext) -> list[tuple[int, int, int]]:
    if ctx.cuda and not ctx.quick:
        return [(1, 32, 32), (1, 48, 24), (1, 20, 36), (1, 64, 64)]
    return [(1, 4, 4), (1, 8, 6), (1, 6, 6)]


def run(ctx: StepContext, result: StepResult) -> None:
    sglang = import_sglang(ctx, result)
    from fixtures import sglang_cpu
    from vlm_fastpath.patches import REGISTRY

    version = sglang.__version__
    REGISTRY.revert(engine="sglang")
    device = torch.device(ctx.device)
    real_fa3 = ctx.cuda and kernels_present()
    grids = _grids(ctx)
    repeats = 10 if ctx.cuda else 1
    rows: dict[str, Any] = {}
    for backend in ("sdpa", "fa3"):
        label = backend if backend == "sdpa" or real_fa3 else "fa3 (stand-in kernel)"
        with no_kernel_mode(ctx.cuda and not kernels_present()):
            model = build(ctx, backend)
        model = model.to(device)
        stand_in = backend == "fa3" and not real_fa3

        def items():
            out = sglang_cpu.kimi_items(grids)
            if ctx.cuda:  # as _move_items_to_device leaves them
                for item in out:
                    item.feature = item.feature.to(device)
            return out

        def forward(recorder=None, batch=None, model=model, stand_in=stand_in):
            batch = batch if batch is not None else items()
            with fa3_kernel(stand_in, recorder, quiet=ctx.cuda), torch.no_grad():
                if recorder is None:
                    return model.get_image_feature(batch)
                with recorder:
                    recorder.place(model)
                    return model.get_image_feature(batch)

        outs: dict[str, torch.Tensor] = {}
        for state in ("unpatched", "patched"):
            REGISTRY.revert(engine="sglang")
            if state == "patched":
                REGISTRY.apply(engine="sglang")
            try:
                forward()  # warm-up: rope tables, kernels
                if ctx.cuda:  # the items (features on the device) are made outside the count
                    batch = items()
                    torch.cuda.synchronize()
                    out, where = count_cuda_syncs(lambda batch=batch: forward(batch=batch))
                else:
                    from fixtures.transfers import TransferRecorder

                    recorder = TransferRecorder()
                    out = forward(recorder)
                    where = list(recorder.syncs)
                times = []
                batches = [items() for _ in range(repeats)]  # inputs ready before the clock
                for batch in batches:
                    if ctx.cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    forward(batch=batch)
                    if ctx.cuda:
                        torch.cuda.synchronize()
                    times.append((time.perf_counter() - t0) * 1e3)
                statuses = {r.name: r.status.value for r in REGISTRY.status("sglang")}
            finally:
                REGISTRY.revert(engine="sglang")
            outs[state] = out.float().cpu()
            rows[f"{label} {state}"] = {
                "syncs_per_forward": len(where),
                "by_source": dict(Counter(where).most_common(8)),
                "forward_ms_median": round(statistics.median(times), 3),
                "output_shape": list(out.shape),
            }
            print(f"  {label} {state}: {len(where)} syncs, "
                  f"{statistics.median(times):.2f} ms", flush=True)
        if ctx.wrong():
            outs["patched"].view(-1)[0] += 1.0
        unpatched = rows[f"{label} unpatched"]["syncs_per_forward"]
        patched = rows[f"{label} patched"]["syncs_per_forward"]
        result.check(f"{label}: patched forward makes 0 syncs", patched == 0, syncs=patched)
        if version.startswith(UNPATCHED_30):
            result.check(f"{label}: unpatched sglang {version} makes >= 30", unpatched >= 30,
                         syncs=unpatched)
        result.check(f"{label}: outputs torch.equal unpatched vs patched",
                     torch.equal(outs["unpatched"], outs["patched"]))
    result.measure("patch_status", {k: v for k, v in statuses.items()
                                    if "seqlen" in k or "moonvit" in k})
    result.measure("runs", rows)
    result.measure("grids", grids)
    result.measure("fa3_kernel", "real" if real_fa3 else "stand-in (syncs inside not counted)")
    if not ctx.cuda:
        result.skip("syncs counted by torch.cuda.set_sync_debug_mode and CUDA forward time")
    result.note("Qwen vision tower: not covered by this step (its patches have no sync claim)")
