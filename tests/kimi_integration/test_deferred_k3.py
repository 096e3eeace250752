"""The K3 pixel recipe (``DeferredKimiProcessor(..., recipe="k3")``) against two oracles.

1. A spec-written torch oracle (runs in every venv): the K3 release's arithmetic written down
   here from its description, sharing no code with the library: staging (``RGBA`` when the
   mode is not ``RGB`` and it has an ``A`` band or a ``transparency`` key, else ``RGB``; 2-D /
   1-channel uint8 repeated to 3 channels), ``F.interpolate(bicubic, antialias=True)`` of all
   channels in float32 + round/clamp, the background fill on the resized float image, zero
   padding, ``x * 1/(255 std) + (-mean/std)`` in float32, patchify. Resize plans come from the
   NaViT formula written out here as well.
2. SGLang's own functions, where importable (``.envs/sglang-0.5.23/bin/python``): the
   release's ``_gpu_preprocess_images`` with ``kimi_k3_image_processing.to_chw_uint8`` and
   ``fill_transparent_bg`` run on the CPU (exactly what ``KimiK3ForConditionalGeneration``'s
   deferred owner runs), with ``navit_resize_config`` and ``normalization_tensors``.

Every comparison is ``torch.equal``, for the library's eager form and its deferred form
(pickled payload, ``run`` on the CPU), per input kind and background config.
"""

from __future__ import annotations

import glob
import io
import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from vlm_fastpath.kimi_integration.deferred import (
    K3_RESIZE_BACKENDS,
    BackgroundConfig,
    DeferredKimiProcessor,
    TransportForm,
    to_chw_uint8,
)
from vlm_fastpath.kimi_integration.errors import DeferredPayloadError, KimiInputError

from .cases import K3_CFG as CFG
from .cases import K3_CHESSBOARD as CHESSBOARD
from .helpers import REPO_ROOT, encode, img, palette_image, rand_array, video

# the checkpoint's transparent_bg_config forms (None: alpha dropped after the resize)
BACKGROUNDS = {"none": None, "white": {"pattern": "white"}, "black": {"pattern": "black"},
               "gray": {"pattern": "gray"}, "chessboard": CHESSBOARD,
               "chessboard-off": dict(CHESSBOARD, chessboard_square_on_top_left=False,
                                      chessboard_square_size=5, chessboard_white_value=230,
                                      chessboard_gray_value=17)}


# -- inputs ------------------------------------------------------------------------------------
def _rgba(seed: int, w: int, h: int) -> np.ndarray:
    array = rand_array(seed, w, h, 4)
    array[: h // 5, :, 3] = 0  # fully transparent band
    array[h // 5 : 2 * h // 5, :, 3] = 255  # opaque band
    return array


def _rgb_with_key() -> Image.Image:
    image = Image.fromarray(rand_array(9, 203, 151, 3))
    image.info["transparency"] = (10, 20, 30)  # K3 keeps RGB images opaque
    return image


INPUTS = {
    "pil-rgb": Image.fromarray(rand_array(1, 517, 389, 3)),
    "pil-rgb-small": Image.fromarray(rand_array(2, 61, 47, 3)),  # no resize
    "pil-rgba": Image.fromarray(_rgba(3, 411, 301)),
    "pil-rgba-wide": Image.fromarray(_rgba(4, 1001, 157)),
    "pil-la": Image.fromarray(rand_array(5, 123, 91, 2)),
    "pil-l": Image.fromarray(rand_array(6, 333, 221, 0)),
    "pil-p": palette_image(7, 141, 99),
    "pil-p-transparency": palette_image(8, 141, 99, transparency=7),
    "pil-rgb-key": _rgb_with_key(),
    "png-rgba-bytes": encode(Image.fromarray(_rgba(10, 301, 211)), "PNG"),
    "jpeg-bytes": encode(Image.fromarray(rand_array(11, 643, 481, 3)), "JPEG", quality=85),
    "np-hw": rand_array(12, 61, 47, 0),
    "np-hw1": rand_array(13, 257, 199, 0)[:, :, None],
    "np-hwc3": rand_array(14, 311, 257, 3),
    "np-hwc4": _rgba(15, 299, 203),
    "tensor-hwc3": torch.from_numpy(rand_array(16, 201, 151, 3)),
    "tensor-hwc4": torch.from_numpy(_rgba(17, 207, 143)),
    "tensor-hw": torch.from_numpy(rand_array(18, 203, 147, 0)),
}
RGBA_KINDS = ["pil-rgba", "pil-rgba-wide", "pil-la", "pil-p-transparency", "png-rgba-bytes",
              "np-hwc4", "tensor-hwc4"]


def _skimage_photos() -> dict[str, Image.Image]:
    """skimage.data photos: from skimage, or its PNGs in the core venv (sglang venv)."""
    names = ["astronaut", "chelsea", "coffee", "camera", "logo"]
    photos: dict[str, Image.Image] = {}
    try:
        from skimage import data
    except ImportError:
        data = None
    for name in names:
        if data is not None:
            photos[name] = Image.fromarray(getattr(data, name)())
            continue
        found = glob.glob(str(REPO_ROOT / ".venv/lib/python3*/site-packages/skimage/data"
                              / f"{name}.png"))
        if found:
            with Image.open(found[0]) as image:
                image.load()
                photos[name] = image.copy()
    return photos


PHOTOS = _skimage_photos()


# -- the spec-written oracle -------------------------------------------------------------------
def _fma_addcmul() -> bool:
    """Whether this torch's CPU ``addcmul`` rounds once (fused multiply-add, AVX2/AVX-512)."""
    x = torch.arange(256, dtype=torch.float32).view(1, 1, 16, 16)
    s = torch.tensor([1.0 / (255.0 * 0.26862954)], dtype=torch.float32).view(1, 1, 1, 1)
    b = torch.tensor([-0.48145466 / 0.26862954], dtype=torch.float32).view(1, 1, 1, 1)
    return torch.equal(torch.addcmul(b, x, s), (x.double() * s.double() + b.double()).float())


FUSED = _fma_addcmul()


def _oracle_stage(obj) -> torch.Tensor:
    """uint8 CHW with 3 or 4 channels, as the release stages its input."""
    if isinstance(obj, bytes):
        obj = Image.open(io.BytesIO(obj))
    if isinstance(obj, Image.Image):
        alpha = obj.mode != "RGB" and ("A" in obj.getbands() or "transparency" in obj.info)
        array = np.array(obj.convert("RGBA" if alpha else "RGB"))
        return torch.from_numpy(array).permute(2, 0, 1).contiguous()
    array = obj.numpy() if isinstance(obj, torch.Tensor) else obj
    assert array.dtype == np.uint8
    if array.ndim == 2:
        array = array[:, :, None]
    chw = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
    return chw.repeat(3, 1, 1) if chw.shape[0] == 1 else chw


def _oracle_plan(width: int, height: int, cfg: dict) -> tuple[int, int, int, int]:
    """(new_w, new_h, padded_w, padded_h) by the NaViT formula."""
    p, merge = cfg["patch_size"], cfg["merge_kernel_size"]
    side = cfg["patch_limit_on_one_side"]
    s1 = math.sqrt(cfg["in_patch_limit"] / (max(1.0, width // p) * max(1.0, height // p)))
    scale = min(1.0, s1, side * p / width, side * p / height)
    new_w = min(max(1, int(width * scale)), side * p)
    new_h = min(max(1, int(height * scale)), side * p)
    factor = merge * p
    return new_w, new_h, new_w + (-new_w) % factor, new_h + (-new_h) % factor


def _oracle_background(cfg: dict, h: int, w: int) -> torch.Tensor:
    pattern = cfg.get("pattern", "black")
    if pattern == "chessboard":
        size = cfg.get("chessboard_square_size", 16)
        light = float(cfg.get("chessboard_white_value", 255))
        dark = float(cfg.get("chessboard_gray_value", 200))
        yy, xx = np.mgrid[0:h, 0:w]
        top_left_square = ((yy // size + xx // size) % 2) == 0
        light_here = top_left_square == bool(cfg.get("chessboard_square_on_top_left", True))
        return torch.from_numpy(np.where(light_here, light, dark).astype(np.float32))
    level = {"white": 255.0, "black": 0.0, "gray": 128.0}[pattern]
    return torch.full((h, w), level, dtype=torch.float32)


def _oracle_one(obj, cfg: dict, bg: dict | None) -> tuple[torch.Tensor, tuple[int, int, int]]:
    x = _oracle_stage(obj).float()[None]  # [1, C, H, W] float32
    height, width = x.shape[-2:]
    new_w, new_h, padded_w, padded_h = _oracle_plan(width, height, cfg)
    if (height, width) != (new_h, new_w):
        x = F.interpolate(x, size=(new_h, new_w), mode="bicubic", align_corners=False,
                          antialias=True)
        x = torch.clamp(torch.round(x), 0.0, 255.0)
    if x.shape[1] == 4:  # fill after the resize, in float32
        if bg is None:
            x = x[:, :3]
        else:
            a = torch.clamp(x[:, 3:4] / 255.0, 0.0, 1.0)
            plane = _oracle_background(bg, new_h, new_w)[None, None]
            x = torch.floor(torch.clamp(a * x[:, :3] + (1.0 - a) * plane, 0.0, 255.0))
    canvas = torch.zeros((1, 3, padded_h, padded_w), dtype=torch.float32)
    canvas[:, :, :new_h, :new_w] = x
    scale = torch.tensor([1.0 / (255.0 * s) for s in cfg["image_std"]], dtype=torch.float32)
    pairs = zip(cfg["image_mean"], cfg["image_std"], strict=True)
    bias = torch.tensor([-m / s for m, s in pairs], dtype=torch.float32)
    scale, bias = scale.view(1, 3, 1, 1), bias.view(1, 3, 1, 1)
    if FUSED:  # x * scale + bias rounded once to float32 (exact in float64 for these ranges)
        normalized = (canvas.double() * scale.double() + bias.double()).float()
    else:
        normalized = canvas * scale + bias
    p = cfg["patch_size"]
    gh, gw = padded_h // p, padded_w // p
    patches = [normalized[0, :, i * p:(i + 1) * p, j * p:(j + 1) * p]
               for i in range(gh) for j in range(gw)]
    return torch.stack(patches), (1, gh, gw)


def _oracle(objs, cfg: dict, bg: dict | None) -> dict[str, torch.Tensor]:
    outs = [_oracle_one(o, cfg, bg) for o in objs]
    return {"pixel_values": torch.cat([o[0] for o in outs]),
            "grid_thws": torch.tensor([o[1] for o in outs], dtype=torch.int64)}


# -- library runs ------------------------------------------------------------------------------
def _proc(bg: dict | None, cfg: dict = CFG, **kwargs) -> DeferredKimiProcessor:
    return DeferredKimiProcessor(cfg, BackgroundConfig.from_checkpoint(bg), recipe="k3",
                                 **kwargs)


def _deferred(proc: DeferredKimiProcessor, medias):
    payload = pickle.loads(pickle.dumps(proc.prepare(medias)))
    return proc.run(payload, "cpu"), payload


def _assert_equal(out, expected) -> None:
    assert torch.equal(out["grid_thws"], expected["grid_thws"]), (
        out["grid_thws"].tolist(), expected["grid_thws"].tolist())
    pv, exp = out["pixel_values"], expected["pixel_values"]
    assert pv.dtype == torch.float32 and pv.shape == exp.shape, (pv.shape, exp.shape)
    if not torch.equal(pv, exp):
        bad = int((pv != exp).sum())
        raise AssertionError(f"{bad} of {pv.numel()} values differ, max "
                             f"{(pv - exp).abs().max().item()}")


# -- spec oracle: every input kind x every background, eager and deferred ----------------------
@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("bg", list(BACKGROUNDS))
@pytest.mark.parametrize("name", list(INPUTS))
def test_k3_eager_and_deferred_equal_spec_oracle(name, bg):
    proc = _proc(BACKGROUNDS[bg])
    medias = [img(INPUTS[name])]
    expected = _oracle([INPUTS[name]], CFG, BACKGROUNDS[bg])
    _assert_equal(proc.eager(medias), expected)
    out, payload = _deferred(proc, medias)
    _assert_equal(out, expected)
    assert payload.recipe == "k3"


@pytest.mark.skipif(not PHOTOS, reason="skimage.data photos not available")
@pytest.mark.parametrize("bg", ["none", "chessboard", "white"])
@pytest.mark.parametrize("name", ["astronaut", "chelsea", "coffee", "camera", "logo"])
def test_k3_real_photos_equal_spec_oracle(name, bg):
    if name not in PHOTOS:
        pytest.skip(f"skimage photo {name} not available")
    photo = PHOTOS[name]
    cfg = dict(CFG, in_patch_limit=1024)
    proc = _proc(BACKGROUNDS[bg], cfg)
    for obj in (photo, encode(photo, "PNG")):
        expected = _oracle([obj], cfg, BACKGROUNDS[bg])
        _assert_equal(proc.eager([img(obj)]), expected)
        out, _ = _deferred(proc, [img(obj)])
        _assert_equal(out, expected)


@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("bg", ["none", "chessboard-off"])
def test_k3_batch_mixed_kinds_and_forms(bg):
    """Several items in one request: same-shape images batched, raw/encoded/eager mixed."""
    big_lossless = Image.fromarray(rand_array(20, 2600, 1700, 3))  # raw > processed: eager
    names = ["pil-rgba", "jpeg-bytes", "pil-rgba", "pil-l", "np-hwc4", "pil-rgb",
             "png-rgba-bytes", "pil-rgba"]
    objs = [INPUTS[n] for n in names] + [big_lossless]
    proc = _proc(BACKGROUNDS[bg], allow_encoded=True)
    medias = [img(o) for o in objs]
    expected = _oracle(objs, CFG, BACKGROUNDS[bg])
    _assert_equal(proc.eager(medias), expected)
    out, payload = _deferred(proc, medias)
    _assert_equal(out, expected)
    forms = {d.form for d in payload.decisions}
    assert {TransportForm.RAW, TransportForm.ENCODED, TransportForm.EAGER} <= forms


# -- staging and transport -------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
def test_k3_staging_channels():
    fill = BackgroundConfig.from_checkpoint(CHESSBOARD)
    drop = BackgroundConfig.from_checkpoint(None)
    chans = {n: to_chw_uint8(INPUTS[n], fill, recipe="k3").shape[0] for n in INPUTS}
    assert {n for n, c in chans.items() if c == 4} == set(RGBA_KINDS)
    assert chans["pil-rgb-key"] == 3  # K3: an RGB image's transparency key is ignored
    assert to_chw_uint8(INPUTS["pil-rgb-key"], fill).shape[0] == 4  # the K2.5 rule differs
    assert chans["pil-l"] == chans["np-hw"] == chans["tensor-hw"] == 1  # replicated on owner
    # without a fill 3 channels travel: the first three of the RGBA conversion
    for name in RGBA_KINDS:
        chw = to_chw_uint8(INPUTS[name], drop, recipe="k3")
        assert torch.equal(chw, _oracle_stage(INPUTS[name])[:3])
    assert _proc(CHESSBOARD).decide(img(INPUTS["pil-rgba"])).raw_bytes == 4 * 411 * 301
    assert _proc(None).decide(img(INPUTS["pil-rgba"])).raw_bytes == 3 * 411 * 301


def test_k3_differs_from_k25_fill_before_resize():
    """The point of the recipe: K2.5-with-fill composites before a Pillow resize."""
    medias = [img(INPUTS["pil-rgba"])]
    k3 = _proc(CHESSBOARD).eager(medias)["pixel_values"]
    k25 = DeferredKimiProcessor(CFG, BackgroundConfig.from_checkpoint(CHESSBOARD)).eager(
        medias)["pixel_values"]
    assert k3.shape == k25.shape and not torch.equal(k3, k25)
    # K2.5 default recipe is untouched: Pillow path, not K3's
    assert DeferredKimiProcessor(CFG).recipe == "k25"


def test_k3_owner_checks():
    proc = _proc(CHESSBOARD)
    payload = proc.prepare([img(INPUTS["pil-rgba"])])
    with pytest.raises(DeferredPayloadError, match="recipe"):
        DeferredKimiProcessor(CFG, BackgroundConfig.from_checkpoint(CHESSBOARD)).run(payload)
    with pytest.raises(DeferredPayloadError, match="recipe"):
        proc.run(DeferredKimiProcessor(
            CFG, BackgroundConfig.from_checkpoint(CHESSBOARD)).prepare([img(INPUTS["pil-rgba"])]))
    for backend in ("pillow", "torch-pillow"):
        with pytest.raises(ValueError, match="K3"):
            proc.run(payload, resize_backend=backend)
    for backend in K3_RESIZE_BACKENDS:
        _assert_equal(proc.run(payload, resize_backend=backend),
                      _oracle([INPUTS["pil-rgba"]], CFG, CHESSBOARD))
    with pytest.raises(ValueError, match="recipe"):
        DeferredKimiProcessor(CFG, recipe="k4")


def test_k3_rejects_video_and_float_tensors():
    proc = _proc(None)
    with pytest.raises(KimiInputError, match="images only"):
        proc.prepare([video([INPUTS["pil-rgb"]])])
    with pytest.raises(KimiInputError, match="uint8"):
        proc.prepare([img(torch.rand(47, 61, 3))])


# -- SGLang's own K3 functions (sglang venv only) ---------------------------------------------
def _sglang():
    k3 = pytest.importorskip("sglang.srt.multimodal.kimi_k3_image_processing")
    k25 = pytest.importorskip("sglang.srt.multimodal.processors.kimi_k25")
    return k3, k25


def _sglang_input(obj):
    """The release takes PIL images and CHW uint8 tensors."""
    if isinstance(obj, bytes):
        return Image.open(io.BytesIO(obj))
    if isinstance(obj, Image.Image):
        return obj
    array = obj.numpy() if isinstance(obj, torch.Tensor) else obj
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def _sglang_run(objs, cfg: dict, bg: dict | None) -> dict[str, torch.Tensor]:
    k3, k25 = _sglang()
    images = [_sglang_input(o) for o in objs]
    configs = []
    for image in images:
        width, height = k25._get_image_dimensions(image)
        configs.append(k25.navit_resize_config(
            int(width), int(height), cfg["patch_size"], cfg["merge_kernel_size"],
            cfg["in_patch_limit"], cfg["patch_limit_on_one_side"], cfg["fixed_output_tokens"]))
    scale, bias = k3.normalization_tensors(cfg["image_mean"], cfg["image_std"], "cpu")
    pixel_values, grids = k25._gpu_preprocess_images(
        images, configs, scale, bias, cfg["patch_size"],
        to_chw=lambda image: k3.to_chw_uint8(image, device="cpu"),
        post_resize=lambda x: k3.fill_transparent_bg(x, bg),
    )
    return {"pixel_values": pixel_values, "grid_thws": grids}


@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("bg", list(BACKGROUNDS))
@pytest.mark.parametrize("name", list(INPUTS))
def test_k3_equals_sglang_functions(name, bg):
    expected = _sglang_run([INPUTS[name]], CFG, BACKGROUNDS[bg])
    proc = _proc(BACKGROUNDS[bg])
    _assert_equal(proc.eager([img(INPUTS[name])]), expected)
    out, _ = _deferred(proc, [img(INPUTS[name])])
    _assert_equal(out, expected)
    _assert_equal(_oracle([INPUTS[name]], CFG, BACKGROUNDS[bg]), expected)  # oracle sanity


@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("bg", ["none", "chessboard", "gray"])
def test_k3_batch_and_photos_equal_sglang_functions(bg):
    objs = [INPUTS[n] for n in ("pil-rgba", "pil-rgba", "jpeg-bytes", "np-hwc4", "pil-l")]
    objs += list(PHOTOS.values())
    cfg = dict(CFG, in_patch_limit=1024)
    expected = _sglang_run(objs, cfg, BACKGROUNDS[bg])
    proc = _proc(BACKGROUNDS[bg], cfg)
    medias = [img(o) for o in objs]
    _assert_equal(proc.eager(medias), expected)
    out, _ = _deferred(proc, medias)
    _assert_equal(out, expected)
