"""SGLang on the CPU for tests and repository benchmarks: set-up, stubs, tiny MoonViT, items.

The engine-neutral transfer recorder lives in ``tests/support/transfers.py``. Nothing here
imports SGLang at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Iterator

import torch

from .transfers import TransferRecorder, reference_varlen_attention  # noqa: F401


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_SETUP_DONE = False


def server_args_sealed() -> bool:
    """True from SGLang 0.5.23: ``ServerArgs`` is a msgspec Struct, sealed once published
    (built with its constructor, changed by publishing another); a dataclass before."""
    from sglang.srt.server_args import ServerArgs

    return not dataclasses.is_dataclass(ServerArgs)


def publish_server_args(mm_attention_backend: str = "fa3") -> object:
    """Publish minimal CPU server args as this process's (SGLang's last publish wins).

    Up to 0.5.22 ``ServerArgs`` is a dataclass whose ``__post_init__`` resolves against a real
    checkpoint, so the fields are filled from their defaults on a bare instance. 0.5.23 made it
    a msgspec Struct (``object.__new__`` refused) resolved when published; its resolution
    pipeline skips the model for ``model_path="dummy"``.
    """
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    settings = {"device": "cpu", "mm_attention_backend": mm_attention_backend,
                "mm_enable_dp_encoder": False}
    if not server_args_sealed():
        args = ServerArgs.__new__(ServerArgs)
        for field in dataclasses.fields(ServerArgs):
            if field.default is not dataclasses.MISSING:
                setattr(args, field.name, field.default)
            elif field.default_factory is not dataclasses.MISSING:
                setattr(args, field.name, field.default_factory())
        args.model_path = "vlm-fastpath-test"
        for name, value in settings.items():
            setattr(args, name, value)
    else:
        args = ServerArgs(model_path="dummy", **settings)
    set_global_server_args_for_scheduler(args)
    return args


def setup_sglang_cpu(mm_attention_backend: str = "fa3") -> None:
    """Publish minimal server args and a one-process gloo TP group (idempotent)."""
    global _SETUP_DONE
    if _SETUP_DONE:
        return
    import inspect

    publish_server_args(mm_attention_backend)

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


@contextlib.contextmanager
def _attention_backend(backend: str) -> Iterator[None]:
    """The published server args' ``mm_attention_backend`` set to ``backend`` inside."""
    if server_args_sealed():
        publish_server_args(backend)
        try:
            yield
        finally:
            publish_server_args()
        return
    from sglang.srt import server_args as sa

    args = (getattr(sa, "get_global_server_args", None) or sa.get_server_args)()
    saved = args.mm_attention_backend
    args.mm_attention_backend = backend
    try:
        yield
    finally:
        args.mm_attention_backend = saved


def build_kimi_k25(num_layers: int = 27, seed: int = 0, backend: str = "fa3"):
    """A ``KimiK25ForConditionalGeneration`` holding the real MoonViT tower and projector.

    Built without a language model (the encoder path needs none); FA3 forced via ``fa3_stub``
    at construction time, or ``backend="sdpa"``: the SDPA vision backend (server args'
    ``mm_attention_backend`` set for the construction only). Returns the model in float32 on
    the CPU.
    """
    import sglang.srt.models.kimi_k25 as kimi

    setup_sglang_cpu()
    torch.manual_seed(seed)
    cfg = tiny_moonvit_config(num_layers)
    if backend == "fa3":
        with fa3_stub(None):
            tower = kimi.MoonViT3dPretrainedModel(cfg, use_data_parallel=True)
    else:
        with _attention_backend(backend):
            tower = kimi.MoonViT3dPretrainedModel(cfg, use_data_parallel=True)
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
