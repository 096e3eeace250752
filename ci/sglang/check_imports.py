"""Import the SGLang modules the suites and patches need; fail loudly if one does not."""

from __future__ import annotations

import importlib
import sys

MODULES = (
    "sglang.srt.plugins",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.mm_utils",
    "sglang.srt.layers.attention.vision",
    "sglang.srt.multimodal.processors.base_processor",
    "sglang.srt.multimodal.processors.qwen_vl",
    "sglang.srt.multimodal.processors.kimi_k25",
    "sglang.srt.models.qwen2_5_vl",
    "sglang.srt.models.qwen3_vl",
    "sglang.srt.models.kimi_k25",
)

def main() -> int:
    failed = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    if failed:
        print("sglang env: import failures\n  " + "\n  ".join(failed))
        return 1
    print(f"sglang env: {len(MODULES)} modules import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
