"""Every ``VLM_FASTPATH*`` environment variable, parsed in one place.

Each reader looks the variable up at call time (tests and users may change the environment
after import), and every module that needs a setting asks here, so ``doctor``, the registry,
the ``.pth`` bootstrap and the processors can never disagree about what a value means.
``VARIABLES`` is the table the README's controls section documents (a test keeps them equal).
Importing this module imports nothing beyond the standard library.
"""

from __future__ import annotations

import os

# Words that turn a switch off, compared after ``.strip().lower()``. The ``.pth`` file repeats
# this test inline (it runs before any import); tests/test_settings.py checks they agree.
OFF_WORDS = ("0", "false", "off", "no")

VARIABLES: dict[str, str] = {
    "VLM_FASTPATH": "0/false/off/no turns every patch off (the .pth then imports nothing)",
    "VLM_FASTPATH_PATCHES": "comma-separated allow-list: apply only these patches",
    "VLM_FASTPATH_SKIP": "comma-separated patches never to apply",
    "VLM_FASTPATH_LOG_LEVEL": "level of the vlm_fastpath logger (default INFO)",
    "VLM_FASTPATH_RESIZE_THREADS": "threads of one preprocessing call, resize pools and numba "
                                   "kernels (default: the CPUs this process may use, at most 8)",
    "VLM_FASTPATH_NUMBA": "0 uses the numpy kernels instead of numba",
    "VLM_FASTPATH_BYTE_GATHER": "0 keeps the int16 resize's horizontal pass off AVX-512 byte "
    "permutes (default: used where the CPU has them)",
    "VLM_FASTPATH_DEFER": "SGLang deferred Kimi preprocessing: auto (default), 0 or 1",
    "VLM_FASTPATH_DEFER_RESIZE": "resize backend of the deferred owner: auto, pillow or torch",
    "VLM_FASTPATH_FAULT_LIMIT": "run-time faults of one patch's fast path before it is disabled "
    "for the process (default 3)",
    "VLM_FASTPATH_BUFFER_POOL_MB": "MiB of freed processor outputs kept for reuse (default 512; "
    "0 keeps none)",
    "VLM_FASTPATH_FAST_DECODE": "exact fast image decoding: 1 (default: verified rows measured "
    "faster), all (every verified row, JPEG too) or 0 (Pillow only)",
    "VLM_FASTPATH_DECODE_OVERLAP": "0 keeps the processor's work on a large JPEG, PNG or WebP from "
    "starting while the engine's loader decodes it (default: on, where rows can be followed)",
    "VLM_FASTPATH_CPU_PREPROCESS": "1 serves Qwen-VL images with our exact CPU processor where "
    "the engine would preprocess them on a GPU (SGLang's default on CUDA, JPEGs then decoded on "
    "the CPU too; vLLM's --mm-processor-device cuda); default 0: the engine's GPU path",
    "VLM_FASTPATH_HASH_THREADS": "threads of vLLM's blake3 hash of one item of 16 MiB or more "
    "(vllm-threaded-mm-hash; default: the CPUs this process may use, at most 4; 1: one thread)",
}

DEFAULT_FAULT_LIMIT = 3
DEFAULT_BUFFER_POOL_MB = 512  # one 8x2048² Kimi or 4032x3024 Qwen float32 output (~300 MB)


def _raw(name: str, default: str = "") -> str:
    if name not in VARIABLES:
        raise KeyError(f"{name} is not a documented vlm-fastpath variable")
    return os.environ.get(name, default)


def is_off(value: str | None) -> bool:
    """True for the values that turn a switch off (``" OFF "`` included)."""
    return value is not None and value.strip().lower() in OFF_WORDS


def enabled() -> bool:
    """False when ``VLM_FASTPATH`` turns every patch off."""
    return not is_off(_raw("VLM_FASTPATH", "1"))


def name_list(name: str) -> set[str] | None:
    """A comma-separated list of patch names; None when unset or empty."""
    value = _raw(name)
    if not value.strip():
        return None
    return {item.strip() for item in value.split(",") if item.strip()}


def only_patches() -> set[str] | None:
    return name_list("VLM_FASTPATH_PATCHES")


def skipped_patches() -> set[str] | None:
    return name_list("VLM_FASTPATH_SKIP")


def log_level() -> str:
    return _raw("VLM_FASTPATH_LOG_LEVEL", "INFO").strip().upper() or "INFO"


def numba_allowed() -> bool:
    return not is_off(_raw("VLM_FASTPATH_NUMBA", "1"))


def cpu_preprocess() -> bool:
    """True when our exact CPU processor replaces an engine's GPU preprocessing (opt-in)."""
    value = _raw("VLM_FASTPATH_CPU_PREPROCESS", "0")
    return bool(value.strip()) and not is_off(value)


def decode_overlap_enabled() -> bool:
    return not is_off(_raw("VLM_FASTPATH_DECODE_OVERLAP", "1"))


def byte_gather_enabled() -> bool:
    return not is_off(_raw("VLM_FASTPATH_BYTE_GATHER", "1"))


def resize_threads() -> int | None:
    """The user's resize thread count (at least 1), or None for the default.

    A value that is not an integer is ignored: a typo must not take the engine down.
    """
    value = _raw("VLM_FASTPATH_RESIZE_THREADS").strip()
    try:
        return max(1, int(value)) if value else None
    except ValueError:
        return None


def defer_mode() -> str:
    """``auto``, ``on`` or ``off`` for SGLang's deferred Kimi preprocessing."""
    value = _raw("VLM_FASTPATH_DEFER", "auto").strip().lower() or "auto"
    if is_off(value):
        return "off"
    if value in ("1", "true", "on", "yes"):
        return "on"
    return "auto"


def defer_resize() -> str:
    return _raw("VLM_FASTPATH_DEFER_RESIZE", "auto").strip().lower() or "auto"


def fault_limit() -> int:
    """Faults a patch's fast path may have before it is disabled (at least 1).

    A value that is not an integer keeps the default: a typo must not take the engine down.
    """
    value = _raw("VLM_FASTPATH_FAULT_LIMIT").strip()
    try:
        return max(1, int(value)) if value else DEFAULT_FAULT_LIMIT
    except ValueError:
        return DEFAULT_FAULT_LIMIT


def buffer_pool_bytes() -> int:
    """Bytes of freed output buffers the processors may keep for reuse (0: none).

    A value that is not a non-negative integer keeps the default.
    """
    value = _raw("VLM_FASTPATH_BUFFER_POOL_MB").strip()
    try:
        megabytes = int(value) if value else DEFAULT_BUFFER_POOL_MB
    except ValueError:
        megabytes = DEFAULT_BUFFER_POOL_MB
    return max(0, megabytes) << 20


def hash_threads() -> int | None:
    """The user's thread count for hashing one large multimodal item (at least 1), or None
    for the default. A value that is not an integer is ignored, as for the resize threads."""
    value = _raw("VLM_FASTPATH_HASH_THREADS").strip()
    try:
        return max(1, int(value)) if value else None
    except ValueError:
        return None
