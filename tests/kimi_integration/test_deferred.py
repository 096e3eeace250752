"""Deferred preprocessing (model side): transport decision, payload, owner run.

Every deferred result is compared with the eager path (``torch.equal``): for Kimi K2.5 the
eager path is ``FusedKimiProcessor`` itself; for background fills under the default K2.5
recipe (fill before the Pillow resize) it is additionally checked against the spec oracle run
on an independently composited image. The release's K3 recipe (``recipe="k3"``: fill after a
torch antialias resize) is tested in ``test_deferred_k3.py``.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.overrides import TorchFunctionMode

from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiMediaConfig, plan_image
from vlm_fastpath.kimi_integration.deferred import (
    DEFERRED_PREPROCESSING_KEY,
    BackgroundConfig,
    DeferredKimiProcessor,
    DeferredPayload,
    TransportForm,
    choose_form,
    fill_transparent_bg,
    processed_bytes,
    to_chw_uint8,
)
from vlm_fastpath.kimi_integration.deferred.transport import FrameInfo, decide_media
from vlm_fastpath.kimi_integration.errors import (
    DeferredPayloadError,
    ImageTooLargeError,
    KimiConfigError,
    KimiInputError,
    KimiProcessorError,
)

from .helpers import decode, encode, img, palette_image, rand_array, video

BACKENDS = ["pillow", "torch-pillow"]  # both must equal the eager path on CPU
FILLS = ["white", "black", "gray", "chessboard"]
MIB = 1 << 20


def _photo_like(seed: int, w: int, h: int) -> Image.Image:
    """Smooth content (JPEG-friendly) with some noise, like a photo."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                     ((xx + yy) * 127 // max(w + h, 1))], axis=-1)
    noisy = base + rng.integers(-8, 9, size=base.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _inputs() -> dict[str, object]:
    rgb = Image.fromarray(rand_array(1, 517, 389, 3))
    big = _photo_like(2, 1531, 1203)
    return {
        "jpeg-bytes": encode(big, "JPEG", quality=85),
        "png-bytes": encode(rgb, "PNG"),
        "png-rgba-bytes": encode(Image.fromarray(rand_array(3, 300, 211, 4)), "PNG"),
        "pil-rgb": rgb,
        "pil-rgb-downscaled": Image.fromarray(rand_array(4, 1531, 1203, 3)),
        "pil-rgba": Image.fromarray(rand_array(5, 411, 300, 4)),
        "pil-l": Image.fromarray(rand_array(6, 333, 222, 0)),
        "pil-l-downscaled": Image.fromarray(rand_array(7, 1500, 1300, 0)),
        "pil-la": Image.fromarray(rand_array(8, 120, 90, 2)),
        "pil-p": palette_image(9, 140, 100),
        "pil-p-transparency": palette_image(10, 140, 100, transparency=7),
        "pil-cmyk": Image.frombytes("CMYK", (90, 70), rand_array(11, 90, 70, 4)),
        "pil-i16": Image.fromarray(
            np.random.default_rng(12).integers(0, 1024, (50, 60), dtype=np.uint16)
        ),
        "np-hw": rand_array(13, 61, 47, 0),
        "np-hwc4": rand_array(14, 61, 47, 4),
        "tensor-hwc3": torch.from_numpy(rand_array(15, 200, 150, 3)),
    }


INPUTS = _inputs()


@pytest.fixture(scope="module")
def fused() -> FusedKimiProcessor:
    return FusedKimiProcessor(KIMI_K25_CFG)


def _deferred(medias, proc: DeferredKimiProcessor, backend: str):
    payload = pickle.loads(pickle.dumps(proc.prepare(medias)))  # cross the "boundary"
    return proc.run(payload, "cpu", backend), payload


def _assert_equal(out, expected) -> None:
    assert torch.equal(out["grid_thws"], expected["grid_thws"])
    pv, exp = out["pixel_values"], expected["pixel_values"]
    assert pv.dtype == torch.float32 and pv.shape == exp.shape
    if not torch.equal(pv, exp):
        bad = int((pv != exp).sum())
        raise AssertionError(f"{bad} of {pv.numel()} values differ")


# -- K2.5: deferred == FusedKimiProcessor for every input kind ------------------------------
@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(INPUTS))
def test_k25_deferred_equals_fused(fused, name, backend):
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    medias = [img(INPUTS[name])]
    out, payload = _deferred(medias, proc, backend)
    _assert_equal(out, fused.preprocess(medias))
    decision = payload.decisions[0]
    assert decision.payload_bytes == payload.payload_bytes <= decision.processed_bytes


def test_k25_forms_per_input_kind():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    forms = {name: proc.decide(img(x)).form for name, x in INPUTS.items()}
    assert forms["jpeg-bytes"] is TransportForm.ENCODED
    assert forms["pil-rgb"] is TransportForm.RAW
    assert forms["pil-l"] is TransportForm.RAW
    # random noise PNG is larger than its raw pixels: raw wins, decoded on the sender
    assert forms["png-bytes"] is TransportForm.RAW
    # 8-bit gray travels as one channel; RGBA without a fill as three
    assert proc.decide(img(INPUTS["pil-l"])).raw_bytes == 333 * 222
    assert proc.decide(img(INPUTS["pil-rgba"])).raw_bytes == 3 * 411 * 300
    payload = proc.prepare([img(INPUTS["pil-l"]), img(INPUTS["np-hwc4"])])
    assert [tuple(m.frames[0].data.shape) for m in payload.medias] == [(1, 222, 333),
                                                                          (3, 47, 61)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_k25_batch_of_mixed_kinds_and_video(fused, backend):
    """Several items, eager and deferred mixed, video frames of two sizes, one call."""
    big_lossless = Image.fromarray(rand_array(20, 4600, 3000, 3))  # raw > processed: eager
    frames = [INPUTS["pil-rgb-downscaled"], INPUTS["pil-rgba"], INPUTS["jpeg-bytes"],
              INPUTS["pil-rgb-downscaled"]]
    medias = [img(INPUTS["jpeg-bytes"]), img(big_lossless), video(frames),
              img(INPUTS["pil-l"]), img(INPUTS["pil-rgb"])]
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    out, payload = _deferred(medias, proc, backend)
    _assert_equal(out, fused.preprocess(medias))
    forms = [d.form for d in payload.decisions]
    assert forms == [TransportForm.ENCODED, TransportForm.EAGER, TransportForm.MIXED,
                     TransportForm.RAW, TransportForm.RAW]
    assert payload.decisions[2].frame_forms == (
        TransportForm.RAW, TransportForm.RAW, TransportForm.ENCODED, TransportForm.RAW)
    assert payload.payload_bytes < payload.eager_bytes


# -- K3: background fills ----------------------------------------------------------------
def _composite_oracle(rgba: np.ndarray, bg: BackgroundConfig) -> np.ndarray:
    """Independent numpy compositing of an RGBA HWC array (the fill's definition)."""
    h, w = rgba.shape[:2]
    if bg.mode == "chessboard":
        yy, xx = np.mgrid[0:h, 0:w]
        plane = np.where(((yy // bg.square) + (xx // bg.square)) % 2 == 0, bg.light, bg.dark)
    else:
        plane = np.full((h, w), {"white": 255, "black": 0, "gray": bg.gray_level}[bg.mode])
    # K3's float32 blend, truncated (sglang kimi_k3_image_processing.fill_transparent_bg)
    a = np.clip(rgba[..., 3:4].astype(np.float32) / np.float32(255.0), 0, 1)
    rgb = rgba[..., :3].astype(np.float32)
    out = a * rgb + (np.float32(1.0) - a) * plane[..., None].astype(np.float32)
    return np.floor(np.clip(out, 0, 255)).astype(np.uint8)


RGBA_INPUTS = ["pil-rgba", "png-rgba-bytes", "pil-la", "pil-p-transparency", "np-hwc4"]


@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("name", RGBA_INPUTS)
def test_k3_fill_deferred_equals_eager(name, fill, backend):
    proc = DeferredKimiProcessor(KIMI_K25_CFG, background=fill)
    medias = [img(INPUTS[name])]
    out, payload = _deferred(medias, proc, backend)
    _assert_equal(out, proc.eager(medias))
    frame = payload.medias[0].frames[0]
    if frame.form is TransportForm.RAW:
        assert frame.data.shape[0] == 4  # alpha travels when the fill needs it


@pytest.mark.parametrize("fill", FILLS)
def test_k3_eager_matches_spec_oracle(fill):
    """The K3 eager path = composite (numpy oracle) then the checkpoint's arithmetic."""
    array = rand_array(30, 300, 211, 4)
    array[:40, :, 3] = 0  # fully transparent band
    array[40:80, :, 3] = 255  # opaque band
    bg = BackgroundConfig.from_config(fill)
    proc = DeferredKimiProcessor(KIMI_K25_CFG, background=bg)
    out = proc.eager([img(Image.fromarray(array))])
    expected, grid, _ = ref_preprocess(
        [img(Image.fromarray(_composite_oracle(array, bg)))], KIMI_K25_CFG
    )
    assert torch.equal(out["pixel_values"], expected) and torch.equal(out["grid_thws"], grid)


class CudaScalarDivision(TorchFunctionMode):
    """CUDA's rule for a float tensor divided by a Python number, emulated on the CPU: ATen's
    CUDA kernel multiplies by the float32 reciprocal (one ulp off the quotient for some levels;
    the H200 run of the deferred check found RGBA fills one level off the eager CPU path)."""

    DIVIDE = (torch.Tensor.div, torch.Tensor.__truediv__, torch.div, torch.true_divide)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if (func in self.DIVIDE and len(args) == 2 and not kwargs
                and isinstance(args[1], (int, float)) and args[0].dtype == torch.float32):
            return args[0] * float(np.float32(1.0) / np.float32(args[1]))
        return func(*args, **kwargs)


def _every_alpha_and_level() -> torch.Tensor:
    """uint8 ``[4, 256, 256]``: every alpha (rows) under every colour level (columns)."""
    alpha, level = torch.meshgrid(torch.arange(256), torch.arange(256), indexing="ij")
    return torch.stack([level, level.flip(1), level, alpha]).to(torch.uint8)


@pytest.mark.parametrize("fill", ["white", "black", "gray", "chessboard"])
def test_uint8_fill_gives_the_cpu_bytes_under_cudas_division(fill):
    """The K2.5 recipe's fill runs on the owner's device and must equal the eager CPU path."""
    x = _every_alpha_and_level()
    with CudaScalarDivision():
        on_cuda_rules = fill_transparent_bg(x, fill)
    assert torch.equal(on_cuda_rules, fill_transparent_bg(x, fill))


def test_cuda_division_emulation_bites():
    """The emulation changes the release's K3 op (so the test above can fail): K3 keeps it,
    equal to SGLang's own op on each device, not across devices."""
    from vlm_fastpath.kimi_integration.deferred.background import fill_transparent_bg_float

    x = _every_alpha_and_level().to(torch.float32)
    with CudaScalarDivision():
        on_cuda_rules = fill_transparent_bg_float(x, "white")
    assert not torch.equal(on_cuda_rules, fill_transparent_bg_float(x, "white"))


def test_k3_fill_opaque_and_transparent_pixels():
    x = torch.zeros((4, 2, 3), dtype=torch.uint8)
    x[:3] = 77
    x[3, 0] = 255  # first row opaque, second transparent
    for fill, level in (("white", 255), ("black", 0), ("gray", 128)):
        out = fill_transparent_bg(x, fill)
        assert out.shape == (3, 2, 3)
        assert torch.all(out[:, 0] == 77) and torch.all(out[:, 1] == level)
    board = fill_transparent_bg(torch.zeros((4, 16, 16), dtype=torch.uint8),
                                {"mode": "chessboard", "square": 8, "light": 200, "dark": 50})
    assert board[0, 0, 0] == 200 and board[0, 0, 8] == 50 and board[0, 8, 8] == 200
    assert torch.equal(fill_transparent_bg(x, "drop"), x[:3])


def test_k3_opaque_images_travel_without_alpha():
    proc = DeferredKimiProcessor(KIMI_K25_CFG, background="white")
    assert to_chw_uint8(INPUTS["pil-rgb"], proc.background).shape[0] == 3
    assert proc.decide(img(INPUTS["pil-rgb"])).raw_bytes == 3 * 517 * 389
    assert proc.decide(img(INPUTS["pil-rgba"])).raw_bytes == 4 * 411 * 300


# -- float tensors and other inputs without an exact uint8 form -----------------------------
def test_float_tensor_is_eager_and_refused_like_eager(fused):
    tensor = torch.rand(47, 61, 3)
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    decision = proc.decide(img(tensor))
    assert decision.form is TransportForm.EAGER and decision.raw_bytes is None
    assert "no exact uint8 form" in decision.reason
    with pytest.raises(KimiInputError) as eager_err:
        fused.preprocess([img(tensor)])
    with pytest.raises(KimiInputError) as deferred_err:
        proc.prepare([img(tensor)])
    assert str(deferred_err.value) == str(eager_err.value)
    assert to_chw_uint8(tensor) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_tensor_with_custom_eager_fn(fused, backend):
    """An engine processor that accepts floats: its pixel_values cross the boundary."""

    def eager_fn(medias):
        x = medias[0]["image"]
        as_bytes = (x * 255).round().clamp(0, 255).to(torch.uint8)
        return fused.preprocess([img(as_bytes)])["pixel_values"]

    tensor = torch.rand(300, 400, 3, dtype=torch.float64)
    proc = DeferredKimiProcessor(KIMI_K25_CFG, eager_fn=eager_fn)
    medias = [img(tensor), img(INPUTS["pil-rgb"])]
    out, payload = _deferred(medias, proc, backend)
    assert [d.form for d in payload.decisions] == [TransportForm.EAGER, TransportForm.RAW]
    expected = torch.cat([eager_fn([medias[0]]), fused.preprocess([medias[1]])["pixel_values"]])
    assert torch.equal(out["pixel_values"], expected)


# -- the fallback rule at its boundary ------------------------------------------------------
def test_rule_boundary_pure():
    assert choose_form(1000, 1000).form is TransportForm.RAW  # raw == processed: defer
    assert choose_form(1001, 1000).form is TransportForm.EAGER  # raw = processed + 1
    assert choose_form(999, 1000).form is TransportForm.RAW
    assert choose_form(None, 1000).form is TransportForm.EAGER
    assert choose_form(1001, 1000, encoded_bytes=1000).form is TransportForm.ENCODED
    assert choose_form(1001, 1000, encoded_bytes=1001).form is TransportForm.EAGER
    assert choose_form(500, 1000, encoded_bytes=500).form is TransportForm.RAW  # tie: raw
    assert choose_form(500, 1000, encoded_bytes=499).form is TransportForm.ENCODED
    d = choose_form(1001, 1000, encoded_bytes=2000)
    assert (d.payload_bytes, d.raw_bytes, d.processed_bytes, d.encoded_bytes) == (
        1000, 1001, 1000, 2000)


def test_rule_boundary_video_frames():
    plan = plan_image(KimiMediaConfig.from_dict(KIMI_K25_CFG), 56, 28)
    processed = processed_bytes(plan)
    assert processed == 2 * 4 * 196 * 3 * 4
    half = processed // 2
    at = [FrameInfo(1, half, 1), FrameInfo(1, processed - half, 1)]
    assert decide_media(at, plan).form is TransportForm.RAW
    above = [FrameInfo(1, half, 1), FrameInfo(1, processed - half + 1, 1)]
    assert decide_media(above, plan).form is TransportForm.EAGER


def _boundary_cfg() -> dict:
    return dict(KIMI_K25_CFG, in_patch_limit=64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rule_boundary_real_image(backend):
    """A K3 RGBA image whose raw bytes equal processed bytes defers; one byte-row more doesn't."""
    cfg = _boundary_cfg()
    proc = DeferredKimiProcessor(cfg, background="gray")
    at = Image.fromarray(rand_array(40, 144, 294, 4))
    decision = proc.decide(img(at))
    assert decision.raw_bytes == decision.processed_bytes == 4 * 144 * 294
    assert decision.form is TransportForm.RAW
    out, _ = _deferred([img(at)], proc, backend)
    _assert_equal(out, proc.eager([img(at)]))
    # the smallest real RGBA size just past the boundary goes eager, and is still exact
    above = Image.fromarray(rand_array(41, 144, 295, 4))
    decision = proc.decide(img(above))
    assert 0 < decision.raw_bytes - decision.processed_bytes <= 4 * 144
    assert decision.form is TransportForm.EAGER
    assert decision.payload_bytes == decision.processed_bytes
    out, payload = _deferred([img(above)], proc, backend)
    _assert_equal(out, proc.eager([img(above)]))
    assert payload.payload_bytes == payload.eager_bytes


# -- payload ---------------------------------------------------------------------------------
def test_payload_pickle_round_trip_and_accounting(fused):
    medias = [img(INPUTS["jpeg-bytes"]), img(INPUTS["pil-rgb"]), img(INPUTS["pil-l"])]
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare(medias)
    blob = pickle.dumps({DEFERRED_PREPROCESSING_KEY: payload})
    back = pickle.loads(blob)[DEFERRED_PREPROCESSING_KEY]
    assert isinstance(back, DeferredPayload)
    assert back.decisions == payload.decisions
    assert back.payload_bytes == payload.payload_bytes
    assert len(blob) < payload.payload_bytes + 64 * 1024  # little overhead beyond the pixels
    assert payload.payload_bytes == sum(d.payload_bytes for d in payload.decisions)
    _assert_equal(proc.run(back), fused.preprocess(medias))
    assert torch.equal(back.grid_thws, fused.preprocess(medias)["grid_thws"])


def test_anchor_4x1536x1024_raw():
    images = [Image.fromarray(rand_array(50 + i, 1536, 1024, 3)) for i in range(4)]
    payload = DeferredKimiProcessor(KIMI_K25_CFG).prepare([img(i) for i in images])
    assert all(d.form is TransportForm.RAW for d in payload.decisions)
    assert round(payload.eager_bytes / MIB, 1) == 73.0
    assert round(payload.payload_bytes / MIB, 1) == 18.0


def test_jpeg_photo_under_2mib():
    data = encode(_photo_like(60, 1536, 1024), "JPEG", quality=90)
    decision = DeferredKimiProcessor(KIMI_K25_CFG).decide(img(data))
    assert decision.form is TransportForm.ENCODED and decision.payload_bytes <= 2 * MIB
    assert decision.encoded_bytes == len(data)


def test_allow_encoded_false_ships_raw(fused):
    proc = DeferredKimiProcessor(KIMI_K25_CFG, allow_encoded=False)
    medias = [img(INPUTS["jpeg-bytes"])]
    out, payload = _deferred(medias, proc, "pillow")
    assert payload.decisions[0].form is TransportForm.RAW
    assert payload.decisions[0].encoded_bytes is None
    _assert_equal(out, fused.preprocess(medias))


def test_file_path_travels_encoded(tmp_path, fused):
    path = tmp_path / "photo.jpg"
    path.write_bytes(INPUTS["jpeg-bytes"])
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    out, payload = _deferred([img(path)], proc, "pillow")
    assert payload.medias[0].frames[0].data == INPUTS["jpeg-bytes"]
    _assert_equal(out, fused.preprocess([img(decode(INPUTS["jpeg-bytes"]))]))


# -- errors ----------------------------------------------------------------------------------
def test_owner_rejects_non_payload():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    with pytest.raises(DeferredPayloadError, match="expected a DeferredPayload"):
        proc.run({"pixel_values": torch.zeros(1)})


def test_owner_rejects_config_background_version_mismatch():
    medias = [img(INPUTS["pil-rgb"])]
    payload = DeferredKimiProcessor(KIMI_K25_CFG).prepare(medias)
    other = DeferredKimiProcessor(dict(KIMI_K25_CFG, in_patch_limit=4096))
    with pytest.raises(DeferredPayloadError, match="media_proc_cfg"):
        other.run(payload)
    with pytest.raises(DeferredPayloadError, match="background"):
        DeferredKimiProcessor(KIMI_K25_CFG, background="white").run(payload)
    payload.version = 99
    with pytest.raises(DeferredPayloadError, match="version"):
        DeferredKimiProcessor(KIMI_K25_CFG).run(payload)


def test_owner_rejects_other_decoder_for_encoded_frames():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([img(INPUTS["jpeg-bytes"])])
    payload.decoder = (("pillow", "0.0.0"),)
    with pytest.raises(DeferredPayloadError, match="decoder"):
        proc.run(payload)
    raw = proc.prepare([img(INPUTS["pil-rgb"])])
    raw.decoder = (("pillow", "0.0.0"),)
    proc.run(raw)  # raw pixels do not depend on the decoder


def test_owner_rejects_tampered_frames():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([img(INPUTS["pil-rgb"])])
    payload.medias[0].frames[0].data = torch.zeros((2, 5, 5), dtype=torch.uint8)
    with pytest.raises(DeferredPayloadError, match="uint8"):
        proc.run(payload)
    payload.medias[0].frames.clear()
    with pytest.raises(DeferredPayloadError, match="frames"):
        proc.run(payload)


def _eager_payload(fused):
    """A payload of one eager item (a float tensor) followed by one raw item."""

    def eager_fn(medias):
        as_bytes = (medias[0]["image"] * 255).round().to(torch.uint8)
        return fused.preprocess([img(as_bytes)])["pixel_values"]

    proc = DeferredKimiProcessor(KIMI_K25_CFG, eager_fn=eager_fn)
    payload = proc.prepare([img(torch.rand(300, 400, 3)), img(INPUTS["pil-rgb"])])
    assert payload.medias[0].decision.form is TransportForm.EAGER
    return proc, payload


EAGER_TAMPERS = {
    # one patch would broadcast into every row of the item: plausible shape, wrong pixels
    "one-patch": (lambda px: px[:1].clone(), "shape"),
    "rows-missing": (lambda px: px[:-1].clone(), "shape"),
    "rows-extra": (lambda px: torch.cat([px, px[:1]]), "shape"),
    "patch-shape": (lambda px: px.reshape(px.shape[0], 3, 7, 28), "shape"),
    "flat": (lambda px: px.reshape(px.shape[0], -1), "shape"),
    "uint8": (lambda px: px.to(torch.uint8), "float32"),
    "float64": (lambda px: px.to(torch.float64), "float32"),
    "bfloat16": (lambda px: px.to(torch.bfloat16), "float32"),
    "meta": (lambda px: torch.empty(px.shape, dtype=px.dtype, device="meta"), "no readable"),
    "numpy": (lambda px: px.numpy(), "torch tensor"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tamper", list(EAGER_TAMPERS))
def test_owner_checks_eager_pixel_values_against_their_plan(fused, tamper, backend):
    """Eager items are checked at the owner like raw and encoded frames: nothing is broadcast
    or cast silently (issue #31: a [1, 3, 14, 14] tensor filled all the item's rows)."""
    proc, payload = _eager_payload(fused)
    change, match = EAGER_TAMPERS[tamper]
    payload.medias[0].pixel_values = change(payload.medias[0].pixel_values)
    with pytest.raises(DeferredPayloadError, match=match):
        proc.run(payload, resize_backend=backend)


def test_owner_runs_an_untampered_eager_payload(fused):
    proc, payload = _eager_payload(fused)
    out = proc.run(payload)
    rows = payload.medias[0].plan.num_patches
    assert torch.equal(out["pixel_values"][:rows], payload.medias[0].pixel_values)


@pytest.mark.parametrize(
    "bad", [b"", b"not an image", INPUTS["jpeg-bytes"][:200], 3.5, {"a": 1},
            np.zeros((4, 4, 2), dtype=np.uint8)],
    ids=["empty", "garbage", "truncated", "float", "dict", "two-channel"],
)
def test_bad_inputs_raise_kimi_input_error(bad):
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    with pytest.raises(KimiInputError):
        payload = proc.prepare([img(bad)])
        proc.run(payload)  # truncated JPEGs surface at decode time, on the owner


def test_bad_media_and_backend():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    with pytest.raises(KimiInputError):
        proc.prepare([{"type": "audio"}])
    with pytest.raises(KimiInputError):
        proc.prepare("not a list")
    with pytest.raises(ValueError, match="resize_backend"):
        proc.run(proc.prepare([img(INPUTS["pil-rgb"])]), resize_backend="cv2")


def test_decompression_bomb(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ImageTooLargeError):
        DeferredKimiProcessor(KIMI_K25_CFG).prepare([img(INPUTS["png-bytes"])])


@pytest.mark.parametrize(
    "bad", ["pink", {"mode": "gray", "gray_level": 300}, {"mode": "chessboard", "square": 0},
            {"colour": "red"}, 7],
)
def test_bad_background_config(bad):
    with pytest.raises(KimiConfigError):
        DeferredKimiProcessor(KIMI_K25_CFG, background=bad)
    assert issubclass(KimiConfigError, KimiProcessorError)


def test_encoded_roundtrip_is_the_eager_decode(fused):
    """Encoded transport decodes to the very pixels the eager path decodes."""
    data = INPUTS["jpeg-bytes"]
    chw = to_chw_uint8(data)
    assert torch.equal(chw, torch.from_numpy(np.array(decode(data))).permute(2, 0, 1))
    buf = io.BytesIO(data)
    assert to_chw_uint8(buf.getvalue()).shape == chw.shape
