"""Benchmark-only probe: proves which image processor ran inside a vLLM server process.

Put this folder on ``PYTHONPATH`` of the server (``benchmarks/serving/run.py`` does); Python then
imports it at start-up in the API server, EngineCore and workers. It installs a tiny post-import
hook (independent of vlm_fastpath, which is the code under test) and wraps ``preprocess`` of
the known Kimi/Qwen image processors. Every call prints one line to stderr::

    VLMFP_PROBE pid=123 proc=vlm_fastpath.FusedKimiProcessor items=4 ms=212.3 fastpath=<patches>

``fastpath`` lists the vlm_fastpath patches applied in that process ("-" if none / disabled).
It changes no behaviour, imports nothing heavy, and never raises into the host process.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import threading
import time

TARGETS = {
    "vlm_fastpath.kimi_integration.processor": (
        ("FusedKimiProcessor", "vlm_fastpath.FusedKimiProcessor"),
    ),
    "vllm.transformers_utils.processors.kimi_k25_vision_fused": (
        ("KimiK25FusedVisionProcessor", "vllm.KimiK25FusedVisionProcessor"),
    ),
    "transformers.models.qwen2_vl.image_processing_qwen2_vl": (
        ("Qwen2VLImageProcessor", "transformers.Qwen2VLImageProcessor"),
    ),
}
_busy = threading.local()


def _applied_patches() -> str:
    registry = sys.modules.get("vlm_fastpath.patches.registry")
    if registry is None:
        return "-"
    try:  # the stored decisions only: status() would look up package metadata on every call
        results = list(registry.REGISTRY._results.values())
        names = [r.name for r in results if r.status.value == "applied"]
    except Exception:  # noqa: BLE001
        return "?"
    return ",".join(names) or "-"


def _count_items(args: tuple, kwargs: dict) -> int:
    medias = args[0] if args else kwargs.get("medias", kwargs.get("images"))
    if isinstance(medias, (list, tuple)):
        return len(medias)
    return 0 if medias is None else 1


def _wrap(cls: type, tag: str) -> None:
    original = cls.__dict__.get("preprocess") or getattr(cls, "preprocess", None)
    if original is None or getattr(original, "_vlmfp_probe", False):
        return

    @functools.wraps(original)
    def preprocess(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            ms = (time.perf_counter() - start) * 1e3
            try:
                sys.stderr.write(
                    f"VLMFP_PROBE pid={os.getpid()} proc={tag} items={_count_items(args, kwargs)}"
                    f" ms={ms:.1f} fastpath={_applied_patches()}\n"
                )
                sys.stderr.flush()
            except Exception:  # noqa: BLE001
                pass

    preprocess._vlmfp_probe = True  # type: ignore[attr-defined]
    cls.preprocess = preprocess


def _instrument(module) -> None:
    for class_name, tag in TARGETS.get(module.__name__, ()):
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            try:
                _wrap(cls, tag)
            except Exception:  # noqa: BLE001
                pass


class _Loader(importlib.abc.Loader):
    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _instrument(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in TARGETS or getattr(_busy, "on", False):
            return None
        _busy.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:  # noqa: BLE001
            return None
        finally:
            _busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader)
        return spec


try:
    sys.meta_path.insert(0, _Finder())
    for _name in TARGETS:
        if _name in sys.modules:
            _instrument(sys.modules[_name])
except Exception:  # noqa: BLE001
    pass
