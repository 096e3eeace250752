"""Every PIL mode and every accepted input kind matches the oracle (which does convert('RGB'))."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG

from .helpers import assert_parity, decode, encode, img, rand_array, video

W, H = 61, 47  # odd sizes, below the limits (no resize: the conversion itself is tested)
BIG_W, BIG_H = 1531, 1203  # downscaled: the conversion feeds a real resize


def _palette_image(seed: int, width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    image = Image.frombytes("P", (width, height), rand_array(seed, width, height, 0).tobytes())
    image.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tobytes())
    return image


def make_mode_image(mode: str, seed: int, width: int = W, height: int = H) -> Image.Image:
    """Build a real image of ``mode`` from random content."""
    rng = np.random.default_rng(seed)
    if mode in ("RGB", "RGBA", "LA", "L"):
        channels = {"RGB": 3, "RGBA": 4, "LA": 2, "L": 0}[mode]
        image = Image.fromarray(rand_array(seed, width, height, channels))
    elif mode == "P+transparency":
        image = _palette_image(seed, width, height)
        image.info["transparency"] = 7  # one transparent palette index
    elif mode == "P+transparency-bytes":
        image = _palette_image(seed, width, height)
        image.info["transparency"] = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
    elif mode == "PA":
        image = _palette_image(seed, width, height).convert("PA")
    elif mode == "CMYK":
        image = Image.frombytes("CMYK", (width, height), rand_array(seed, width, height, 4))
    elif mode == "I;16":
        # values both inside and far above 0..255, so clipping rules matter
        image = Image.fromarray(rng.integers(0, 1024, (height, width), dtype=np.uint16))
    elif mode == "I":
        image = Image.fromarray(rng.integers(-300, 600, (height, width), dtype=np.int32))
    elif mode == "F":
        image = Image.fromarray(rng.uniform(-50, 300, (height, width)).astype(np.float32))
    elif mode == "1":
        image = Image.fromarray(rng.integers(0, 2, (height, width)).astype(bool))
    elif mode == "YCbCr":
        image = Image.fromarray(rand_array(seed, width, height)).convert("YCbCr")
    else:  # pragma: no cover
        raise AssertionError(mode)
    expected_mode = mode.split("+")[0]
    assert image.mode == expected_mode, (image.mode, expected_mode)
    assert image.size == (width, height)
    if mode.startswith("P+"):
        assert "transparency" in image.info
    return image


MODES = [
    "RGB",
    "RGBA",
    "LA",
    "L",
    "P+transparency",
    "P+transparency-bytes",
    "PA",
    "CMYK",
    "I;16",
    "I",
    "F",
    "1",
    "YCbCr",
]


# -- 2. PIL modes ------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Palette images with Transparency:UserWarning")
@pytest.mark.parametrize("mode", MODES)
def test_pil_mode_parity(proc, mode):
    image = make_mode_image(mode, seed=len(mode) * 31 + 5)
    assert_parity(proc, [img(image)], KIMI_K25_CFG)


@pytest.mark.parametrize("mode", ["RGBA", "L", "P+transparency", "CMYK", "I;16", "1"])
def test_pil_mode_parity_downscaled(clip_proc, mode):
    image = make_mode_image(mode, seed=len(mode) * 17 + 3, width=BIG_W, height=BIG_H)
    assert_parity(clip_proc, [img(image)], CLIP_CFG)


def test_rgba_alpha_dropped_not_composited(proc):
    """Fully transparent pixels keep their colour (the checkpoint drops alpha)."""
    array = rand_array(3, W, H, 4)
    array[..., 3] = 0
    out = assert_parity(proc, [img(Image.fromarray(array))], KIMI_K25_CFG)
    rgb = Image.fromarray(np.ascontiguousarray(array[..., :3]))
    assert_parity(proc, [img(rgb)], KIMI_K25_CFG)
    assert not torch.all(out["pixel_values"] == 1.0)  # not composited onto white


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "LA", "L", "P+transparency", "I;16", "1"], ids=str)
def test_png_bytes_of_each_mode(proc, mode):
    data = encode(make_mode_image(mode, seed=9), "PNG")
    decoded = decode(data)
    assert decoded.mode == mode.split("+")[0]
    assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(decoded)])


def test_cmyk_jpeg_bytes(proc):
    data = encode(make_mode_image("CMYK", seed=10, width=300, height=200), "JPEG", quality=85)
    decoded = decode(data)
    assert decoded.mode == "CMYK"
    assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(decoded)])


def test_video_of_mixed_modes(proc):
    frames = [
        make_mode_image(m, seed=i, width=400, height=300)
        for i, m in enumerate(["RGB", "L", "RGBA", "P+transparency"])
    ]
    assert_parity(proc, [video(frames)], KIMI_K25_CFG)


# -- 5. arrays, tensors, bytes -------------------------------------------------------------------
ARRAY_SHAPES = {
    "HW": (0, "L"),
    "HW1": (1, "L"),
    "HW3": (3, "RGB"),
    "HW4": (4, "RGBA"),
}


def _array_and_twin(kind: str, seed: int, width: int, height: int):
    channels, mode = ARRAY_SHAPES[kind]
    if channels == 1:
        flat = rand_array(seed, width, height, 0)
        array = flat[:, :, None].copy()
        twin = Image.frombytes("L", (width, height), flat.tobytes())
    else:
        array = rand_array(seed, width, height, channels)
        twin = Image.frombytes(mode, (width, height), array.tobytes())
    assert twin.mode == mode
    return array, twin


@pytest.mark.parametrize("size", [(W, H), (BIG_W, BIG_H)], ids=["small", "downscaled"])
@pytest.mark.parametrize("kind", list(ARRAY_SHAPES))
def test_numpy_array_input(proc, kind, size):
    seed = list(ARRAY_SHAPES).index(kind) + 40
    array, twin = _array_and_twin(kind, seed=seed, width=size[0], height=size[1])
    assert_parity(proc, [img(array)], KIMI_K25_CFG, oracle_medias=[img(twin)])


@pytest.mark.parametrize("kind", list(ARRAY_SHAPES))
def test_torch_tensor_input(proc, kind):
    array, twin = _array_and_twin(kind, seed=77, width=W + 100, height=H + 3)
    tensor = torch.from_numpy(array)
    assert tensor.dtype == torch.uint8
    assert_parity(proc, [img(tensor)], KIMI_K25_CFG, oracle_medias=[img(twin)])


def test_non_contiguous_array_and_tensor(proc):
    base = rand_array(5, 2 * W, H, 3)
    strided = base[:, ::2]  # non-contiguous view
    flipped = base[::-1]  # negative strides
    chw = torch.from_numpy(np.ascontiguousarray(base.transpose(2, 0, 1)))
    permuted = chw.permute(1, 2, 0)  # HWC view of a CHW tensor
    assert not strided.flags.c_contiguous and not permuted.is_contiguous()
    medias = [img(strided), img(flipped), img(permuted)]
    twins = [img(Image.fromarray(np.ascontiguousarray(a))) for a in (strided, flipped, base)]
    assert_parity(proc, medias, KIMI_K25_CFG, oracle_medias=twins)


def test_read_only_array(proc):
    array = rand_array(6, W, H, 3)
    array.setflags(write=False)
    assert_parity(proc, [img(array)], KIMI_K25_CFG, oracle_medias=[img(Image.fromarray(array))])


def test_video_of_arrays_and_tensors(proc):
    arrays = [rand_array(90 + i, 320, 200, 3) for i in range(4)]
    frames = [arrays[0], torch.from_numpy(arrays[1]), arrays[2], Image.fromarray(arrays[3])]
    twins = [Image.fromarray(a) for a in arrays]
    assert_parity(proc, [video(frames)], KIMI_K25_CFG, oracle_medias=[video(twins)])


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_encoded_bytes(proc, fmt, wrap):
    image = Image.fromarray(rand_array(12, 517, 389, 3))
    data = encode(image, fmt, **({"quality": 80} if fmt == "JPEG" else {}))
    assert_parity(proc, [img(wrap(data))], KIMI_K25_CFG, oracle_medias=[img(decode(data))])


def test_encoded_bytes_downscaled(proc):
    image = Image.fromarray(rand_array(13, 2400, 1700, 3))
    data = encode(image, "JPEG", quality=90)
    assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(decode(data))])


def test_file_path_input(proc, tmp_path):
    image = Image.fromarray(rand_array(14, 300, 211, 4))
    path = tmp_path / "x.png"
    image.save(path)
    twin = [img(decode(path.read_bytes()))]
    assert_parity(proc, [img(path)], KIMI_K25_CFG, oracle_medias=twin)
    assert_parity(proc, [img(str(path))], KIMI_K25_CFG, oracle_medias=twin)


def test_media_with_bytes_wrapper(proc):
    """vLLM hands over MediaWithBytes(media=PIL image, original_bytes=...)."""

    class MediaWithBytes:
        def __init__(self, media, original_bytes):
            self.media = media
            self.original_bytes = original_bytes

    image = Image.fromarray(rand_array(15, 640, 360, 3))
    wrapped = MediaWithBytes(image, b"unused")
    assert_parity(proc, [img(wrapped)], KIMI_K25_CFG, oracle_medias=[img(image)])


def test_exif_orientation_not_applied(proc):
    """The checkpoint does not exif-transpose; neither may we (size and pixels as stored)."""
    image = Image.fromarray(rand_array(16, 120, 60, 3))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW on display
    data = encode(image, "JPEG", exif=exif.tobytes(), quality=95)
    decoded = decode(data)
    assert decoded.getexif().get(0x0112) == 6
    out = assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(decoded)])
    assert out["grid_thws"].tolist() == [[1, 6, 10]]  # 120x60 -> 140x84 padded, not 84x140
