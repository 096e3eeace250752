"""Handing an HF processor to an engine: the view with our twin, and what the status says.

The engine patches call :func:`serve` where the engine resolves or calls a model's HF processor,
whatever the model: where the processor holds an image (or video) processor of a class we mirror,
the engine gets the view with the twin (:mod:`.twins`), and the patch's status records, per model,
that it serves it, or why it keeps the engine's processor (the probes differ, or the engine
preprocesses on a device, where the twin hands every call back to the engine's code). Only a
served model's processor is offered to the decode layer: work started for a processor no call
will take would only cost CPU.
"""

from __future__ import annotations

from typing import Any

from ...settings import cpu_preprocess
from .switches import active
from .twins import TwinKind, logger, runs_on_device


def serve(hf_processor: Any, kind: TwinKind, patch: str, *, model: str,
          device: Any = None, device_note: str = "") -> Any:
    """``hf_processor``, or its view with the twin of its ``kind.attr`` (recorded under
    ``model`` in ``patch``'s status). ``device``: where the engine asks the processor to run
    (``device_note`` says which setting decides it); never raises."""
    held = kind.held(hf_processor)
    if held is None or not (kind.is_twin(held) or kind.mirrors(held)):
        return hf_processor  # nothing we mirror: not this patch's model
    try:
        view = kind.processor_view(hf_processor, patch)
    except Exception as exc:  # noqa: BLE001 - never fail the engine over our processor
        logger.warning("vlm_fastpath: %s: keeping the engine's processor (%r)", patch, exc)
        return hf_processor
    twin = kind.held(view)
    what = model or type(hf_processor).__name__
    from ..core.registry import REGISTRY

    if not kind.is_twin(twin):
        _, reason = kind.twin_of(held, patch)  # decided (and cached) by processor_view
        REGISTRY.note_model(patch, what, reason or "not mirrored")
    elif runs_on_device(device) and not cpu_preprocess():
        REGISTRY.note_model(patch, what, device_note or f"the engine preprocesses on {device}")
    else:
        REGISTRY.note_model(patch, what)
        offer = twin._vlm_offer
        if offer is not None and active(patch):
            offer.offer()  # the engine's loader may start it on its next image
    return view
