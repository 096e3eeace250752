"""Fail fast when an engine env lacks a dependency: import the modules the suites touch.

Usage: ``python ci/engines/check_imports.py vllm`` (inside that engine's env).
"""

from __future__ import annotations

import importlib
import sys
import time

MODULES = {
    "vllm": (
        "vllm",
        "vllm.plugins",
        "vllm.multimodal",
        "vllm.transformers_utils.processor",
        "vllm.model_executor.models.kimi_k25",
        "numba",
    ),
}


def main(engine: str) -> int:
    start = time.perf_counter()
    failed = []
    for name in MODULES[engine]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report every missing piece at once
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    version = getattr(sys.modules.get(engine), "__version__", "?")
    if failed:
        print(f"{engine} {version}: imports failed:\n  " + "\n  ".join(failed))
        return 1
    print(f"{engine} {version}: imports ok ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
