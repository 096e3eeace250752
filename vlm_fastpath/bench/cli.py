"""Options and driver of ``vlm-fastpath bench``; imports only argparse until it runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Light enough for a 2-core laptop in well under a minute; 8x2048x2048 is the heavy one.
DEFAULT_WORKLOADS = ("1x2048x2048", "4x1536x1024")
DEFAULT_PNG = Path("vlm-fastpath-bench.png")
DESCRIPTION = (
    "Image preprocessing on this machine: vlm-fastpath's processors vs the ones the installed "
    "engine would use (vLLM's fused Kimi K2.5 processor; transformers' Qwen2-VL processors). "
    "Every contender's output is first checked against ours (torch.equal), then timed: median "
    "of --rounds calls after one warm-up call, contender order rotated each round. The last "
    "column says whether the installed engine actually hands out that processor (the status "
    "of the patch that puts ours in its place)."
)


def _spec(text: str) -> str:
    from .workloads import WorkloadError, parse_spec

    try:
        return parse_spec(text).name
    except WorkloadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench options, on the ``bench`` sub-parser of ``vlm-fastpath``."""
    parser.description = DESCRIPTION
    parser.add_argument(
        "--images", type=Path, metavar="DIR",
        help="time on the images in DIR (jpg, png, webp, bmp, gif, tiff; decoded to RGB before "
        "timing, all in one batch) instead of synthetic ones",
    )
    parser.add_argument(
        "--workload", action="append", type=_spec, metavar="NxWxH",
        help="synthetic batch of N random RGB images of WxH (or NxS for SxS); repeat for more. "
        f"Default: {', '.join(DEFAULT_WORKLOADS)} (8x2048x2048 is a heavier one); "
        "with --images, only when given",
    )
    parser.add_argument("--rounds", type=_positive, default=7, metavar="N",
                        help="timed calls per contender and workload (default 7)")
    parser.add_argument("--model", choices=("all", "kimi", "qwen"), default="all",
                        help="which model's processors to compare (default all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic images")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    parser.add_argument("--png", type=Path, metavar="PATH", default=DEFAULT_PNG,
                        help=f"bar chart path (default {DEFAULT_PNG}; needs matplotlib)")
    parser.add_argument("--no-png", action="store_true", help="do not write the bar chart")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; 0 on success, 2 on bad input, 1 if our processor failed."""
    from .workloads import WorkloadError, from_folder, parse_spec, synthetic

    try:
        workloads = []
        if args.images is not None:
            folder_workload, skipped = from_folder(args.images)
            for note in skipped:
                print(f"skipped {note}", file=sys.stderr)
            workloads.append(folder_workload)
        specs = args.workload or ([] if args.images is not None else list(DEFAULT_WORKLOADS))
        workloads += [synthetic(parse_spec(s), args.seed) for s in dict.fromkeys(specs)]
    except WorkloadError as exc:
        print(f"vlm-fastpath bench: error: {exc}", file=sys.stderr)
        return 2

    # Imported only now: a bad --images folder is reported before torch loads.
    from .contenders import discover
    from .report import (
        environment,
        format_environment,
        format_notes,
        format_table,
        relative,
        write_json,
        write_png,
    )
    from .runner import Progress, bench_workload

    progress = Progress(sys.stderr, enabled=not args.quiet)
    env = environment()
    print(format_environment(env), flush=True)
    names = ["kimi", "qwen"] if args.model == "all" else [args.model]
    families = discover(names)
    absent = [a for f in families for a in f.absent]
    rows, failures = [], []
    try:
        for family in families:
            if not any(c.ours for c in family.contenders):
                continue
            for workload in workloads:
                got, failed = bench_workload(family, workload, args.rounds, progress)
                rows += got
                failures += failed
    except Exception as exc:  # noqa: BLE001 - our own processor failed: say so, exit 1
        progress.clear()
        print(f"vlm-fastpath bench: our processor failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    progress.clear()
    # After the timing: deciding imports the engines and applies the patches.
    from .engine_use import engine_uses

    uses = engine_uses([f.name for f in families if any(c.ours for c in f.contenders)])
    for row in rows:
        use = uses.get(row.family)
        if use is not None and use.used is not None:
            row.engine_uses = use.mark if row.ours else ("NO" if use.used else "yes")

    print()
    print(format_table(rows))
    notes = format_notes(absent, failures, uses)
    if notes:
        print(notes)
    if args.json is not None:
        settings = {"rounds": args.rounds, "seed": args.seed, "model": args.model,
                    "workloads": [w.name for w in workloads]}
        path = write_json(args.json, env, settings, rows, absent, failures)
        print(f"json: {relative(path)}")
    if not args.no_png:
        png = write_png(args.png, rows, env["cores"])
        print(f"chart: {relative(png)}" if isinstance(png, Path) else f"chart: skipped ({png})")
    return 0
