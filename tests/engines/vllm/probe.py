"""Fresh-process scenarios for the vLLM suite; prints one JSON object on the last line.

Usage: ``python -m tests.engines.vllm.probe SCENARIO MODEL_DIR`` with SCENARIO one of
``plugin``, ``disabled``, ``threads``, ``device_normalize``. Run in a subprocess so each starts
from a clean import.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

KIMI = "vllm.model_executor.models.kimi_k25"
PROC = "vllm.transformers_utils.processor"
FUSED = "vllm.transformers_utils.processors.kimi_k25_vision_fused"
VIT = "vllm.model_executor.models.kimi_k25_vit"


def _import_what_a_server_imports() -> None:
    """The Kimi model module (the processor's door) and the chat renderer's vision-chunk
    resolution (the API server imports it at start)."""
    import importlib

    from vlm_fastpath.patches.vllm.vision_chunk_hash.renderers_chat_utils import resolution_home

    importlib.import_module(KIMI)
    importlib.import_module(resolution_home())


def _targets() -> dict[str, object]:
    """The vLLM objects our patches may replace (whichever this release has)."""
    out: dict[str, object] = {}
    for mod_name, names in (
        (PROC, ("get_image_processor", "cached_get_image_processor")),
        (KIMI, ("cached_get_image_processor", "KimiK25FusedVisionProcessor")),
        (FUSED, ("KimiK25FusedVisionProcessor",)),
    ):
        module = sys.modules.get(mod_name)
        for name in names:
            if module is not None and name in module.__dict__:
                out[f"{mod_name}.{name}"] = module.__dict__[name]
    for mod_name, cls_name, attrs in (
        (KIMI, "KimiK25ProcessingInfo", ("get_hf_processor",)),
        (KIMI, "KimiK25ForConditionalGeneration", ("__init__", "_parse_and_validate_media_input")),
        (VIT, "MoonViT3dPretrainedModel", ("forward",)),
        (VIT, "MoonViT3dEncoder", ("forward",)),
        (VIT, "MoonViTEncoderLayer", ("forward",)),
    ):
        cls = getattr(sys.modules.get(mod_name), cls_name, None)
        for attr in attrs:
            if cls is not None and attr in cls.__dict__:
                out[f"{mod_name}.{cls_name}.{attr}"] = cls.__dict__[attr]
    return out


def _statuses() -> dict[str, str]:
    import vlm_fastpath

    return {r["name"]: r["status"] for r in vlm_fastpath.status("vllm")}


def _processor_class(model_dir: Path) -> str:
    from fixtures.vllm_kimi_model import clear_processor_caches, processing_info

    clear_processor_caches()
    processor = processing_info(model_dir).image_processor
    return f"{type(processor).__module__}.{type(processor).__qualname__}"


def plugin(model_dir: Path) -> dict[str, object]:
    """Only the entry point arms the patches (the .pth door's watch is withdrawn first)."""
    from vlm_fastpath import _import_hook, activation

    if _import_hook._FINDER is not None:
        _import_hook._FINDER._watched.clear()
    assert "vllm" not in sys.modules and not activation._armed
    from importlib.metadata import entry_points

    eps = [f"{ep.name}={ep.value}" for ep in entry_points(group="vllm.general_plugins")]
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    load_general_plugins()  # vLLM calls it in several places: must be idempotent
    armed = sorted(activation._armed)
    _import_what_a_server_imports()
    return {
        "entry_points": eps,
        "armed": armed,
        "status": _statuses(),
        "processor": _processor_class(model_dir),
    }


def disabled(model_dir: Path) -> dict[str, object]:
    """VLM_FASTPATH=0 at start; then apply() and revert() in the same process."""
    assert os.environ.get("VLM_FASTPATH") == "0"
    _import_what_a_server_imports()
    import vlm_fastpath

    originals = _targets()
    result: dict[str, object] = {
        "status_off": _statuses(),
        "processor_off": _processor_class(model_dir),
    }
    os.environ["VLM_FASTPATH"] = "1"
    vlm_fastpath.apply("vllm")
    result["status_on"] = _statuses()
    result["processor_on"] = _processor_class(model_dir)
    result["changed_on"] = sorted(k for k, v in _targets().items() if originals.get(k) is not v)
    vlm_fastpath.revert("vllm")
    after = _targets()
    result["restored"] = sorted(k for k in originals if after.get(k) is originals[k])
    result["not_restored"] = sorted(k for k in originals if after.get(k) is not originals[k])
    result["processor_reverted"] = _processor_class(model_dir)
    return result


def threads(model_dir: Path) -> dict[str, object]:
    """Two threads use the processor vLLM hands out at once, under the workqueue layer."""
    import importlib

    import numpy as np
    import torch
    from PIL import Image

    from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
    from fixtures.vllm_kimi_model import processing_info

    importlib.import_module(KIMI)
    processor = processing_info(model_dir).image_processor
    rng = np.random.default_rng(0)

    def image(w: int, h: int) -> dict[str, object]:
        pixels = rng.integers(0, 256, (h, w, 3), np.uint8)
        return {"type": "image", "image": Image.fromarray(pixels)}

    # One-image batches take the parallel kernel; several images also the resize pool.
    batches = [
        [image(1400, 1100)],
        [image(1200, 1300)],
        [image(640, 480), image(333, 517), image(1000, 700)],
        [image(800, 600), image(517, 333)],
    ]
    expected = [ref_preprocess(b, KIMI_K25_CFG)[0] for b in batches]
    errors: list[str] = []
    start = threading.Barrier(2)

    def work(i: int) -> None:
        try:
            start.wait()
            for step in range(8):
                k = (i + 2 * step) % len(batches)
                out = processor.preprocess(batches[k], return_tensors="pt")
                if not torch.equal(out["pixel_values"], expected[k]):
                    errors.append(f"thread {i}: batch {k} output differs")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    from vlm_fastpath.kimi_integration.patchify_kernel import backend_info

    return {
        "processor": type(processor).__name__,
        "errors": errors,
        "backend": backend_info(),
        "env_layer": os.environ.get("NUMBA_THREADING_LAYER"),
    }


def device_normalize(model_dir: Path) -> dict[str, object]:
    """With whatever VLM_FASTPATH_SKIP says: statuses and the dtype vLLM's processor emits."""
    import importlib

    import numpy as np
    from PIL import Image

    from fixtures.vllm_kimi_model import MEDIA_PAD, clear_processor_caches, processing_info

    importlib.import_module(KIMI)
    import vlm_fastpath

    clear_processor_caches()
    info = processing_info(model_dir)
    pixels = np.random.default_rng(0).integers(0, 256, (200, 300, 3), np.uint8)
    medias = [{"type": "image", "image": Image.fromarray(pixels)}]
    out = info.get_hf_processor()(text=MEDIA_PAD, vision_chunks=medias, return_tensors="pt")
    kimi = sys.modules[KIMI]
    model_cls = kimi.KimiK25ForConditionalGeneration
    wrapped = [
        name
        for name, fn in (
            ("get_hf_processor", kimi.KimiK25ProcessingInfo.__dict__["get_hf_processor"]),
            ("__init__", model_cls.__dict__["__init__"]),
            ("_parse", model_cls.__dict__["_parse_and_validate_media_input"]),
        )
        if hasattr(fn, "__vlm_fastpath_original__")
    ]
    return {
        "status": _statuses(),
        "reasons": {r["name"]: r["reason"] for r in vlm_fastpath.status("vllm")},
        "dtype": str(out["pixel_values"].dtype),
        "wrapped": wrapped,
    }


def main() -> None:
    scenario, model_dir = sys.argv[1], Path(sys.argv[2])
    scenarios = {
        "plugin": plugin,
        "disabled": disabled,
        "threads": threads,
        "device_normalize": device_normalize,
    }
    result = scenarios[scenario](model_dir)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
