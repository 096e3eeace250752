"""Reading a tensor's pixels on the host, for both processors' input checks.

A tensor can have a shape and a dtype yet no readable data: on the ``meta`` device (shapes
only), in a sparse or other non-strided layout, or a tensor subclass whose storage is fake.
Such a tensor is bad input, so it must fail as the processor's input error (a 400 in the
engines), never as a torch ``RuntimeError``/``NotImplementedError`` that run-time containment
would count against the patch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def host_numpy(tensor: Any, error: type[Exception]) -> np.ndarray:
    """A host numpy view of ``tensor``'s data; ``error`` names why there is none."""
    shape = tuple(getattr(tensor, "shape", ()))
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device == "meta":
        raise error(
            f"pixel tensor of shape {shape} is on the 'meta' device and holds no data; pass "
            "a tensor with real pixels"
        )
    layout = str(getattr(tensor, "layout", "torch.strided"))
    if layout != "torch.strided":
        raise error(
            f"pixel tensor of shape {shape} has layout {layout}; pass a dense (strided) tensor"
        )
    try:
        return tensor.detach().cpu().numpy()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        dtype = getattr(tensor, "dtype", "?")
        raise error(f"cannot read pixels from {dtype} tensor of shape {shape}: {exc}") from exc
