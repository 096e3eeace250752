"""Kimi K3 deferred preprocessing on sglang 0.5.17 through the release's own functions.

Eager: the release's ``KimiK3GPUProcessorWrapper._gpu_call`` (the GPU path 0.5.18 defers),
run on the CPU: its ``_k3_to_cuda_chw`` is swapped for the same staging without ``.cuda()``;
everything else (bicubic antialias resize, ``_fill_transparent_bg``, normalize, patchify) is
the release's code. Deferred: the same wrapper with ``VLM_FASTPATH_DEFER=1``. Both outputs go
through the release's item collection, offsets, per-image split, a pickle round trip and
``KimiK3ForConditionalGeneration.get_image_feature``; the ``pixel_values`` its vision tower
receives must be ``torch.equal``. The tower is a recording stand-in (the release's method
hands it the materialized ``pixel_values``; its own layers are not what is under test).
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from tests.kimi_integration.cases import K3_CFG as CFG
from tests.kimi_integration.cases import K3_CHESSBOARD as CHESSBOARD
from vlm_fastpath.patches import REGISTRY

from .pipeline import release_items

SENDER = "sglang-kimi-k3-deferred-sender"
OWNER = "sglang-kimi-k3-deferred-owner"
KEY = "_vlm_fastpath_kimi_k3_deferred"
TOKEN = "<|media_pad|>"
TOKEN_ID = 163605
EXPECTED = {"0.5.17": "applied", "0.5.23": "upstream"}  # older releases: no K3 module
BACKGROUNDS = {"chessboard": CHESSBOARD, "white": {"pattern": "white"},
               "black": {"pattern": "black"}, "gray": {"pattern": "gray"}, "none": None,
               "chessboard-off": dict(CHESSBOARD, chessboard_square_on_top_left=False,
                                      chessboard_square_size=5)}


def _encoded(image: Image.Image, fmt: str) -> Image.Image:
    buf = io.BytesIO()
    image.save(buf, format=fmt, quality=90) if fmt == "JPEG" else image.save(buf, format=fmt)
    buf.seek(0)
    return Image.open(buf)


def _images():
    rng = np.random.default_rng(7)
    rgb = Image.fromarray(rng.integers(0, 256, (250, 300, 3), dtype=np.uint8))
    rgba_arr = rng.integers(0, 256, (230, 310, 4), dtype=np.uint8)
    rgba_arr[:40, :, 3] = 0
    rgba_arr[40:80, :, 3] = 255
    rgba = Image.fromarray(rgba_arr, mode="RGBA")
    gray = Image.fromarray(rng.integers(0, 256, (200, 260), dtype=np.uint8), mode="L")
    return {
        "jpeg": _encoded(rgb, "JPEG"),
        "png": _encoded(rgb, "PNG"),
        "rgba": _encoded(rgba, "PNG"),
        "gray": _encoded(gray, "PNG"),
        "tensor": torch.from_numpy(np.asarray(rgb)).permute(2, 0, 1).contiguous(),
    }


class _Tokenizer:
    def encode(self, text, **_kwargs):
        ids = []
        for i, part in enumerate(text.split(TOKEN)):
            if i:
                ids.append(TOKEN_ID)
            ids.extend(ord(c) for c in part)
        return ids


class _HF:
    image_processor = None
    media_processor = None
    tokenizer = _Tokenizer()


def _wrapper(bg, cfg=CFG):
    import sglang.srt.multimodal.processors.kimi_k3 as proc

    wrapper = proc.KimiK3GPUProcessorWrapper(
        _HF(), image_token=TOKEN, image_token_id=TOKEN_ID, patch_size=cfg["patch_size"],
        merge_kernel_size=cfg["merge_kernel_size"], in_patch_limit=cfg["in_patch_limit"],
        patch_limit_on_one_side=cfg["patch_limit_on_one_side"],
        fixed_output_tokens=cfg["fixed_output_tokens"], image_mean=cfg["image_mean"],
        image_std=cfg["image_std"], transparent_bg_config=bg,
    )
    wrapper._get_gpu_norm_tensors(device="cpu")  # cached: the eager path then runs on CPU
    return wrapper


def _cpu_chw(image):
    """The release's ``_k3_to_cuda_chw`` staging without the ``.cuda()``."""
    if isinstance(image, Image.Image):
        has_alpha = image.mode != "RGB" and ("A" in image.getbands()
                                             or "transparency" in image.info)
        arr = np.asarray(image.convert("RGBA" if has_alpha else "RGB"))
        return torch.from_numpy(arr).permute(2, 0, 1)
    if image.dim() == 2:
        image = image.unsqueeze(0)
    if image.shape[0] == 1:
        image = image.repeat(3, 1, 1)
    return image


@pytest.fixture
def deferred(engine, monkeypatch):
    proc = pytest.importorskip("sglang.srt.multimodal.processors.kimi_k3")
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    if results.get(SENDER) != "applied":
        REGISTRY.revert(engine="sglang")
        pytest.skip(f"K3 deferral is {results.get(SENDER)} on {engine['version']}")
    monkeypatch.setattr(proc, "_k3_to_cuda_chw", _cpu_chw)
    yield monkeypatch
    REGISTRY.revert(engine="sglang")


def _eager(wrapper, images, prompt):
    return wrapper._gpu_call([prompt], list(images))


def _lazy(wrapper, monkeypatch, images, prompt):
    monkeypatch.setenv("VLM_FASTPATH_DEFER", "1")
    return wrapper(text=[prompt], images=list(images))


def _items(out):
    """The release's item pipeline: collect, offsets, per-image split, then pickle."""
    import sglang.srt.multimodal.processors.kimi_k3 as proc

    return release_items(proc.KimiK3ImageProcessor, out, TOKEN_ID)


class _Tower(torch.nn.Module):
    """Records the ``pixel_values`` the release hands its K3 vision tower."""

    patch_size = 14

    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = torch.nn.Module()
        self.patch_embed.proj = torch.nn.Linear(1, 1)
        self.seen: list[torch.Tensor] = []

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, pixel_values, grid_thws, *args, **kwargs):
        self.seen.append(pixel_values.detach().clone())
        return pixel_values.flatten(1)


def _model():
    import sglang.srt.models.kimi_k3 as kimi

    from fixtures import sglang_cpu as _testing

    _testing.setup_sglang_cpu()
    model = kimi.KimiK3ForConditionalGeneration.__new__(kimi.KimiK3ForConditionalGeneration)
    torch.nn.Module.__init__(model)
    model.vision_tower = _Tower()
    model.mm_projector = torch.nn.Identity()
    model.use_data_parallel = False
    return model


def _tower_input(items):
    model = _model()
    with torch.no_grad():
        model.get_image_feature(items)
    assert len(model.vision_tower.seen) == 1
    return model.vision_tower.seen[0]


def test_status(engine):
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    REGISTRY.revert(engine="sglang")
    want = EXPECTED.get(engine["version"], "not-needed")  # no K3 module before 0.5.17
    assert results[SENDER] == want
    assert results[OWNER] == want


def test_library_fill_is_k3_arithmetic(engine):
    """``kimi_integration.deferred.fill_transparent_bg`` == the release's K3 fill."""
    try:
        import sglang.srt.multimodal.processors.kimi_k3 as proc
    except ImportError:
        pytest.skip("no Kimi K3 in this release")
    fill = getattr(proc, "_fill_transparent_bg", None)
    if fill is None:
        from sglang.srt.multimodal.kimi_k3_image_processing import fill_transparent_bg as fill
    from vlm_fastpath.kimi_integration.deferred import BackgroundConfig, fill_transparent_bg

    x = torch.from_numpy(np.random.default_rng(3).integers(0, 256, (4, 37, 53), np.uint8))
    x[3, :5] = 0
    x[3, 5:10] = 255
    for cfg in BACKGROUNDS.values():
        ours = fill_transparent_bg(x, BackgroundConfig.from_checkpoint(cfg))
        theirs = fill(x.float().unsqueeze(0), cfg)[0].to(torch.uint8)
        assert torch.equal(ours, theirs), cfg


KINDS = [["jpeg"], ["png"], ["rgba"], ["gray"], ["tensor"], ["jpeg", "png", "rgba", "gray", "png"]]
CASES = [(k, "chessboard") for k in KINDS] + [(["rgba"], b) for b in BACKGROUNDS
                                              if b != "chessboard"]


@pytest.mark.parametrize(("kinds", "bg"), CASES)
def test_tower_receives_eager_pixels(deferred, kinds, bg):
    images = [_images()[k] for k in kinds]
    prompt = "q " + " ".join(f"<{i}>{TOKEN}" for i in range(len(images))) + " end"
    wrapper = _wrapper(BACKGROUNDS[bg])
    eager = _eager(wrapper, images, prompt)
    lazy = _lazy(wrapper, deferred, images, prompt)
    assert eager["pixel_values"].dtype == torch.float32
    assert lazy["pixel_values"].dtype == torch.uint8  # the digest, not pixels
    assert len(lazy[KEY]) == len(images)
    assert torch.equal(eager["input_ids"], lazy["input_ids"])
    assert torch.equal(eager["image_grid_thw"], lazy["image_grid_thw"])
    eager_items, ids_e = _items(eager)
    lazy_items, ids_l = _items(lazy)
    assert torch.equal(ids_e, ids_l)
    assert len(eager_items) == len(lazy_items) == len(images)
    for e, d in zip(eager_items, lazy_items, strict=True):
        assert e.offsets == d.offsets
        assert len(d.model_specific_data[KEY]) == 1
    assert torch.equal(_tower_input(eager_items), _tower_input(lazy_items))


def test_mixed_deferred_and_eager_items(deferred):
    images = _images()
    wrapper = _wrapper(CHESSBOARD)
    prompt = f"a{TOKEN}b{TOKEN}"
    eager = _eager(wrapper, [images["rgba"], images["jpeg"]], prompt)
    lazy = _lazy(wrapper, deferred, [images["rgba"], images["jpeg"]], prompt)
    e_items, _ = _items(eager)
    d_items, _ = _items(lazy)
    mixed = [d_items[0], e_items[1], d_items[1], e_items[0]]
    want = [e_items[0], e_items[1], e_items[1], e_items[0]]
    assert torch.equal(_tower_input(mixed), _tower_input(want))


def test_rule_at_its_boundary(deferred):
    from vlm_fastpath.patches.sglang.deferred_preprocessing import (
        multimodal_processors_kimi_k3 as sender,
    )

    cfg = dict(CFG, in_patch_limit=4)
    wrapper = _wrapper(CHESSBOARD, cfg)
    rng = np.random.default_rng(0)

    def image(w, h, mode):
        return Image.fromarray(rng.integers(0, 256, (h, w, len(mode)), np.uint8), mode=mode)

    equal = [image(56, 56, "RGB")]  # 3*56*56 == 3*28*28*4
    over = [image(53, 71, "RGB"), image(74, 89, "RGBA")]
    import sglang.srt.multimodal.processors.kimi_k3 as proc

    # the release takes its CPU (checkpoint) path without CUDA: use its GPU path here too
    deferred.setattr(wrapper, "_cpu_call",
                     lambda text, images, ids=None, **_kw: wrapper._gpu_call(text, images, ids))
    for images, want_defer, delta in ((equal, True, 0), (over, False, 1)):
        sizes, configs = sender.resize_configs(wrapper, images, proc.__dict__)
        raw, processed = sender.byte_counts(images, sizes, configs)
        assert raw - processed == delta
        prompt = TOKEN * len(images)
        out = _lazy(wrapper, deferred, images, prompt)
        assert (KEY in out) is want_defer
        if want_defer:
            assert sum(p.payload_bytes for p in out[KEY]) == raw
            items, _ = _items(out)
            assert torch.equal(_tower_input(items),
                               _tower_input(_items(_eager(wrapper, images, prompt))[0]))
        else:
            assert out["pixel_values"].dtype == torch.float32


def test_off_and_auto_modes(deferred):
    wrapper = _wrapper(CHESSBOARD)
    image = _images()["png"]
    deferred.setenv("VLM_FASTPATH_DEFER", "0")
    import sglang.srt.multimodal.processors.kimi_k3 as proc

    g = proc.__dict__
    from vlm_fastpath.patches.sglang.deferred_preprocessing import (
        multimodal_processors_kimi_k3 as sender,
    )

    assert not sender.should_defer(wrapper, [image], g)
    deferred.delenv("VLM_FASTPATH_DEFER", raising=False)
    # auto defers where 0.5.18 does: CUDA in the tokenizer and CPU feature transport
    assert sender.should_defer(wrapper, [image], g) == torch.cuda.is_available()
    setattr(wrapper, sender.TRANSPORT_ATTR, "cuda_ipc")
    assert not sender.should_defer(wrapper, [image], g)
    deferred.setenv("VLM_FASTPATH_DEFER", "1")
    assert sender.should_defer(wrapper, [image], g)
    assert not sender.should_defer(wrapper, [torch.zeros(3, 30, 30)], g)  # float: eager
    assert not sender.should_defer(wrapper, [image, torch.zeros(3, 30, 30)], g)


def test_payload_bytes_4x1536x1024(deferred):
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (1024, 1536, 3), dtype=np.uint8))
              for _ in range(4)]
    prompt = "".join(f"<{i}>{TOKEN}" for i in range(4))
    wrapper = _wrapper(CHESSBOARD, dict(CFG, in_patch_limit=16384))
    eager_out = _eager(wrapper, images, prompt)
    lazy_out = _lazy(wrapper, deferred, images, prompt)
    eager = len(pickle.dumps(eager_out))
    lazy = len(pickle.dumps(lazy_out))
    pixels = eager_out["pixel_values"]
    pixel_bytes = pixels.numel() * pixels.element_size()
    raw_bytes = sum(p.payload_bytes for p in lazy_out[KEY])
    mib = 1 << 20
    print(f"\nK3 4x1536x1024: eager pixel_values {pixel_bytes / mib:.2f} MiB (pickled "
          f"{eager / mib:.2f} MiB); deferred raw {raw_bytes / mib:.2f} MiB (pickled "
          f"{lazy / mib:.2f} MiB)")
    assert round(pixel_bytes / mib, 1) == 73.0
    assert round(raw_bytes / mib, 1) == 18.0
    assert lazy - raw_bytes < (eager - pixel_bytes) + pixels.shape[0] + (4 << 10)
    assert lazy * 4 < eager


def test_revert_restores_originals(engine):
    try:
        import sglang.srt.models.kimi_k3 as kimi
        import sglang.srt.multimodal.processors.kimi_k3 as proc
    except ImportError:
        pytest.skip("no Kimi K3 in this release")

    def state():
        return (proc.KimiK3GPUProcessorWrapper.__dict__["__call__"],
                proc.KimiK3ImageProcessor.__dict__["__init__"],
                kimi.KimiK3ForConditionalGeneration.__dict__["get_image_feature"],
                "collect_mm_items_from_processor_output" in proc.KimiK3ImageProcessor.__dict__)

    REGISTRY.revert(engine="sglang")
    before = state()
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    patched = state()
    REGISTRY.revert(engine="sglang")
    after = state()
    if results.get(SENDER) == "applied":
        assert patched[0] is not before[0] and patched[2] is not before[2]
    assert all(a is b for a, b in zip(before[:3], after[:3], strict=True))
    assert before[3] == after[3]
