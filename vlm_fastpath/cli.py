"""Command line: ``vlm-fastpath doctor [--json] [--no-import] [--module M]`` and ``bench``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import collect, render

    try:
        report = collect(import_engines=not args.no_import, module=args.module)
    except Exception as exc:  # noqa: BLE001 - doctor must always answer
        report = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(report) if args.json else f"doctor failed: {report['error']}")
        return 0
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def _bench(args: argparse.Namespace) -> int:
    """``bench``: preprocessing benchmark from the installed package (vlm_fastpath.bench)."""
    from .bench import run

    return run(args)


def _bench_serve(rest: list[str]) -> int:
    """``bench serve``: the end-to-end serving A/B, which lives in the source checkout only."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "serving" / "run.py").exists():
        print(
            "vlm-fastpath bench serve: the end-to-end serving A/B (real vLLM servers with and "
            "without the plugin) ships with the source repository, not the wheel; run "
            "'make e2e' in a checkout. 'vlm-fastpath bench' (no 'serve') works from the wheel."
        )
        return 2
    sys.path.insert(0, str(root))
    from benchmarks.serving.run import main as serve_main

    return serve_main(rest) or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vlm-fastpath")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="versions found and each patch's status")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--no-import", action="store_true", help="do not import engines to decide patches"
    )
    doctor.add_argument(
        "--module", metavar="MODULE", help="only the patches that touch this upstream module"
    )
    from .bench import add_arguments as add_bench_arguments

    bench = sub.add_parser(
        "bench",
        help="image preprocessing: vlm-fastpath vs the installed engine's processors",
        epilog="'vlm-fastpath bench serve [args]' runs the end-to-end serving A/B "
        "(benchmarks.serving.run; source checkout only).",
    )
    add_bench_arguments(bench)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["bench", "serve"]:
        return _bench_serve(argv[2:])
    args, rest = parser.parse_known_args(argv)
    if args.command == "doctor":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return _doctor(args)
    if rest:
        bench.error(f"unrecognized arguments: {' '.join(rest)}")
    return _bench(args)


if __name__ == "__main__":
    sys.exit(main())
