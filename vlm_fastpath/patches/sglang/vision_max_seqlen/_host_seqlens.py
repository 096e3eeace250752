"""Host-side sequence lengths handed from the MoonViT encoder to the vision attention backends.

Values of these types are computed once per encoder forward on the host; only they are trusted
by the patched backends, so a value another model passes for another purpose is never
reinterpreted.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any


class HostMaxSeqlen(int):
    """A ``max_seqlen`` computed on the host once per encoder forward.

    Only values of this type are trusted by the patched vision attention backends, so a
    ``max_seqlen`` some other model passes for another purpose is never reinterpreted.
    """


class HostSeqlens:
    """The host ``grid_thws`` of the MoonViT encoder forward running in this context.

    Set by ``sglang-moonvit-sdpa-host-cu-seqlens`` around ``MoonViT3dEncoder.forward`` (only for a
    host grid); read by the SDPA vision backend, which builds its mask from these host
    ``cu_seqlens`` instead of copying the device ``cu_seqlens`` back (computed once per forward,
    on first use, so nothing is read unless a backend needs it).
    """

    def __init__(self, grid_thws: Any) -> None:
        self._grid = grid_thws
        self._cu: tuple[int, ...] | None = None
        self._tensor: Any = None
        self._on_device: dict[tuple[int, str], tuple[Any, Any]] = {}

    def cu_seqlens(self) -> tuple[int, ...]:
        if self._cu is None:
            from itertools import accumulate

            lengths = [int(t) * int(h) * int(w) for t, h, w in self._grid.tolist()]
            self._cu = (0, *accumulate(lengths))
        return self._cu

    def cu_seqlens_tensor(self) -> Any:
        """The same values as a host int32 tensor (what the release's mask builder reads)."""
        if self._tensor is None:
            import torch

            self._tensor = torch.tensor(self.cu_seqlens(), dtype=torch.int32)
        return self._tensor

    def on_device(self, host_tensor: Any, device: Any) -> Any:
        """``host_tensor`` on ``device``, copied once per encoder forward, non-blocking.

        The release copies the SDPA mask it built on the host to the device in every block with
        a blocking ``.to(device)``: on CUDA each is a sync (27 per MoonViT forward, seen on an
        H200). A non-blocking copy from pageable memory is staged at once, so the host tensor may
        go; the blocks then get the device copy, whose ``.to(device)`` is a no-op.
        """
        key = (id(host_tensor), str(device))
        hit = self._on_device.get(key)
        if hit is not None and hit[0] is host_tensor:
            return hit[1]
        copy = host_tensor.to(device, non_blocking=True)
        self._on_device[key] = (host_tensor, copy)
        return copy


HOST_SEQLENS: ContextVar[HostSeqlens | None] = ContextVar(
    "vlm_fastpath_host_seqlens", default=None
)
