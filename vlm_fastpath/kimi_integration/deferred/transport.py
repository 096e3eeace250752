"""The sender side of deferred preprocessing: which form an image crosses the boundary in.

Per media item the sender (tokenizer/scheduler process) picks the form with the fewest bytes
that still yields exactly the pixels of the eager path:

- ``encoded``: the bytes the request carried (JPEG, PNG, ...). The owner decodes them with
  the same Pillow build, which is deterministic, so the pixels are the eager path's. Only
  for inputs that arrived encoded.
- ``raw``: uint8 CHW pixels: 1 channel for 8-bit gray (``convert("RGB")`` only replicates
  it), 3 for RGB, 4 when a K3 background fill needs the alpha channel.
- ``eager``: the processed float32 ``pixel_values``, when they are smaller than every exact
  deferred form (large downscaled lossless inputs) or when the input has no exact uint8 form
  (float tensors: the eager processor decides what they mean, or refuses them).

Ties prefer ``raw`` (no decode on the owner), then ``encoded``, then ``eager``; so with no
encoded form the rule is Kimi K3's: defer when raw bytes <= processed bytes.

Staging (which pixels the raw form holds) follows the recipe (:data:`RECIPES`):

- ``"k25"``: the checkpoint's ``convert("RGB")``; alpha travels (RGBA) only when a fill is
  configured and Pillow reports transparency data (``has_transparency_data``).
- ``"k3"``: the release's ``to_chw_uint8`` (SGLang ``kimi_k3_image_processing``): a PIL image
  whose mode is not ``RGB`` and that has an ``A`` band or ``"transparency"`` in its info is
  converted to ``RGBA``, anything else to ``RGB`` (an ``RGB`` image with a transparency key
  stays opaque); 2-D / 1-channel uint8 arrays are gray (replicated to 3 channels on the
  owner); 4-channel arrays keep alpha. With a fill the 4 channels travel; without one
  (``drop``) only the first 3 of that very ``RGBA`` conversion travel, which is exact because
  the resize treats channels independently and the release drops alpha after it.
"""

from __future__ import annotations

import enum
import functools
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import PIL
import torch
from PIL import Image, features

from ...imaging.image_input import is_tensor as _is_tensor
from ...imaging.image_input import unwrap as _unwrap
from ..errors import ImageTooLargeError, KimiConfigError, KimiInputError
from ..image_input import check_pixel_count, open_encoded, tensor_to_numpy
from ..navit_resize import ResizePlan
from .background import BackgroundConfig

DEFERRED_PREPROCESSING_KEY = "_vlm_fastpath_kimi_deferred_preprocessing"
PAYLOAD_VERSION = 3  # 2: payloads name their pixel recipe; 3: frames carry their source size
RECIPES = ("k25", "k3")
FLOAT32_BYTES = 4


class TransportForm(enum.StrEnum):
    """How one media item crosses the process boundary."""

    ENCODED = "encoded"
    RAW = "raw"
    MIXED = "mixed"  # a video chunk whose frames travel partly encoded, partly raw
    EAGER = "eager"


@dataclass(frozen=True)
class TransportDecision:
    """The chosen form of one media item and every byte count it was chosen from.

    ``raw_bytes`` is ``None`` when some frame has no exact uint8 form; ``encoded_bytes`` is
    ``None`` unless every frame arrived encoded. ``processed_bytes`` is the size of the
    eager float32 ``pixel_values`` (3 x padded W x padded H x 4 per frame).
    """

    form: TransportForm
    payload_bytes: int
    raw_bytes: int | None
    processed_bytes: int
    encoded_bytes: int | None
    reason: str
    frame_forms: tuple[TransportForm, ...] = ()

    @property
    def deferred(self) -> bool:
        return self.form is not TransportForm.EAGER


def processed_bytes(plan: ResizePlan) -> int:
    """Bytes of the eager float32 ``pixel_values`` of ``plan``."""
    return plan.num_patches * 3 * plan.patch_size * plan.patch_size * FLOAT32_BYTES


def _check_size(name: str, value: Any, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise KimiInputError(f"{name} must be a non-negative int byte count, got {value!r}")


def choose_form(
    raw_bytes: int | None,
    processed: int,
    encoded_bytes: int | None = None,
) -> TransportDecision:
    """The rule for one frame/image: fewest bytes; ties prefer raw, then encoded, then eager.

    ``processed`` is required; ``raw_bytes``/``encoded_bytes`` are ``None`` when that form does
    not exist. Every size must be a non-negative int: a NaN or negative size would make the
    comparison meaningless, so it is refused.
    """
    _check_size("processed", processed, optional=False)
    _check_size("raw_bytes", raw_bytes)
    _check_size("encoded_bytes", encoded_bytes)
    candidates: list[tuple[int, int, TransportForm]] = [(processed, 2, TransportForm.EAGER)]
    if raw_bytes is not None:
        candidates.append((raw_bytes, 0, TransportForm.RAW))
    if encoded_bytes is not None:
        candidates.append((encoded_bytes, 1, TransportForm.ENCODED))
    size, _, form = min(candidates)
    if form is TransportForm.EAGER:
        if raw_bytes is None and encoded_bytes is None:
            reason = "no exact uint8 form (non-uint8 input): preprocess eagerly"
        else:
            reason = (f"processed {processed} B < deferred forms (raw {raw_bytes} B, "
                      f"encoded {encoded_bytes} B): preprocess eagerly")
    elif form is TransportForm.RAW:
        reason = f"raw {raw_bytes} B <= processed {processed} B"
        if encoded_bytes is not None:
            reason += f" and <= encoded {encoded_bytes} B"
    else:
        reason = f"encoded {encoded_bytes} B < raw {raw_bytes} B, <= processed {processed} B"
    return TransportDecision(form, size, raw_bytes, processed, encoded_bytes, reason, (form,))


@dataclass(frozen=True)
class FrameInfo:
    """What the sender knows about one frame without converting its pixels."""

    width: int
    height: int
    raw_channels: int | None  # None: no exact uint8 form
    encoded: bytes | None = None
    format: str | None = None
    mode: str | None = None  # the encoded image's mode, from its header

    @property
    def raw_bytes(self) -> int | None:
        if self.raw_channels is None:
            return None
        return self.raw_channels * self.width * self.height


def decide_media(frames: list[FrameInfo], plan: ResizePlan) -> TransportDecision:
    """Decision for one media item: per-frame raw/encoded choice, then deferred vs eager."""
    processed = processed_bytes(plan)
    raws = [f.raw_bytes for f in frames]
    raw_total = None if any(r is None for r in raws) else sum(r for r in raws if r is not None)
    all_encoded = all(f.encoded is not None for f in frames)
    encoded_total = sum(len(f.encoded) for f in frames if f.encoded is not None)
    encoded_total_or_none = encoded_total if all_encoded else None
    if len(frames) == 1:
        frame = frames[0]
        enc = None if frame.encoded is None else len(frame.encoded)
        return choose_form(frame.raw_bytes, processed, enc)
    forms: list[TransportForm] = []
    deferred_total = 0
    for frame in frames:
        options = []
        if frame.raw_bytes is not None:
            options.append((frame.raw_bytes, 0, TransportForm.RAW))
        if frame.encoded is not None:
            options.append((len(frame.encoded), 1, TransportForm.ENCODED))
        if not options:
            return TransportDecision(
                TransportForm.EAGER, processed, raw_total, processed, encoded_total_or_none,
                "a frame has no exact uint8 form (non-uint8 input): preprocess eagerly",
                (TransportForm.EAGER,) * len(frames),
            )
        size, _, form = min(options)
        forms.append(form)
        deferred_total += size
    if deferred_total > processed:
        return TransportDecision(
            TransportForm.EAGER, processed, raw_total, processed, encoded_total_or_none,
            f"processed {processed} B < deferred {deferred_total} B: preprocess eagerly",
            (TransportForm.EAGER,) * len(frames),
        )
    unique = set(forms)
    form = forms[0] if len(unique) == 1 else TransportForm.MIXED
    return TransportDecision(
        form, deferred_total, raw_total, processed, encoded_total_or_none,
        f"deferred {deferred_total} B <= processed {processed} B ({len(frames)} frames)",
        tuple(forms),
    )


# -- pixels ------------------------------------------------------------------------------------
def check_recipe(recipe: str) -> str:
    """``recipe`` itself, or :class:`KimiConfigError` naming the valid ones."""
    if recipe not in RECIPES:
        raise KimiConfigError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    return recipe


def k3_keeps_alpha(image: Image.Image) -> bool:
    """The release's K3 staging rule: ``RGBA`` when not ``RGB`` and an A band or a key."""
    return image.mode != "RGB" and ("A" in image.getbands() or "transparency" in image.info)


def image_channels(image: Image.Image, bg: BackgroundConfig, recipe: str = "k25") -> int:
    """Channels of the exact raw form of ``image`` under ``bg`` and ``recipe`` (1, 3 or 4)."""
    if recipe == "k3":
        if k3_keeps_alpha(image):
            return 4 if bg.needs_alpha else 3
        return 1 if image.mode == "L" else 3
    if bg.needs_alpha and image.has_transparency_data:
        return 4
    if image.mode == "L":
        return 1
    return 3


def _array_channels(shape: tuple[int, ...], bg: BackgroundConfig) -> int:
    if len(shape) == 2 or (len(shape) == 3 and shape[2] == 1):
        return 1
    if len(shape) == 3 and shape[2] == 3:
        return 3
    if len(shape) == 3 and shape[2] == 4:
        return 4 if bg.needs_alpha else 3
    raise KimiInputError(
        f"pixel arrays must be HxW, HxWx1, HxWx3 or HxWx4 uint8, got shape {shape}"
    )


def _read_encoded(obj: Any) -> bytes | None:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        if not data:
            raise KimiInputError("image bytes are empty")
        return data
    if isinstance(obj, (str, os.PathLike)):
        try:
            with open(obj, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise KimiInputError(f"cannot read image file {os.fspath(obj)!r}: {exc}") from exc
    return None


def inspect_frame(obj: Any, bg: BackgroundConfig, recipe: str = "k25") -> FrameInfo:
    """Size, raw channel count and encoded bytes of one frame (header only for bytes)."""
    obj = _unwrap(obj)
    encoded = _read_encoded(obj)
    if encoded is not None:
        image = open_encoded(encoded)
        width, height = image.size
        return FrameInfo(width, height, image_channels(image, bg, recipe), encoded,
                         image.format, image.mode)
    if isinstance(obj, Image.Image):
        check_pixel_count(*obj.size)
        return FrameInfo(obj.size[0], obj.size[1], image_channels(obj, bg, recipe))
    if isinstance(obj, np.ndarray) or _is_tensor(obj):
        shape = tuple(int(s) for s in obj.shape)
        if len(shape) < 2:
            raise KimiInputError(f"pixel arrays must be at least 2-D, got shape {shape}")
        width, height = shape[1], shape[0]
        is_uint8 = obj.dtype == (torch.uint8 if _is_tensor(obj) else np.uint8)
        if not is_uint8:
            return FrameInfo(width, height, None)
        channels = _array_channels(shape, bg)
        check_pixel_count(width, height)
        return FrameInfo(width, height, channels)
    raise KimiInputError(
        f"unsupported image type {type(obj).__name__}: expected PIL.Image.Image, a uint8 HWC "
        "numpy array or torch tensor, encoded bytes, or a file path"
    )


def _pil_to_chw(image: Image.Image, channels: int, recipe: str = "k25") -> torch.Tensor:
    target = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    if recipe == "k3" and channels != 1:
        target = "RGBA" if k3_keeps_alpha(image) else "RGB"  # then the first ``channels``
    try:
        if image.mode != target:
            image = image.convert(target)
        array = np.asarray(image)
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(str(exc)) from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise KimiInputError(f"cannot decode or convert image: {exc}") from exc
    if array.ndim == 2:
        array = array[:, :, None]
    array = array[:, :, :channels]
    return torch.from_numpy(np.require(array.transpose(2, 0, 1), requirements=["C", "W"]))


def to_chw_uint8(
    obj: Any, bg_config: BackgroundConfig | Any = None, device: torch.device | str | None = None,
    recipe: str = "k25",
) -> torch.Tensor | None:
    """The exact raw form of one frame: uint8 ``[C, H, W]`` with C in (1, 3, 4).

    ``None`` when the input has no exact uint8 form (float or other non-uint8 arrays and
    tensors): such inputs are preprocessed eagerly. ``C`` is 4 only when ``bg_config`` fills
    transparent pixels and the image carries transparency (by ``recipe``'s rule, see the
    module docstring); 1 for 8-bit gray images.
    """
    check_recipe(recipe)
    bg = BackgroundConfig.from_config(bg_config)
    obj = _unwrap(obj)
    encoded = _read_encoded(obj)
    if encoded is not None:
        obj = open_encoded(encoded)
    if isinstance(obj, Image.Image):
        check_pixel_count(*obj.size)
        out = _pil_to_chw(obj, image_channels(obj, bg, recipe), recipe)
    elif isinstance(obj, np.ndarray) or _is_tensor(obj):
        info = inspect_frame(obj, bg, recipe)
        if info.raw_channels is None:
            return None
        array = tensor_to_numpy(obj) if _is_tensor(obj) else obj
        if array.ndim == 2:
            array = array[:, :, None]
        array = array[:, :, : info.raw_channels]
        out = torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
    else:
        inspect_frame(obj, bg)  # raises the unsupported-type error
        raise AssertionError("unreachable")
    return out if device is None else out.to(device)


@functools.lru_cache(maxsize=1)
def decoder_fingerprint() -> tuple[tuple[str, str | None], ...]:
    """Pillow and codec library versions: equal fingerprints decode to equal pixels."""
    libs = ("jpg", "zlib", "libtiff", "webp", "jpg_2000", "avif")
    versions: list[tuple[str, str | None]] = [("pillow", PIL.__version__)]
    for lib in libs:
        try:
            versions.append((lib, features.version(lib)))
        except ValueError:  # feature unknown to this Pillow
            versions.append((lib, None))
    return tuple(versions)


# -- payload -----------------------------------------------------------------------------------
@dataclass
class FramePayload:
    """One frame on the wire: encoded bytes, or uint8 CHW pixels.

    ``width``/``height``/``channels`` (and ``mode`` for encoded bytes) are what the sender's
    plan was computed from; the owner refuses a frame whose pixels disagree with them, since
    resizing other pixels to the plan would return plausible but wrong patches.
    """

    form: TransportForm
    data: bytes | torch.Tensor
    width: int = 0
    height: int = 0
    channels: int = 0
    mode: str | None = None

    @property
    def nbytes(self) -> int:
        if isinstance(self.data, torch.Tensor):
            return self.data.numel() * self.data.element_size()
        return len(self.data)


@dataclass
class DeferredMedia:
    """One media item (image or video chunk) on the wire."""

    kind: str
    plan: ResizePlan
    decision: TransportDecision
    frames: list[FramePayload] = field(default_factory=list)
    pixel_values: torch.Tensor | None = None  # eager: float32 [N, 3, p, p]

    @property
    def nbytes(self) -> int:
        if self.pixel_values is not None:
            return self.pixel_values.numel() * self.pixel_values.element_size()
        return sum(frame.nbytes for frame in self.frames)


@dataclass
class DeferredPayload:
    """Everything the vision owner needs; plain tensors, bytes and small metadata (picklable).

    ``config``/``background``/``recipe`` are checked against the owner's; ``decoder`` against
    the owner's :func:`decoder_fingerprint` when any frame travels encoded.
    """

    medias: list[DeferredMedia]
    config: dict[str, Any]
    background: dict[str, Any]
    decoder: tuple[tuple[str, str | None], ...]
    version: int = PAYLOAD_VERSION
    recipe: str = "k25"

    @property
    def payload_bytes(self) -> int:
        """Bytes of pixel data crossing the boundary (tensor bytes + encoded bytes)."""
        return sum(media.nbytes for media in self.medias)

    @property
    def eager_bytes(self) -> int:
        """What the same request costs when every item is preprocessed eagerly."""
        return sum(media.decision.processed_bytes for media in self.medias)

    @property
    def decisions(self) -> list[TransportDecision]:
        return [media.decision for media in self.medias]

    @property
    def grid_thws(self) -> torch.Tensor:
        grids = [media.plan.grid_thw for media in self.medias]
        return torch.tensor(grids, dtype=torch.int64).reshape(len(grids), 3)


def decode_fully(data: bytes) -> Image.Image:
    """Decode encoded bytes completely (not just the header), with the package's errors.

    The sender calls this before shipping bytes, so a truncated or corrupt file is refused
    with the request instead of failing later on the vision owner.
    """
    image = open_encoded(data)
    try:
        image.load()
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(str(exc)) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise KimiInputError(f"cannot decode image: {exc}") from exc
    return image


def _mismatch(frame: FramePayload, what: str, got: str, planned: str) -> KimiInputError:
    return KimiInputError(
        f"{frame.form.value} frame does not match its plan: decoded {what} {got}, the plan "
        f"was computed from {planned}; refusing to resize other pixels to that plan"
    )


def check_frame_pixels(frame: FramePayload, chw: torch.Tensor, mode: str | None = None) -> None:
    """Raise :class:`KimiInputError` unless ``chw`` has the size/channels the plan assumed."""
    if chw.dim() != 3:
        raise KimiInputError(f"frame pixels must be [C, H, W], got shape {tuple(chw.shape)}")
    channels, height, width = (int(v) for v in chw.shape)
    if (width, height) != (frame.width, frame.height):
        raise _mismatch(frame, "size", f"{width}x{height}", f"{frame.width}x{frame.height}")
    if mode is not None and frame.mode is not None and mode != frame.mode:
        raise _mismatch(frame, "mode", repr(mode), repr(frame.mode))
    if channels != frame.channels:
        raise _mismatch(frame, "channel count", str(channels), str(frame.channels))


def decode_frame(frame: FramePayload, bg: BackgroundConfig, recipe: str = "k25") -> torch.Tensor:
    """Host-side uint8 CHW pixels of a frame; decoded bytes are checked against the plan's size."""
    if frame.form is TransportForm.RAW:
        if not isinstance(frame.data, torch.Tensor):
            raise KimiInputError("raw frame data must be a uint8 tensor")
        return frame.data  # the owner checks dtype, then size (check_frame_pixels)
    if not isinstance(frame.data, (bytes, bytearray, memoryview)):
        raise KimiInputError("encoded frame data must be bytes")
    image = open_encoded(bytes(frame.data))
    if image.size != (frame.width, frame.height):
        w, h = image.size
        raise _mismatch(frame, "size", f"{w}x{h}", f"{frame.width}x{frame.height}")
    chw = _pil_to_chw(image, image_channels(image, bg, recipe), recipe)
    check_frame_pixels(frame, chw, image.mode)
    return chw
