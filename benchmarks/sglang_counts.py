"""Transfer counts of SGLang's encoder input path, unpatched vs patched, per pinned release.

Runs each release's real code on the CPU inside ``TransferRecorder`` (a simulated accelerator:
see ``vlm_fastpath/patches/sglang/_testing.py``): device-to-host syncs per MoonViT forward (the
real tower, 27 layers, FA3 path with a stand-in kernel) and host-to-device copies per Qwen-VL /
Kimi batch through the release's own ``_get_chunked_embedding_full``.

    python -m benchmarks.sglang_counts                 # every .envs/sglang-* env, prints a table
    python -m benchmarks.sglang_counts --json out.json --plot out.png
    .envs/sglang-0.5.15.post1/bin/python -m benchmarks.sglang_counts --worker   # one release

Raw-feature copies under encoder DP (TP2/4/8) are not measured: that patch is not implemented.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = (1, 4, 8)


def _worker() -> dict:
    import itertools

    import sglang
    import sglang.srt.managers.mm_utils as mm_utils  # noqa: I001
    import sglang.srt.models.kimi_k25  # noqa: F401
    import torch

    from vlm_fastpath.patches import REGISTRY
    from vlm_fastpath.patches.sglang import _testing

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
    return result


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
    return "\n".join(lines)


def _plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
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
    for ax in axes:
        ax.set_xticks(list(xs), versions)
        ax.legend()
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
    for python in _envs():
        proc = subprocess.run(
            [str(python), "-m", "benchmarks.sglang_counts", "--worker"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
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
