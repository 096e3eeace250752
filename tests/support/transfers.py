"""CPU stand-ins that make SGLang's transfers observable (tests and benchmarks; not a patch).

``TransferRecorder`` is a ``TorchFunctionMode`` that simulates an accelerator on the CPU:
a ``.to(device)``/``.copy_`` whose destination is a ``torch.device`` object (or a device string
other than ``"cpu"``) counts as a host-to-device copy and marks its result as device-resident;
results of ops on device-resident inputs stay device-resident; ``.item()``, ``.tolist()``,
``.cpu()``, ``.numpy()``, ``.to("cpu")`` and ``int()/float()/bool()`` of a device-resident tensor
count as device-to-host syncs. The ``meta`` device is mapped to the CPU so values stay real.
Nothing here imports SGLang at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_SYNC_METHODS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__int__: "int",
    torch.Tensor.__float__: "float",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.__index__: "index",
}


class _IdentitySet:
    """A weak set of tensors by identity (``WeakSet`` would compare tensors with ``==``)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, tensor: torch.Tensor) -> None:
        key = id(tensor)
        if key not in self._refs or self._refs[key]() is not tensor:
            self._refs[key] = weakref.ref(tensor, lambda _, k=key: self._refs.pop(k, None))

    def __contains__(self, tensor: object) -> bool:
        ref = self._refs.get(id(tensor))
        return ref is not None and ref() is tensor


@dataclasses.dataclass
class H2DCopy:
    nbytes: int
    non_blocking: bool
    pinned: bool


class TransferRecorder(TorchFunctionMode):
    """Counts host-to-device copies and device-to-host syncs of the code run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self._device = _IdentitySet()
        self.h2d: list[H2DCopy] = []
        self.syncs: list[str] = []
        self._paused = 0

    # -- helpers -------------------------------------------------------------------------
    def on_device(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor in self._device

    def mark(self, obj: Any) -> Any:
        for leaf in tree_flatten(obj)[0]:
            if isinstance(leaf, torch.Tensor):
                self._device.add(leaf)
        return obj

    def place(self, module: torch.nn.Module) -> torch.nn.Module:
        """Mark a module's parameters and buffers as device-resident."""
        for tensor in [*module.parameters(), *module.buffers()]:
            self._device.add(tensor)
        return module

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run a stand-in kernel: device-resident results, no syncs recorded."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def reset(self) -> None:
        self.h2d.clear()
        self.syncs.clear()

    @property
    def sync_count(self) -> int:
        return len(self.syncs)

    # -- the mode ------------------------------------------------------------------------
    @staticmethod
    def _destination(func, args, kwargs) -> Any:
        if func is torch.Tensor.to:
            if "device" in kwargs:
                return kwargs["device"]
            for arg in args[1:]:
                if isinstance(arg, (torch.device, str)):
                    return arg
                if isinstance(arg, torch.Tensor):
                    return arg.device
            return None
        if func is torch.Tensor.cuda:
            return torch.device("meta")
        return None

    @staticmethod
    def _is_host(dest: Any) -> bool:
        return isinstance(dest, str) and dest.split(":")[0] == "cpu"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        from_device = any(x in self._device for x in leaves)
        dest = self._destination(func, args, kwargs)
        if dest is not None and not self._is_host(dest):
            source = args[0]
            call_kwargs = dict(kwargs)
            call_kwargs.pop("device", None)
            call_args = tuple(
                a for a in args[1:] if not isinstance(a, (torch.device, str, torch.Tensor))
            )
            if func is torch.Tensor.cuda:
                call_args, call_kwargs = (), {}
            non_blocking = bool(call_kwargs.pop("non_blocking", False))
            call_kwargs.pop("copy", None)
            out = source.to(*call_args, **call_kwargs)
            if source not in self._device and not self._paused:
                self.h2d.append(H2DCopy(source.numel() * source.element_size(), non_blocking,
                                        bool(source.is_pinned())))
                out = out.clone() if out is source else out
            return self.mark(out)
        if from_device and not self._paused:
            kind = _SYNC_METHODS.get(func)
            if kind is None and func is torch.Tensor.to and self._is_host(dest or ""):
                kind = "to-cpu"
            if kind is not None:
                self.syncs.append(kind)
        if func is torch.Tensor.copy_ and len(args) > 1:
            if args[0] in self._device and args[1] not in self._device and not self._paused:
                src = args[1]
                self.h2d.append(H2DCopy(src.numel() * src.element_size(),
                                        bool(kwargs.get("non_blocking", False)),
                                        bool(src.is_pinned())))
        kwargs = tree_map(
            lambda x: torch.device("cpu")
            if isinstance(x, torch.device) and x.type == "meta"
            else ("cpu" if x == "meta" else x),
            kwargs,
        ) if "device" in kwargs else kwargs
        out = func(*args, **kwargs)
        if from_device and func not in _SYNC_METHODS:
            if func is torch.Tensor.to and self._is_host(dest or ""):
                # a real .to("cpu") of a device tensor is a new host tensor
                return out.clone() if out is args[0] else out
            self.mark(out)
        elif from_device and func is torch.Tensor.cpu and out is args[0]:
            out = out.clone()  # a host copy, not the device tensor (on the CPU .cpu() is self)
        return out


def reference_varlen_attention(recorder: TransferRecorder | None):
    """A stand-in for ``flash_attn_varlen_func``/``flash_attn_func`` (exact SDPA per segment).

    It reads ``cu_seqlens`` freely (a real kernel does so on the device, without a sync).
    """

    def varlen(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
               max_seqlen_k=None, softmax_scale=None, **_):
        ctx = recorder.paused() if recorder is not None else contextlib.nullcontext()
        with ctx:
            if cu_seqlens_q is None:
                bounds = [0, q.shape[0] * (q.shape[1] if q.dim() == 4 else 1)]
                q, k, v = (x.reshape(-1, *x.shape[-2:]) for x in (q, k, v))
            else:
                bounds = [int(b) for b in cu_seqlens_q.tolist()]
            out = torch.empty_like(q)
            for start, end in zip(bounds[:-1], bounds[1:], strict=True):
                qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))
                out[start:end] = torch.nn.functional.scaled_dot_product_attention(
                    qs, ks, vs, scale=softmax_scale
                ).transpose(0, 1)
        return recorder.mark(out) if recorder is not None else out

    return varlen
