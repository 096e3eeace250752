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
import socket
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_SETUP_DONE = False


def setup_sglang_cpu(mm_attention_backend: str = "fa3") -> None:
    """Publish minimal server args and a one-process gloo TP group (idempotent)."""
    global _SETUP_DONE
    if _SETUP_DONE:
        return
    import inspect

    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs.__new__(ServerArgs)
    for field in dataclasses.fields(ServerArgs):
        if field.default is not dataclasses.MISSING:
            setattr(args, field.name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(args, field.name, field.default_factory())
    args.model_path = "vlm-fastpath-test"
    args.device = "cpu"
    args.mm_attention_backend = mm_attention_backend
    args.mm_enable_dp_encoder = False
    set_global_server_args_for_scheduler(args)

    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(
        backend="gloo",
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
    )
    if "backend" in inspect.signature(initialize_model_parallel).parameters:
        initialize_model_parallel(backend="gloo")
    else:
        initialize_model_parallel()
    _SETUP_DONE = True


@contextlib.contextmanager
def fa3_stub(recorder: TransferRecorder | None) -> Iterator[None]:
    """Force the FA3 vision backend on CPU with a stand-in kernel (as SGLang's tests do)."""
    import sglang.srt.layers.attention.vision as vision

    kernel = reference_varlen_attention(recorder)
    saved = {name: vision.__dict__.get(name, _MISSING) for name in _FA_NAMES}
    vision._is_cuda = True
    vision.flash_attn_varlen_func = kernel
    vision.flash_attn_func = kernel
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                vision.__dict__.pop(name, None)
            else:
                setattr(vision, name, value)


_MISSING = object()
_FA_NAMES = ("_is_cuda", "flash_attn_varlen_func", "flash_attn_func")


def tiny_moonvit_config(num_layers: int = 27):
    from sglang.srt.configs.kimi_k25 import KimiK25VisionConfig

    cfg = KimiK25VisionConfig(
        num_hidden_layers=num_layers,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        patch_size=14,
        init_pos_emb_height=8,
        init_pos_emb_width=8,
        mm_hidden_size=32,
        text_hidden_size=48,
    )
    if not hasattr(cfg, "vt_hidden_size"):
        cfg.vt_hidden_size = cfg.hidden_size  # set by the full KimiK25Config in the engine
    return cfg


def build_kimi_k25(num_layers: int = 27, seed: int = 0, backend: str = "fa3"):
    """A ``KimiK25ForConditionalGeneration`` holding the real MoonViT tower and projector.

    Built without a language model (the encoder path needs none); FA3 forced via ``fa3_stub``
    at construction time, or ``backend="sdpa"``: the SDPA vision backend (server args'
    ``mm_attention_backend`` set for the construction only). Returns the model in float32 on
    the CPU.
    """
    import sglang.srt.models.kimi_k25 as kimi
    from sglang.srt import server_args as sa

    setup_sglang_cpu()
    torch.manual_seed(seed)
    cfg = tiny_moonvit_config(num_layers)
    if backend == "fa3":
        with fa3_stub(None):
            tower = kimi.MoonViT3dPretrainedModel(cfg, use_data_parallel=True)
    else:
        args = (getattr(sa, "get_global_server_args", None) or sa.get_server_args)()
        saved = args.mm_attention_backend
        args.mm_attention_backend = backend
        try:
            tower = kimi.MoonViT3dPretrainedModel(cfg, use_data_parallel=True)
        finally:
            args.mm_attention_backend = saved
    model = kimi.KimiK25ForConditionalGeneration.__new__(kimi.KimiK25ForConditionalGeneration)
    torch.nn.Module.__init__(model)
    model.vision_tower = tower
    model.mm_projector = kimi.K2VLMultiModalProjector(cfg)
    model.use_data_parallel = False
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.05)
    return model.eval()


def kimi_items(grids: list[tuple[int, int, int]], seed: int = 0, patch: int = 14):
    """Real ``MultimodalDataItem`` image items with Kimi features ``[N, 3, p, p]``."""
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

    gen = torch.Generator().manual_seed(seed)
    items = []
    for t, h, w in grids:
        feature = torch.randn(t * h * w, 3, patch, patch, generator=gen)
        items.append(
            make_item(
                MultimodalDataItem,
                Modality.IMAGE,
                feature,
                {"image_grid_thw": torch.tensor([[t, h, w]], dtype=torch.long)},
            )
        )
    return items


def make_item(item_cls, modality, feature, model_specific_data):
    """Build a ``MultimodalDataItem`` across releases (dataclass or msgspec Struct)."""
    try:
        item = item_cls(modality=modality, feature=feature)
    except TypeError:
        item = item_cls(modality=modality)
        item.feature = feature
    item.model_specific_data = dict(model_specific_data)
    return item
