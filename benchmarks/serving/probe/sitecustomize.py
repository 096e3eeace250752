"""Benchmark-only probe: proves which image processor ran inside a vLLM server process.

Put this folder on ``PYTHONPATH`` of the server (``benchmarks/serving/run.py`` does); Python then
imports it at start-up in the API server, EngineCore and workers. It installs a tiny post-import
hook (independent of vlm_fastpath, which is the code under test) and wraps ``preprocess`` of
the known Kimi/Qwen image processors. Every call prints one line to stderr::

    VLMFP_PROBE pid=123 proc=vlm_fastpath.FusedKimiProcessor items=4 ms=212.3 fastpath=<patches> \
        patches=16900 dtype=float32 via=-

``fastpath`` lists the vlm_fastpath patches applied in that process ("-" if none / disabled),
``patches`` and ``dtype`` the rows and dtype of the returned ``pixel_values`` ("?" if none;
uint8 where vLLM normalizes on the device, ``mm_device_do_normalize``), ``via`` who called:
``check`` inside vlm_fastpath's ``check_compatible`` or its Kimi contract probe
(``patches.kimi_probe.compare_pair``: one-time probe images through both processors, not a
request), ``twin`` inside the Qwen twin's ``preprocess`` (vlm_fastpath's
image processor handed to vLLM: ours normally, transformers' when the twin hands a call back),
``-`` otherwise (the engine called the processor itself).

vlm_fastpath's Qwen twin is a subclass of transformers' ``Qwen2VLImageProcessor`` whose
``preprocess`` calls ``FastQwen2VLImageProcessor.preprocess``; both are wrapped, so the line
names the code that produced the pixels. The wrappers keep ``__module__`` (functools.wraps):
vlm_fastpath stands aside when transformers' pixel methods come from another module.
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

LOAD = "vllm.MediaConnector.load"
TOWER_INPUT = "vllm.Qwen2_5_VL.image_input"
TARGETS = {
    "vlm_fastpath.kimi_integration.processor": (
        ("FusedKimiProcessor", "vlm_fastpath.FusedKimiProcessor"),
    ),
    "vllm.transformers_utils.processors.kimi_k25_vision_fused": (
        ("KimiK25FusedVisionProcessor", "vllm.KimiK25FusedVisionProcessor"),
    ),
    "vlm_fastpath.qwen_integration.processor": (
        ("FastQwen2VLImageProcessor", "vlm_fastpath.FastQwen2VLImageProcessor"),
    ),
    "transformers.models.qwen2_vl.image_processing_qwen2_vl": (
        ("Qwen2VLImageProcessor", "transformers.Qwen2VLImageProcessor"),
    ),
    "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl": (
        ("Qwen2VLImageProcessorPil", "transformers.Qwen2VLImageProcessorPil"),
    ),
    # Video processors: their pixel step ``_preprocess`` (``preprocess`` is the base class's,
    # shared by ours and transformers'); ours falls back to transformers' through ``super()``,
    # which then logs a line of its own.
    "vlm_fastpath.qwen_integration.video_processor": (
        ("FastQwen2VLVideoProcessor", "vlm_fastpath.FastQwen2VLVideoProcessor", "_preprocess"),
    ),
    "transformers.models.qwen2_vl.video_processing_qwen2_vl": (
        ("Qwen2VLVideoProcessor", "transformers.Qwen2VLVideoProcessor", "_preprocess"),
    ),
    # Loading one media item from its URL (vLLM's MediaConnector: base64 or file read and the
    # decode, by vLLM's loader or, with the plugin, ours): the decode part of preprocessing.
    # The engine side: what the Qwen2.5-VL model receives (``width``: its rows' width, compact
    # rows are half the full ones: ``vllm-qwen-compact-image-rows``).
    "vllm.model_executor.models.qwen2_5_vl": (
        ("Qwen2_5_VLForConditionalGeneration", TOWER_INPUT, "_process_image_input"),
    ),
    "vllm.multimodal.media.connector": (
        ("MediaConnector", LOAD, "_load_data_url"),
        ("MediaConnector", LOAD, "_load_file_url"),
    ),
}
# Callers recognised on the stack: (module, function) -> the ``via`` value.
CALLERS = {
    ("vlm_fastpath.qwen_integration.compat", "check_compatible"): "check",
    ("vlm_fastpath.patches.adapters.kimi_probe", "compare_pair"): "check",
    ("vlm_fastpath.patches.adapters.qwen_twin", "preprocess"): "twin",
    ("vlm_fastpath.qwen_integration.video_compat", "check_video_compatible"): "check",
    # the probe of the installed transformers' RGB conversion rules (tiny images, once)
    ("vlm_fastpath.qwen_integration.rgb_rules", "_probe"): "check",
    ("vlm_fastpath.qwen_integration.rgb_rules", "_probe_limits"): "check",
    ("vlm_fastpath.patches.adapters.qwen_video_twin", "preprocess"): "twin",
}
_busy = threading.local()


def _applied_patches() -> str:
    registry = sys.modules.get("vlm_fastpath.patches.core.registry")
    if registry is None:
        return "-"
    try:  # the stored decisions only: status() would look up package metadata on every call
        results = list(registry.REGISTRY._results.values())
        names = [r.name for r in results if r.status.value == "applied"]
    except Exception:  # noqa: BLE001
        return "?"
    return ",".join(names) or "-"


def _count_items(args: tuple, kwargs: dict) -> int:
    medias = args[0] if args else kwargs.get(
        "medias", kwargs.get("images", kwargs.get("videos")))
    if isinstance(medias, (list, tuple)):
        return len(medias)
    return 0 if medias is None else 1


def _patches(result) -> str:
    """``<rows>`` of the returned pixel_values and their dtype, e.g. ``62208 dtype=uint8``."""
    try:
        data = result.get("pixel_values")
        pixels = result["pixel_values_videos"] if data is None else data
        return f"{int(pixels.shape[0])} dtype={str(pixels.dtype).replace('torch.', '')}"
    except Exception:  # noqa: BLE001
        return "? dtype=?"


def _width(result, args: tuple, tag: str) -> str:
    """The rows' width: of the input's pixel_values for the model's method, else of the
    returned ones."""
    try:
        data = args[0] if tag == TOWER_INPUT else result
        pixels = data.get("pixel_values")
        if pixels is None:
            pixels = data["pixel_values_videos"]
        return str(int(pixels.shape[-1]))
    except Exception:  # noqa: BLE001
        return "?"


def _via() -> str:
    try:
        frame = sys._getframe(2)
        while frame is not None:
            via = CALLERS.get((frame.f_globals.get("__name__"), frame.f_code.co_name))
            if via is not None:
                return via
            frame = frame.f_back
    except Exception:  # noqa: BLE001
        return "?"
    return "-"


def _wrap(cls: type, tag: str, method: str = "preprocess") -> None:
    original = cls.__dict__.get(method) or getattr(cls, method, None)
    if original is None or getattr(original, "_vlmfp_probe", False):
        return

    @functools.wraps(original)
    def preprocess(self, *args, **kwargs):
        start = time.perf_counter()
        result = None
        try:
            result = original(self, *args, **kwargs)
            return result
        finally:
            ms = (time.perf_counter() - start) * 1e3
            try:
                sys.stderr.write(
                    f"VLMFP_PROBE pid={os.getpid()} proc={tag} items={_count_items(args, kwargs)}"
                    f" ms={ms:.1f} fastpath={_applied_patches()} patches={_patches(result)}"
                    f" via={_via()} width={_width(result, args, tag)}\n"
                )
                sys.stderr.flush()
            except Exception:  # noqa: BLE001
                pass

    preprocess._vlmfp_probe = True  # type: ignore[attr-defined]
    setattr(cls, method, preprocess)


def _instrument(module) -> None:
    for class_name, tag, *method in TARGETS.get(module.__name__, ()):
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            try:
                _wrap(cls, tag, *method)
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
