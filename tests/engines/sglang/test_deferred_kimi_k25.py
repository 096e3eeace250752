"""Kimi K2.5 deferred preprocessing through the release's own processor and model functions.

Eager: the release's CPU path (``KimiGPUProcessorWrapper`` with the fused processor).
Deferred: the same wrapper with ``VLM_FASTPATH_DEFER=1``. Both outputs go through the
release's item collection, offsets, per-image split, a pickle round trip (the tokenizer ->
scheduler boundary) and ``KimiK25ForConditionalGeneration.get_image_feature``; the
``pixel_values`` MoonViT receives must be ``torch.equal``.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from vlm_fastpath.patches import REGISTRY

from .pipeline import release_items
from .test_kimi_processor import MEDIA_CFG, HFProcessor, make_wrapper

SENDER = "sglang-kimi-k25-deferred-sender"
OWNER = "sglang-kimi-k25-deferred-owner"
TOKEN = "<|media_pad|>"
TOKEN_ID = 163605

EXPECTED = {"0.5.12.post1": "applied", "0.5.15.post1": "applied", "0.5.17": "applied",
            "0.5.23": "unsupported-version"}


def _encoded(image: Image.Image, fmt: str) -> Image.Image:
    buf = io.BytesIO()
    image.save(buf, format=fmt, quality=90) if fmt == "JPEG" else image.save(buf, format=fmt)
    buf.seek(0)
    return Image.open(buf)


def _images():
    rng = np.random.default_rng(5)
    rgb = Image.fromarray(rng.integers(0, 256, (83, 121, 3), dtype=np.uint8))
    rgba = Image.fromarray(rng.integers(0, 256, (57, 64, 4), dtype=np.uint8), mode="RGBA")
    gray = Image.fromarray(rng.integers(0, 256, (40, 97), dtype=np.uint8), mode="L")
    return {
        "jpeg": _encoded(rgb, "JPEG"),
        "png": _encoded(rgb, "PNG"),
        "rgba": _encoded(rgba, "PNG"),
        "gray": _encoded(gray, "PNG"),
    }


class _Tokenizer:
    """Maps the prompt to ids: text characters by code point, the placeholder to its id."""

    def __call__(self, text, return_tensors=None):
        text = text[0] if isinstance(text, list) else text
        ids = []
        for i, part in enumerate(text.split(TOKEN)):
            if i:
                ids.append(TOKEN_ID)
            ids.extend(ord(c) for c in part)
        return {"input_ids": torch.tensor([ids], dtype=torch.long)}


class _HF(HFProcessor):
    def __init__(self, cfg=None):
        super().__init__()
        if cfg is not None:
            self.media_processor.media_proc_cfg = cfg
        self.tokenizer = _Tokenizer()

    def __call__(self, text=None, medias=None, **kwargs):
        if not medias:  # the checkpoint's processor tokenizes text-only prompts
            return dict(self.tokenizer(text))
        return super().__call__(text=text, medias=medias, **kwargs)


def _wrapper(cfg=None):
    wrapper = make_wrapper()
    hf = _HF(cfg)
    wrapper._hf_processor = hf
    wrapper.tokenizer = hf.tokenizer
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    fused = FusedKimiProcessor(cfg or MEDIA_CFG)
    hf.media_processor = fused
    wrapper.media_processor = fused
    if cfg is not None:
        wrapper._in_patch_limit = cfg["in_patch_limit"]
    return wrapper


def _items(out):
    """The release's item pipeline: collect, offsets, per-image split, then pickle."""
    import sglang.srt.multimodal.processors.kimi_k25 as proc

    return release_items(proc.KimiK2_5VLImageProcessor, out, TOKEN_ID)


def _tower_input(model, items):
    from fixtures import sglang_cpu as _testing

    seen = []
    handle = model.vision_tower.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].detach().clone())
    )
    try:
        with _testing.fa3_stub(None), torch.no_grad():
            embeds = model.get_image_feature(items)
    finally:
        handle.remove()
    return seen[0], embeds


@pytest.fixture
def deferred(engine, monkeypatch):
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    if results[SENDER] != "applied":
        REGISTRY.revert(engine="sglang")
        pytest.skip(f"deferral is {results[SENDER]} on {engine['version']}")
    yield monkeypatch
    REGISTRY.revert(engine="sglang")


@pytest.fixture(scope="module")
def small_model(engine):
    from fixtures import sglang_cpu as _testing

    REGISTRY.revert(engine="sglang")
    try:
        return _testing.build_kimi_k25(num_layers=2)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MoonViT cannot be built outside a server on {engine['version']}: {exc}")


def test_status(engine):
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    REGISTRY.revert(engine="sglang")
    want = EXPECTED.get(engine["version"])
    if want is None:
        pytest.skip(f"no expectation for {engine['version']}")
    assert results[SENDER] == want
    assert results[OWNER] == want


def _run(wrapper, monkeypatch, mode, images, prompt):
    monkeypatch.setenv("VLM_FASTPATH_DEFER", mode)
    return wrapper(text=[prompt], images=list(images))


@pytest.mark.parametrize("kinds", [["jpeg"], ["png"], ["rgba"], ["gray"],
                                   ["jpeg", "png", "rgba", "gray"]])
def test_tower_receives_eager_pixels(deferred, small_model, kinds):
    images = [_images()[k] for k in kinds]
    prompt = "q " + " ".join(f"<{i}>{TOKEN}" for i in range(len(images))) + " end"
    wrapper = _wrapper()
    eager = _run(wrapper, deferred, "0", images, prompt)
    lazy = _run(wrapper, deferred, "1", images, prompt)
    assert eager["pixel_values"].dtype == torch.float32
    assert lazy["pixel_values"].dtype == torch.uint8  # the digest, not pixels
    assert torch.equal(eager["input_ids"], lazy["input_ids"])
    assert torch.equal(eager["image_grid_thw"], lazy["image_grid_thw"])
    eager_items, ids_e = _items(eager)
    lazy_items, ids_l = _items(lazy)
    assert torch.equal(ids_e, ids_l)
    assert len(eager_items) == len(lazy_items) == len(images)
    for e, d in zip(eager_items, lazy_items, strict=True):
        assert e.offsets == d.offsets
        assert len(d.model_specific_data["_vlm_fastpath_kimi_deferred"]) == 1
    pix_e, emb_e = _tower_input(small_model, eager_items)
    pix_d, emb_d = _tower_input(small_model, lazy_items)
    assert torch.equal(pix_e, pix_d)
    assert torch.equal(emb_e, emb_d)


def test_mixed_batch_and_eager_form(deferred, small_model):
    """Deferred items next to eager items; and a payload whose image travels eagerly."""
    images = _images()
    prompt = f"a{TOKEN}b{TOKEN}"
    wrapper = _wrapper()
    eager = _run(wrapper, deferred, "0", [images["jpeg"], images["gray"]], prompt)
    lazy = _run(wrapper, deferred, "1", [images["jpeg"], images["gray"]], prompt)
    e_items, _ = _items(eager)
    d_items, _ = _items(lazy)
    # a small patch budget downscales a 400x300 image: float32 pixels < raw uint8
    cfg = dict(MEDIA_CFG, in_patch_limit=64)
    big = Image.fromarray(np.random.default_rng(1).integers(0, 256, (300, 400, 3), np.uint8))
    small = _wrapper(cfg)
    eager_big = _run(small, deferred, "0", [big, images["png"]], prompt)
    lazy_big = _run(small, deferred, "1", [big, images["png"]], prompt)
    payloads = lazy_big["_vlm_fastpath_kimi_deferred"]
    assert [p.medias[0].decision.form.value for p in payloads] == ["eager", "raw"]
    eb_items, _ = _items(eager_big)
    lb_items, _ = _items(lazy_big)
    assert torch.equal(_tower_input(small_model, eb_items)[0],
                       _tower_input(small_model, lb_items)[0])
    mixed = [d_items[0], e_items[1], d_items[1], e_items[0]]
    want = [e_items[0], e_items[1], e_items[1], e_items[0]]
    assert torch.equal(_tower_input(small_model, mixed)[0], _tower_input(small_model, want)[0])


def test_auto_and_off_modes(deferred):
    wrapper = _wrapper()
    image = _images()["png"]
    deferred.delenv("VLM_FASTPATH_DEFER", raising=False)
    out = wrapper(text=[f"x{TOKEN}"], images=[image])
    # auto defers exactly where the release takes its CPU path (no CUDA here)
    assert ("_vlm_fastpath_kimi_deferred" in out) == (not torch.cuda.is_available())
    out = _run(wrapper, deferred, "0", [image], f"x{TOKEN}")
    assert "_vlm_fastpath_kimi_deferred" not in out


def test_payload_bytes_4x1536x1024(deferred):
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (1024, 1536, 3), dtype=np.uint8))
              for _ in range(4)]
    prompt = "".join(f"<{i}>{TOKEN}" for i in range(4))
    wrapper = _wrapper()
    eager_out = _run(wrapper, deferred, "0", images, prompt)
    lazy_out = _run(wrapper, deferred, "1", images, prompt)
    eager = len(pickle.dumps(eager_out))
    lazy = len(pickle.dumps(lazy_out))
    pixels = eager_out["pixel_values"]
    pixel_bytes = pixels.numel() * pixels.element_size()
    raw_bytes = sum(p.payload_bytes for p in lazy_out["_vlm_fastpath_kimi_deferred"])
    mib = 1 << 20
    print(f"\n4x1536x1024: eager pixel_values {pixel_bytes / mib:.2f} MiB (pickled output "
          f"{eager / mib:.2f} MiB); deferred raw {raw_bytes / mib:.2f} MiB (pickled output "
          f"{lazy / mib:.2f} MiB)")
    assert round(pixel_bytes / mib, 1) == 73.0
    assert round(raw_bytes / mib, 1) == 18.0
    # beyond the pixels: what the eager output also carries (input_ids, framing) + the
    # 1-byte-per-patch digest
    assert lazy - raw_bytes < (eager - pixel_bytes) + pixels.shape[0] + (4 << 10)
    assert lazy * 4 < eager


def test_revert_restores_originals(engine):
    import sglang.srt.models.kimi_k25 as kimi
    import sglang.srt.multimodal.processors.kimi_k25 as proc

    REGISTRY.revert(engine="sglang")
    before = (proc.KimiGPUProcessorWrapper.__dict__["__call__"],
              kimi.KimiK25ForConditionalGeneration.__dict__["get_image_feature"],
              "collect_mm_items_from_processor_output" in proc.KimiK2_5VLImageProcessor.__dict__)
    REGISTRY.apply(engine="sglang")
    REGISTRY.revert(engine="sglang")
    after = (proc.KimiGPUProcessorWrapper.__dict__["__call__"],
             kimi.KimiK25ForConditionalGeneration.__dict__["get_image_feature"],
             "collect_mm_items_from_processor_output" in proc.KimiK2_5VLImageProcessor.__dict__)
    assert before[0] is after[0] and before[1] is after[1] and before[2] == after[2]
