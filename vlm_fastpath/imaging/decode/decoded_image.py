"""A decoded image whose Pillow pixel store is filled only when something asks for it.

Why: the codec libraries decode into a numpy array of 1-4 bytes a pixel; Pillow keeps RGB as
4 bytes a pixel, and copying the array into a Pillow image (12 MP: 25-30 ms on 2 cores) ate
the decoder's whole gain (issue #30). vlm-fastpath's processors, and numpy through
``__array_interface__``, read the array itself: the pixels stay 3-channel from the decoder to
the resampler. Anything else that reaches for Pillow's store (``im``: resize, convert to
another mode, paste, save, getpixel, ...) gets it filled then, once, with the same bytes, and
from then on the image is an ordinary Pillow image.

What it stands for: the loaded image the engine's loader would hold (mode, size, ``info``,
pixels). ``copy()`` shares the read-only array where Pillow's copy would hold equal pixels (and
so does ``convert()`` to the image's own mode, which Pillow answers with ``copy()``). ``load()``
answers a pixel access that fills the store on first use, so a caller that loads and discards
the answer (vLLM's ``load_bytes``) costs nothing. ``==`` compares it with a plain
``Image.Image`` by content, as Pillow compares two images of one class. Arrays handed out
before the store is filled are snapshots, as Pillow's are.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from PIL import Image

# Modes held here, with the shape numpy gives a Pillow image of that mode (``np.asarray``).
CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_FILL_LOCK = threading.Lock()
# Attributes a copy that shares the pixels keeps: work prepared on them while they decoded
# (``speculation``; vLLM's EXIF step answers a copy for every image that needs no turn).
CARRIED = ("_vlm_fastpath_prepared",)


def supported() -> bool:
    """This Pillow keeps its store behind an ``im`` property (Pillow 11+), which is what lets
    the store be filled on first use; elsewhere the decode layer fills it at once."""
    return isinstance(Image.Image.__dict__.get("im"), property)


def pillow_shape(mode: str, size: tuple[int, int]) -> tuple[int, ...]:
    """The array shape numpy gives an image of ``mode`` and ``size`` (``(H, W)`` for L)."""
    width, height = size
    channels = CHANNELS[mode]
    return (height, width) if channels == 1 else (height, width, channels)


class _PixelAccess:
    """``load()``'s answer before the store exists: Pillow's own access, made on first use."""

    __slots__ = ("_image", "_access")

    def __init__(self, image: DecodedImage) -> None:
        self._image = image
        self._access: Any = None

    def _real(self) -> Any:
        if self._access is None:
            self._access = self._image.im.pixel_access(self._image.readonly)
        return self._access

    def __getitem__(self, xy: Any) -> Any:
        return self._real()[xy]

    def __setitem__(self, xy: Any, value: Any) -> None:
        self._real()[xy] = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)


class DecodedImage(Image.Image):
    """A loaded image of mode L, LA, RGB or RGBA backed by a read-only decoded array."""

    _pixels: np.ndarray | None = None  # None after unpickling: an ordinary image then

    def __init__(
        self, pixels: np.ndarray, mode: str, info: dict[Any, Any], format: str | None = None
    ) -> None:
        super().__init__()
        size = (pixels.shape[1], pixels.shape[0])
        shaped = pixels.reshape(pillow_shape(mode, size))
        if not shaped.flags.c_contiguous or shaped.dtype != np.uint8:
            raise ValueError("decoded pixels must be C-contiguous uint8")
        shaped.setflags(write=False)
        self._pixels = shaped
        self._mode = mode
        self._size = size
        self.info = info
        self.format = format

    # -- the held array ----------------------------------------------------------------------
    def held(self) -> np.ndarray | None:
        """The decoded array while Pillow's store is unfilled (and the image open), else None."""
        return self._pixels if self._im is None else None

    def _fill(self) -> None:
        pixels = self._pixels
        if pixels is None or self._im is not None:
            return
        store = Image.new(self.mode, self.size, None)
        store.frombytes(pixels, "raw", self.mode)
        with _FILL_LOCK:
            if self._im is None:
                self._im = store.im

    @property  # type: ignore[override]
    def im(self) -> Any:
        if self._im is None:
            self._fill()
        return Image.Image.im.fget(self)  # type: ignore[attr-defined]

    @im.setter
    def im(self, value: Any) -> None:
        Image.Image.im.fset(self, value)  # type: ignore[attr-defined]

    # -- Pillow methods that need no store ---------------------------------------------------
    def load(self) -> Any:
        if self.held() is not None:
            return _PixelAccess(self)
        return super().load()

    def copy(self) -> Image.Image:
        held = self.held()
        if held is None:
            return super().copy()
        twin = DecodedImage(held, self.mode, self._copy_info())
        for name in CARRIED:  # same pixels, so the same work stands for the copy
            if name in self.__dict__:
                twin.__dict__[name] = self.__dict__[name]
        return twin

    __copy__ = copy

    def tobytes(self, encoder_name: str = "raw", *args: Any) -> bytes:
        held = self.held()
        if held is not None and encoder_name == "raw" and args in ((), (self.mode,)):
            return held.tobytes()
        return super().tobytes(encoder_name, *args)

    @property
    def __array_interface__(self) -> dict[str, Any]:  # type: ignore[override]
        held = self.held()
        if held is None:
            return super().__array_interface__
        # numpy keeps this image (and so the array) alive as the new array's base.
        return {
            "version": 3,
            "shape": held.shape,
            "typestr": "|u1",
            "data": (held.__array_interface__["data"][0], True),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Image.Image) or type(other) not in (Image.Image, DecodedImage):
            return False
        return (
            self.mode == other.mode
            and self.size == other.size
            and self.info == other.info
            and _palette(self) == _palette(other)
            and self.tobytes() == other.tobytes()
        )

    def __getstate__(self) -> list[Any]:
        if self.held() is None:
            return super().__getstate__()
        return [self.info, self.mode, self.size, None, self.tobytes()]

    __hash__ = None  # type: ignore[assignment]  # as Image.Image: equal by content, unhashable


def _palette(image: Image.Image) -> Any:
    # A held image has no palette (its modes have none); asking Pillow would fill the store.
    return None if held_pixels(image) is not None else image.getpalette()


def held_pixels(image: Any) -> np.ndarray | None:
    """The read-only decoded array behind ``image`` (numpy's shape for its mode), when it is a
    :class:`DecodedImage` whose Pillow store is still unfilled; else None."""
    return image.held() if isinstance(image, DecodedImage) else None


def held_rgb(image: Any) -> np.ndarray | None:
    """:func:`held_pixels` of an RGB image, as uint8 ``[H, W, 3]``; None otherwise."""
    held = held_pixels(image)
    return held if held is not None and image.mode == "RGB" else None
