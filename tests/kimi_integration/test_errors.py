"""Bad input and bad config raise the package's own ValueError subclasses, with clear messages."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from fixtures.reference_kimi import KIMI_K25_CFG
from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiMediaConfig
from vlm_fastpath.kimi_integration.errors import (
    ImageTooLargeError,
    KimiConfigError,
    KimiInputError,
    KimiProcessorError,
)

from .helpers import assert_parity, encode, img, rand_array, rand_image, video


def _raises(proc, medias, exc_type, match):
    """preprocess must raise exactly the package type (never a bare KeyError/OSError...)."""
    with pytest.raises(exc_type, match=match) as info:
        proc.preprocess(medias)
    assert isinstance(info.value, KimiProcessorError)
    assert isinstance(info.value, ValueError)
    return info.value


def test_error_hierarchy():
    for exc in (KimiConfigError, KimiInputError, ImageTooLargeError):
        assert issubclass(exc, KimiProcessorError) and issubclass(exc, ValueError)
    assert issubclass(ImageTooLargeError, KimiInputError)
    assert not issubclass(ImageTooLargeError, OSError)


# -- wrong structure / types -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("medias", "match"),
    [
        ([img(5)], r"unsupported image type int"),
        ([img(None)], r"unsupported image type NoneType"),
        ([img(3.5)], r"unsupported image type float"),
        ([img({"a": 1})], r"unsupported image type dict"),
        ([[img(Image.new("RGB", (4, 4)))]], r"must be a dict.*got list"),
        ([Image.new("RGB", (4, 4))], r"must be a dict.*got Image"),
        ([None], r"must be a dict.*got NoneType"),
        (Image.new("RGB", (4, 4)), r"medias must be a list"),
        ("image.png", r"medias must be a list"),
        (b"\x89PNG", r"medias must be a list"),
        (7, r"medias must be a list"),
        ([{"type": "audio", "audio": b"x"}], r"unsupported media type 'audio'"),
        ([{"image": Image.new("RGB", (4, 4))}], r"unsupported media type None"),
        ([{"type": "image"}], r"'image' key"),
        ([{"type": "image", "img": Image.new("RGB", (4, 4))}], r"'image' key"),
        ([{"type": "video_chunk", "video_chunk": []}], r"no frames"),
        ([{"type": "video_chunk"}], r"list of frames"),
        ([{"type": "video_chunk", "video_chunk": b"abc"}], r"list of frames"),
        ([{"type": "video_chunk", "video_chunk": 3}], r"list of frames"),
    ],
)
def test_wrong_types(proc, medias, match):
    _raises(proc, medias, KimiInputError, match)


def test_wrong_type_in_media_tokens_calculator(proc):
    with pytest.raises(KimiInputError, match="unsupported image type int"):
        proc.media_tokens_calculator(img(5))
    with pytest.raises(KimiInputError, match="unsupported media type"):
        proc.media_tokens_calculator({"type": "nope"})


def test_bad_video_frame_type(proc):
    frames = [rand_image(1, 64, 48), 17, rand_image(2, 64, 48)]
    _raises(proc, [video(frames)], KimiInputError, r"unsupported image type int")


# -- arrays and tensors ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "array",
    [
        np.zeros((0, 5, 3), np.uint8),
        np.zeros((5, 0, 3), np.uint8),
        np.zeros((0, 0), np.uint8),
        np.zeros((0, 7), np.uint8),
        torch.zeros((0, 9, 3), dtype=torch.uint8),
        Image.new("RGB", (0, 0)),
        Image.new("L", (0, 12)),
    ],
    ids=["0x5x3", "5x0x3", "0x0", "0x7", "tensor0x9x3", "pil0x0", "pil0x12"],
)
def test_zero_size(proc, array):
    _raises(proc, [img(array)], KimiInputError, r"(must be positive|zero size)")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int16, np.uint16, bool])
def test_non_uint8_numpy_arrays(proc, dtype):
    array = np.ones((20, 30, 3), dtype=dtype)
    _raises(proc, [img(array)], KimiInputError, rf"uint8.*dtype {np.dtype(dtype)}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_float_tensors(proc, dtype):
    tensor = torch.rand((20, 30, 3), dtype=torch.float32).to(dtype)
    _raises(proc, [img(tensor)], KimiInputError, rf"uint8.*dtype {dtype}")


def test_nan_float_tensor(proc):
    tensor = torch.full((16, 16, 3), float("nan"))
    _raises(proc, [img(tensor)], KimiInputError, r"pixel tensors must be uint8.*torch\.float32")


def test_nan_float_array(proc):
    array = np.full((16, 16, 3), np.nan)
    _raises(proc, [img(array)], KimiInputError, r"pixel arrays must be uint8.*float64")


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((10,), r"at least 2-D.*\(10,\)"),
        ((2, 3, 4, 3), r"shape \(2, 3, 4, 3\)"),
        ((20, 30, 2), r"shape \(20, 30, 2\)"),
        ((20, 30, 5), r"shape \(20, 30, 5\)"),
        ((3, 20, 30), r"shape \(3, 20, 30\)"),  # CHW is not HWC
    ],
)
@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "torch"])
def test_wrong_ndim_or_channels(proc, shape, match, as_tensor):
    array = np.zeros(shape, np.uint8)
    obj = torch.from_numpy(array) if as_tensor else array
    _raises(proc, [img(obj)], KimiInputError, match)


def test_bad_frame_in_a_batch_propagates_from_worker(proc):
    """The multi-item path resizes on a pool; its errors must come back as the same type."""
    good = rand_image(3, 300, 200)
    bad = np.zeros((2, 3, 4, 3), np.uint8)
    _raises(proc, [img(good), img(bad), img(good)], KimiInputError, r"shape \(2, 3, 4, 3\)")
    # the processor still works afterwards (no lock left held, no poisoned pool)
    assert_parity(proc, [img(good), img(good)], KIMI_K25_CFG)


# -- encoded bytes -------------------------------------------------------------------------------
def _png(seed=0, width=50, height=60, channels=3) -> bytes:
    return encode(Image.fromarray(rand_array(seed, width, height, channels)), "PNG")


def test_empty_bytes(proc):
    _raises(proc, [img(b"")], KimiInputError, r"empty")
    _raises(proc, [img(bytearray())], KimiInputError, r"empty")


@pytest.mark.parametrize(
    "data",
    [b"not an image at all", bytes(range(256)) * 4, b"\x89PNG\r\n\x1a\n" + b"\x00" * 30],
    ids=["text", "ramp", "png-magic-only"],
)
def test_garbage_bytes(proc, data):
    _raises(proc, [img(data)], KimiInputError, r"cannot (decode|identify)")


@pytest.mark.parametrize("channels", [3, 0], ids=["rgb", "gray"])
@pytest.mark.parametrize("batch", [1, 3])
def test_truncated_png(proc, channels, batch):
    data = _png(channels=channels)
    truncated = data[: len(data) // 2]  # header intact, IDAT cut in the middle
    _raises(proc, [img(truncated)] * batch, KimiInputError, r"truncated")


def test_truncated_jpeg(proc):
    data = encode(Image.fromarray(rand_array(1, 80, 80, 3)), "JPEG")
    _raises(proc, [img(data[: len(data) // 2])], KimiInputError, r"truncated")


def test_lazily_opened_truncated_pil_image(proc):
    data = _png(channels=0)
    image = Image.open(io.BytesIO(data[: len(data) // 2]))  # opens: header only
    _raises(proc, [img(image)], KimiInputError, r"truncated")


def test_nonexistent_path(proc, tmp_path):
    _raises(proc, [img(str(tmp_path / "missing.png"))], KimiInputError, r"cannot decode")


# -- decompression bomb ------------------------------------------------------------------------
@pytest.fixture
def small_bomb_limit(monkeypatch):
    """MAX_IMAGE_PIXELS = 100: Pillow raises above 200 pixels, warns above 100."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    return 100


def _assert_too_large(exc):
    assert isinstance(exc, ImageTooLargeError)
    assert isinstance(exc, ValueError)
    assert not isinstance(exc, OSError)
    assert not isinstance(exc, Image.DecompressionBombError)


def test_bomb_encoded_png(proc, small_bomb_limit):
    data = _png(width=50, height=60)  # 3000 pixels > 2 * 100
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(data))  # sanity: Pillow itself refuses it
    exc = _raises(proc, [img(data)], ImageTooLargeError, r"(?i)decompression.bomb")
    _assert_too_large(exc)
    with pytest.raises(ImageTooLargeError):
        proc.media_tokens_calculator(img(data))
    with pytest.raises(ImageTooLargeError):
        proc.preprocess([img(rand_image(1, 5, 5)), video([data, data])])


def test_bomb_in_memory_image(proc, small_bomb_limit):
    image = rand_image(2, 30, 10)  # 300 pixels > 200
    exc = _raises(proc, [img(image)], ImageTooLargeError, r"300 pixels.*decompression-bomb")
    _assert_too_large(exc)
    _raises(proc, [img(np.asarray(image))], ImageTooLargeError, r"decompression-bomb")
    _raises(proc, [img(torch.from_numpy(np.array(image)))], ImageTooLargeError, r"bomb")


def test_between_limit_and_twice_limit_is_accepted(proc, small_bomb_limit):
    """Pillow only warns between MAX_IMAGE_PIXELS and twice that; so must we."""
    image = rand_image(3, 15, 10)  # 150 pixels: 100 < 150 <= 200
    assert_parity(proc, [img(image)], KIMI_K25_CFG)
    data = encode(image, "PNG")
    with pytest.warns(Image.DecompressionBombWarning):
        twin = Image.open(io.BytesIO(data))
        twin.load()
    assert_parity(proc, [img(data)], KIMI_K25_CFG, oracle_medias=[img(twin)])


def test_bomb_limit_disabled(proc, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    assert_parity(proc, [img(rand_image(4, 40, 30))], KIMI_K25_CFG)


# -- config ------------------------------------------------------------------------------------
REQUIRED = [
    "patch_size",
    "merge_kernel_size",
    "in_patch_limit",
    "patch_limit_on_one_side",
    "image_mean",
    "image_std",
]


@pytest.mark.parametrize("key", REQUIRED)
def test_config_missing_key(key):
    cfg = {k: v for k, v in KIMI_K25_CFG.items() if k != key}
    with pytest.raises(KimiConfigError, match=rf"missing required key.*{key}"):
        FusedKimiProcessor(cfg)
    with pytest.raises(KimiConfigError, match=key):
        KimiMediaConfig.from_dict(cfg)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("patch_size", 14.0),
        ("patch_size", "14"),
        ("patch_size", True),
        ("patch_size", 0),
        ("patch_size", -14),
        ("patch_size", None),
        ("merge_kernel_size", [2, 3]),
        ("merge_kernel_size", []),
        ("merge_kernel_size", 2.5),
        ("in_patch_limit", 0),
        ("in_patch_limit", "16384"),
        ("patch_limit_on_one_side", -1),
        ("fixed_output_tokens", 1.5),
        ("in_patch_limit_each_frame", 0),
        ("in_patch_limit_video", "x"),
        ("temporal_merge_kernel_size", 0),
        ("image_std", [0.5, 0.0, 0.5]),
        ("image_std", 0),
        ("image_std", [0.5, 0.5]),
        ("image_mean", [0.5, float("nan"), 0.5]),
        ("image_mean", "abc"),
        ("image_mean", None),
    ],
)
def test_config_bad_values(key, value):
    cfg = dict(KIMI_K25_CFG, **{key: value})
    with pytest.raises(KimiConfigError, match=key):
        FusedKimiProcessor(cfg)


@pytest.mark.parametrize("cfg", [None, [1, 2], "cfg", 14])
def test_config_not_a_mapping(cfg):
    with pytest.raises(KimiConfigError, match="must be a mapping"):
        FusedKimiProcessor(cfg)
