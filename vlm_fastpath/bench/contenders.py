"""Who runs: our processors, and whatever the installed engine would hand out instead.

Every engine contender is probed at run time (importlib), so a missing engine, a missing
optional dependency or a renamed class turns into an "absent" note with its reason, never a
crash. Each contender maps a list of PIL images to the tensors the model consumes.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from PIL import Image

from .checkpoints import KIMI_K25_MEDIA_CFG, QWEN25_VL_CFG

Tensors = tuple[torch.Tensor, ...]
RunFn = Callable[[Sequence[Image.Image]], Tensors]

OURS = "vlm-fastpath"

_GRID_KEYS = ("grid_thws", "image_grid_thw", "grid_thw")


@dataclass
class Contender:
    """One processor under test; ``baseline`` marks the engine's default (speedups are vs it)."""

    name: str
    run: RunFn
    origin: str
    ours: bool = False
    baseline: bool = False


@dataclass(frozen=True)
class Absent:
    """A contender that could not take part, and why (shown to the user, kept in the JSON)."""

    family: str
    name: str
    reason: str


@dataclass
class Family:
    """The contenders for one model's image processor (outputs are comparable within it)."""

    name: str
    title: str
    contenders: list[Contender] = field(default_factory=list)
    absent: list[Absent] = field(default_factory=list)

    def note_absent(self, name: str, reason: str) -> None:
        self.absent.append(Absent(self.name, name, reason))


def _tensors(out: Mapping[str, Any]) -> Tensors:
    """pixel_values plus the grid, whatever the processor calls it: what exactness compares."""
    pixels = torch.as_tensor(out["pixel_values"])
    for key in _GRID_KEYS:
        if key in out:
            return pixels, torch.as_tensor(out[key])
    return (pixels,)


def _version(module: str) -> str:
    try:
        return str(importlib.import_module(module).__version__)
    except Exception:  # noqa: BLE001 - a version is decoration only
        return "?"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# -- Kimi K2.5 ------------------------------------------------------------------------------
def _kimi_medias(images: Sequence[Image.Image]) -> list[dict[str, Any]]:
    # A fresh dict per call: vLLM's processor rewrites the media dicts it is given.
    return [{"type": "image", "image": image} for image in images]


def _kimi_ours() -> Contender:
    from ..kimi_integration import FusedKimiProcessor

    processor = FusedKimiProcessor(dict(KIMI_K25_MEDIA_CFG))

    def run(images: Sequence[Image.Image]) -> Tensors:
        return _tensors(processor.preprocess(_kimi_medias(images), return_tensors="pt"))

    return Contender(OURS, run, "vlm_fastpath.kimi_integration.FusedKimiProcessor", ours=True)


def _kimi_vllm() -> Contender | str:
    """vLLM's KimiK25FusedVisionProcessor (0.25+), or why it cannot run here."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed"
    module_name = "vllm.transformers_utils.processors.kimi_k25_vision_fused"
    try:
        module = importlib.import_module(module_name)
        cls = module.KimiK25FusedVisionProcessor
    except Exception as exc:  # noqa: BLE001 - older vLLM, broken install: no row
        return f"vLLM {_version('vllm')} has no fused Kimi processor ({_describe(exc)})"
    if str(getattr(cls, "__module__", "")).startswith("vlm_fastpath"):
        return "vLLM's class is already replaced by vlm-fastpath in this process"
    try:
        from vllm.utils.import_utils import is_numba_available

        if not is_numba_available():
            return "vLLM's fused Kimi processor needs numba, which is not installed"
    except ImportError:
        pass
    try:
        processor = cls(dict(KIMI_K25_MEDIA_CFG))
    except Exception as exc:  # noqa: BLE001
        return f"could not build vLLM's KimiK25FusedVisionProcessor ({_describe(exc)})"

    def run(images: Sequence[Image.Image]) -> Tensors:
        return _tensors(processor.preprocess(_kimi_medias(images), return_tensors="pt"))

    origin = f"vllm {_version('vllm')} {module_name}.KimiK25FusedVisionProcessor"
    return Contender("vllm-fused", run, origin, baseline=True)


def kimi_family() -> Family:
    family = Family("kimi", "Kimi K2.5 (MoonViT) image preprocessing")
    engine = _kimi_vllm()
    if isinstance(engine, str):
        family.note_absent("vllm-fused", engine)
    else:
        family.contenders.append(engine)
    family.contenders.append(_kimi_ours())
    return family


# -- Qwen2/2.5-VL ---------------------------------------------------------------------------
def _call_images(processor: Any, images: Sequence[Image.Image]) -> Mapping[str, Any]:
    try:
        return processor(images=list(images), return_tensors="pt")
    except TypeError:
        return processor.preprocess(list(images), return_tensors="pt")


def _qwen_class() -> type | str:
    """``FastQwen2VLImageProcessor``, or why it cannot be imported here."""
    try:
        from ..qwen_integration import FastQwen2VLImageProcessor
    except Exception as exc:  # noqa: BLE001 - the bench reports it and goes on
        return f"vlm_fastpath.qwen_integration failed to import ({_describe(exc)})"
    return FastQwen2VLImageProcessor


def _qwen_ours(cls: type, hf_processor: Any, hf_class: str) -> Contender | str:
    """Ours, set up like ``hf_processor`` (same limits, same torchvision or PIL arithmetic)."""
    try:
        processor = cls.from_hf(hf_processor)
    except Exception as exc:  # noqa: BLE001
        return f"{cls.__name__} cannot mirror {hf_class} ({_describe(exc)})"

    def run(images: Sequence[Image.Image]) -> Tensors:
        return _tensors(_call_images(processor, images))

    return Contender(OURS, run, f"{cls.__module__}.{cls.__name__}", ours=True)


def _qwen_hf(class_name: str) -> Any:
    cls = getattr(importlib.import_module("transformers"), class_name)
    skip = ("image_processor_type", "processor_class")
    return cls(**{k: v for k, v in QWEN25_VL_CFG.items() if k not in skip})


# transformers 5: the torchvision processor is what engines get from AutoImageProcessor; the
# PIL one is what SGLang's --image-processor-backend pil selects. Ours mirrors each in turn.
_QWEN_BACKENDS = (
    ("qwen-tv", "Qwen2VLImageProcessor", "hf-torchvision"),
    ("qwen-pil", "Qwen2VLImageProcessorPil", "hf-pil"),
)


def qwen_families() -> list[Family]:
    """One family per transformers backend: each pairs that processor with ours mirroring it."""
    cls = _qwen_class()
    if isinstance(cls, str):
        family = Family("qwen", "Qwen2/2.5-VL image preprocessing")
        family.note_absent(OURS, cls)
        return [family]
    if importlib.util.find_spec("transformers") is None:
        family = Family("qwen", "Qwen2/2.5-VL image preprocessing")
        family.note_absent("transformers", "transformers is not installed")
        return [family]
    families = []
    for family_name, class_name, label in _QWEN_BACKENDS:
        family = Family(family_name, f"Qwen2.5-VL image preprocessing ({class_name})")
        families.append(family)
        try:
            hf_processor = _qwen_hf(class_name)
        except Exception as exc:  # noqa: BLE001 - e.g. torchvision missing
            version = _version("transformers")
            family.note_absent(label, f"transformers {version} {class_name}: {_describe(exc)}")
            continue
        ours = _qwen_ours(cls, hf_processor, class_name)
        if isinstance(ours, str):
            family.note_absent(OURS, ours)
            continue

        def run(images: Sequence[Image.Image], hf: Any = hf_processor) -> Tensors:
            return _tensors(hf(images=list(images), return_tensors="pt"))

        origin = f"transformers {_version('transformers')} {class_name}"
        family.contenders += [Contender(label, run, origin, baseline=True), ours]
    return families


FAMILIES: dict[str, Callable[[], list[Family]]] = {
    "kimi": lambda: [kimi_family()],
    "qwen": qwen_families,
}


def discover(names: Sequence[str]) -> list[Family]:
    """The families asked for, each with its present contenders and absent notes."""
    return [family for name in names for family in FAMILIES[name]()]
