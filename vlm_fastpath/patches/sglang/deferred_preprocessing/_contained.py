"""Run-time containment for deferred preprocessing, on both sides of the boundary.

Sender: a fault while building payloads hands the request back to the release's own call (the
``deferring_call`` protocol: ``None`` means "run the release's"), which preprocesses eagerly.
Owner: the release's ``get_image_feature`` cannot read payloads, so a fault in the owner's
device backend is answered by the reference path of the same payload: the K2.5 recipe's
Pillow backend (equal to the eager pixels, ``torch.equal``) or the K3 recipe on the CPU (equal
to the release's functions), then moved to the device. Neither side changes state before it
could fail: payloads are built or read, never modified.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ...core.containment import call_contained, contained
from ._shared import check_grids, materialize_payloads, merge_payloads, owner_processor


def _hand_back(*_args: Any, **_kwargs: Any) -> None:
    return None  # the release's own call answers


def contained_sender(patch: str, deferred_call: Callable[..., Any]) -> Callable[..., Any]:
    """``deferred_call`` that answers ``None`` (the release's path) after a fault."""
    return contained(patch, _hand_back)(deferred_call)


def reference_materialize(payloads: Sequence[Any], device: Any, grid: Any, label: str) -> Any:
    """The payloads' pixels by the reference backend on the CPU, then moved to ``device``."""
    payload = merge_payloads(list(payloads))
    proc = owner_processor(payload)
    backend = "pillow" if payload.recipe == "k25" else "auto"
    out = proc.run(payload, device="cpu", resize_backend=backend)
    check_grids(out["grid_thws"], grid, label)
    return out["pixel_values"].to(device)


def contained_materialize(
    patch: str, payloads: Sequence[Any], device: Any, grid: Any, label: str
) -> Any:
    """``materialize_payloads`` answered by :func:`reference_materialize` after a fault."""
    return call_contained(
        patch,
        functools.partial(materialize_payloads, payloads, device, grid, label),
        functools.partial(reference_materialize, payloads, device, grid, label),
        where="materialize_payloads",
    )
