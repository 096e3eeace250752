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


def _bench(rest: list[str]) -> int:
    """``bench [args]``: preprocessing benchmark; ``bench serve [args]``: end-to-end A/B."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "preprocess.py").exists():
        print("vlm-fastpath bench needs a source checkout (benchmarks/ is not installed)")
        return 2
    sys.path.insert(0, str(root))
    if rest[:1] == ["serve"]:
        from benchmarks.serving.run import main as serve_main

        return serve_main(rest[1:]) or 0
    from benchmarks.preprocess import main as bench_main

    return bench_main(rest)


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
    sub.add_parser(
        "bench",
        help="preprocessing benchmark (args go to benchmarks.preprocess); "
        "'bench serve' runs the end-to-end serving A/B (benchmarks.serving.run)",
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "doctor":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return _doctor(args)
    return _bench(rest)


if __name__ == "__main__":
    sys.exit(main())
