"""Transfer counts of SGLang's encoder input path, unpatched vs patched, per pinned release.

Runs each release's real code on the CPU inside ``TransferRecorder`` (a simulated accelerator:
see ``fixtures/sglang_cpu.py``): device-to-host syncs per MoonViT forward (the
real tower, 27 layers, FA3 path with a stand-in kernel) and host-to-device copies per Qwen-VL /
Kimi batch through the release's own ``_get_chunked_embedding_full``.

Raw-feature copies under encoder data parallelism with CUDA IPC (Kimi K2.5, TP2/TP4/TP8 x 1-8
distinct images, one request prefilled in two chunks): TP ranks simulated as threads over the
release's own scheduler-side code with a recording double of its ``CudaIpcTensorTransportProxy``
(``fixtures/ipc_sim.py``, shared with ``tests/engines/sglang/
test_ipc_deferral.py``); every copy of a feature out of the IPC pool, on any rank, counts. The
simulation doubles the pre-0.5.16 interfaces where our patches apply; releases with the deferral
built in (0.5.16+, sglang #31227) are reported as "upstream", not simulated.

    python -m benchmarks.sglang_counts                 # every .envs/sglang-* env, prints a table
    python -m benchmarks.sglang_counts --json out.json --plot out.png
    .envs/sglang-0.5.15.post1/bin/python -m benchmarks.sglang_counts --worker   # one release
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = (1, 4, 8)
TPS = (2, 4, 8)
COPY_IMAGES = tuple(range(1, 9))


def _worker() -> dict:
    import importlib
    import itertools

    import sglang
    import sglang.srt.managers.mm_utils as mm_utils  # noqa: I001
    import sglang.srt.models.kimi_k25  # noqa: F401
    import torch

    for name in ("sglang.srt.multimodal.mm_utils",  # triggers of the encoder-DP IPC patches
                 "sglang.srt.multimodal.processors.base_processor"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the copies table then says why
            pass

    from fixtures import sglang_cpu as _testing
    from vlm_fastpath.patches import REGISTRY

    result = {"version": sglang.__version__, "moonvit": {}, "h2d": {}}
    REGISTRY.revert(engine="sglang")
    grids = [(1, 8, 8), (1, 12, 6), (1, 6, 10)]
    try:
        model = _testing.build_kimi_k25()
    except Exception as exc:  # noqa: BLE001
        model = None
        result["moonvit"]["error"] = f"{type(exc).__name__}: {exc}"[:200]

    def moonvit_syncs():
        items = _testing.kimi_items(grids)
        recorder = _testing.TransferRecorder()
        with _testing.fa3_stub(recorder), recorder, torch.no_grad():
            recorder.place(model)
            model.get_image_feature(items)
        return recorder.sync_count

    device = torch.device("meta")
    hashes = itertools.count(7_000_003)

    def h2d_copies(class_name, n_images):
        from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

        if not hasattr(mm_utils, "_get_chunked_embedding_full"):
            return None

        def get_image_feature(self, items):
            return torch.cat([i.feature for i in items]).to(device, dtype=torch.float32)

        model_obj = type(class_name, (), {"get_image_feature": get_image_feature})()
        items, offsets, start = [], [], 0
        for _ in range(n_images):
            item = _testing.make_item(MultimodalDataItem, Modality.IMAGE, torch.ones(64, 8), {})
            item.hash = next(hashes)
            item.pad_value = item.hash % (1 << 30)
            item.offsets = [(start, start + 63)]
            offsets.append((start, start + 63))
            items.append(item)
            start += 64
        mm_utils.init_mm_embedding_cache(1 << 30)
        recorder = _testing.TransferRecorder()
        with recorder:
            mm_utils._get_chunked_embedding_full(
                model_obj.get_image_feature, items, offsets, 0, start,
                torch.zeros(start, dtype=torch.long), device,
            )
        return len(recorder.h2d)

    for label in ("unpatched", "patched"):
        REGISTRY.revert(engine="sglang")
        if label == "patched":
            REGISTRY.apply(engine="sglang")
        if model is not None:
            moonvit_syncs()  # warm-up (lazy rope tables)
            result["moonvit"][label] = moonvit_syncs()
        for class_name in ("Qwen2_5_VLForConditionalGeneration",
                           "Qwen3VLForConditionalGeneration",
                           "KimiK25ForConditionalGeneration"):
            for n in IMAGES:
                key = f"{class_name.split('For')[0]} x{n}"
                result["h2d"].setdefault(key, {})[label] = h2d_copies(class_name, n)
    result["status"] = {r.name: r.status.value for r in REGISTRY.status("sglang")}
    REGISTRY.revert(engine="sglang")
    result["copies"] = _raw_feature_copies()
    return result


def _raw_feature_copies() -> dict:
    """Raw-feature copies per request (all ranks), ``{"TP8": {"4": {"unpatched": 32, ...}}}``."""
    try:
        import sglang.srt.managers.schedule_batch as sb

        from fixtures import ipc_sim as _ipc_sim
        from vlm_fastpath.patches.sglang.encoder_dp_ipc import _switches

        reason = _switches.upstream_has_it(sb)
        if reason is not None:
            return {"upstream": reason}
        return {"table": _ipc_sim.copies_table(TPS, COPY_IMAGES)}
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def _envs() -> list[Path]:
    return sorted((ROOT / ".envs").glob("sglang-*/bin/python"))


def _table(results: list[dict]) -> str:
    lines = []
    for res in results:
        lines.append(f"sglang {res['version']}")
        mv = res.get("moonvit", {})
        if "error" in mv:
            lines.append(f"  MoonViT syncs/forward: not measured ({mv['error'][:80]})")
        else:
            lines.append(
                f"  MoonViT D2H syncs per forward (27 layers): unpatched {mv.get('unpatched')}"
                f"  patched {mv.get('patched')}"
            )
        lines.append("  H2D copies per batch (before the vision tower):   unpatched  patched")
        for key, row in res["h2d"].items():
            un = "-" if row.get("unpatched") is None else row["unpatched"]
            pa = "-" if row.get("patched") is None else row["patched"]
            lines.append(f"    {key:<24} {un:>22}  {pa:>7}")
        lines.extend(_copies_lines(res.get("copies", {})))
    return "\n".join(lines)


def _copies_lines(copies: dict) -> list[str]:
    head = "  Raw-feature copies per request, Kimi K2.5 encoder DP + CUDA IPC"
    if "table" not in copies:
        why = copies.get("upstream") or copies.get("error") or "not measured"
        label = "upstream" if "upstream" in copies else "not measured"
        return [f"{head}: {label} ({why[:90]})"]
    table = copies["table"]
    lines = [f"{head} (unpatched -> patched):",
             "    images " + "".join(f"{n:>6}    " for n in COPY_IMAGES).rstrip()]
    for tp, row in table.items():
        cells = "".join(
            f"{row[str(n)]['unpatched']:>5}->{row[str(n)]['patched']:<3}" for n in COPY_IMAGES
        )
        lines.append(f"    {tp:<6} {cells}".rstrip())
    return lines


def _plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    versions = [r["version"] for r in results]
    xs = range(len(versions))
    for offset, label in ((-0.2, "unpatched"), (0.2, "patched")):
        vals = [r.get("moonvit", {}).get(label) or 0 for r in results]
        axes[0].bar([x + offset for x in xs], vals, width=0.4, label=label)
        key = "Qwen2_5_VL x8"
        vals = [r["h2d"].get(key, {}).get(label) or 0 for r in results]
        axes[1].bar([x + offset for x in xs], vals, width=0.4, label=label)
    axes[0].set_title("MoonViT D2H syncs per forward")
    axes[1].set_title("Qwen2.5-VL H2D copies, 8 images")
    for ax in axes[:2]:
        ax.set_xticks(list(xs), versions)
        ax.legend()
    ax = axes[2]
    for res in results:
        table = res.get("copies", {}).get("table")
        if not table:
            continue
        for tp, row in table.items():
            ax.plot(COPY_IMAGES, [row[str(n)]["unpatched"] for n in COPY_IMAGES], "--o",
                    label=f"{res['version']} {tp} unpatched", markersize=3)
        first = next(iter(table.values()))
        ax.plot(COPY_IMAGES, [first[str(n)]["patched"] for n in COPY_IMAGES], "-s",
                label=f"{res['version']} patched (any TP)", markersize=3)
    upstream = [r["version"] for r in results if "upstream" in r.get("copies", {})]
    title = "Raw-feature copies per request, encoder DP"
    ax.set_title(title + (f"\n(upstream, not simulated: {', '.join(upstream)})"
                          if upstream else ""), fontsize=9)
    ax.set_xlabel("images per request")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="measure this interpreter's sglang")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)
    if args.worker:
        print("RESULT" + json.dumps(_worker()))
        return 0
    results = []
    # the checkout's vlm_fastpath, not the copy installed in each env (its .pth imports that one
    # at startup, before the working directory is on sys.path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    for python in _envs():
        proc = subprocess.run(
            [str(python), "-m", "benchmarks.sglang_counts", "--worker"],
            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
        if proc.returncode != 0 or not lines:
            print(f"{python}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        results.append(json.loads(lines[-1][len("RESULT"):]))
    print(_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot and results:
        _plot(results, args.plot)
    return 0 if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
