"""GPU check of the SGLang encoder input path: syncs, H2D copies, wall time, unpatched vs patched.

Run with a pinned release's python on a machine with one GPU (well under 5 minutes):

    .envs/sglang-0.5.15.post1/bin/python -m benchmarks.gpu.sglang_check --device cuda
    .envs/sglang-0.5.15.post1/bin/python -m benchmarks.gpu.sglang_check --device cpu   # dry run

On CUDA, device-to-host syncs are counted with ``torch.cuda.set_sync_debug_mode("warn")`` and
H2D copies with a recording mode; the FA3 kernel is SGLang's own when it imports, else a
stand-in (excluded from the counts). On the CPU the same numbers come from the simulated device
of ``fixtures.sglang_cpu`` (no wall-time meaning beyond a smoke test).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import warnings


def _count_cuda_syncs(fn):
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    return out, len(syncs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--layers", type=int, default=27)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    import sglang
    import sglang.srt.managers.mm_utils  # noqa: F401
    import sglang.srt.models.kimi_k25  # noqa: F401
    import torch

    from fixtures import sglang_cpu as _testing
    from vlm_fastpath.patches import REGISTRY

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu for a dry run")
    REGISTRY.revert(engine="sglang")
    model = _testing.build_kimi_k25(num_layers=args.layers)
    grids = [(1, 32, 32), (1, 48, 24), (1, 20, 36), (1, 64, 64)]
    report = {"version": sglang.__version__, "device": args.device, "runs": {}}

    use_stub = True
    if args.device == "cuda":
        model = model.to("cuda")
        import sglang.srt.layers.attention.vision as vision

        use_stub = not callable(vision.__dict__.get("flash_attn_varlen_func"))

    def forward(recorder=None):
        items = _testing.kimi_items(grids)
        stub = _testing.fa3_stub(recorder) if use_stub else contextlib.nullcontext()
        with stub, torch.no_grad():
            if recorder is not None:
                with recorder:
                    recorder.place(model)
                    return model.get_image_feature(items)
            return model.get_image_feature(items)

    for label in ("unpatched", "patched"):
        REGISTRY.revert(engine="sglang")
        if label == "patched":
            REGISTRY.apply(engine="sglang")
        forward()  # warm-up
        if args.device == "cpu":
            recorder = _testing.TransferRecorder()
            out = forward(recorder)
            syncs, h2d = recorder.sync_count, len(recorder.h2d)
        else:
            recorder = _testing.TransferRecorder()
            out, syncs = _count_cuda_syncs(forward)
            forward(recorder)
            h2d = len(recorder.h2d)
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.repeats):
            out = forward()
        if args.device == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) / args.repeats * 1e3
        report["runs"][label] = {
            "syncs_per_forward": syncs,
            "h2d_copies": h2d,
            "ms_per_forward": round(ms, 3),
            "checksum": float(out.float().sum()),
        }
    report["status"] = {r.name: r.status.value for r in REGISTRY.status("sglang")}
    REGISTRY.revert(engine="sglang")
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
