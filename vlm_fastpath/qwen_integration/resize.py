"""The two resizes the transformers Qwen-VL processors use, each reproduced by construction.

torchvision processor: ``tvF.resize(uint8, BICUBIC, antialias=True)``, which (torchvision 0.29,
CPU) calls torch's native uint8 antialiased bicubic ``interpolate``; we call that same torch
op (an integer kernel with int16 weights: the bytes do not depend on the CPU's SIMD path).
A torchvision that resized differently (older ones went through float32) is caught by
``compat.check_compatible``.

PIL processor: Pillow's ``Image.resize(BICUBIC)`` of the RGB image; where the installed Pillow
is one the Pillow-exact numba resampler is verified for (:mod:`vlm_fastpath.kimi_integration.
resample`), that resampler runs instead, on every core (same bytes, tested against Pillow).

A batch is resized on a thread pool, one image per worker (both resizes release the GIL).
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..imaging.decode.decoded_image import held_rgb
from ..imaging.pillow_pixels import rgbx_copy
from ..imaging.resample import InputRules
from .errors import QwenInputError

# Arrays from PIL images are read-only; torch only reads them, so its warning is noise here.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning,
    module=__name__,
)


class Resizer(Protocol):
    """Turns an RGB image (PIL or HWC uint8 array) into an HWC uint8 array of (height, width):
    3 channels, or 4 (Pillow's RGBX bytes, the 4th never read)."""

    name: str

    def __call__(self, image: Image.Image | np.ndarray, height: int, width: int) -> np.ndarray:
        ...


class TorchResizer:
    """torch's uint8 antialiased bicubic, i.e. what torchvision's ``resize`` runs on CPU.

    One call on the calling thread. (Splitting the two separable passes into row/column bands
    on two threads gives the same bytes, but measured 3-4x slower on 2 cores: the concurrent
    calls contend inside torch.)
    """

    name = "torch-uint8-bicubic-aa"

    def __call__(self, image: Image.Image | np.ndarray, height: int, width: int) -> np.ndarray:
        src = np.asarray(image) if isinstance(image, Image.Image) else image
        if src.shape[:2] == (height, width):
            return src  # torchvision returns the image untouched
        return _interpolate(src, height, width)


def _interpolate(src: np.ndarray, height: int, width: int) -> np.ndarray:
    # A channels-last view of the HWC bytes: no copy in, HWC bytes out. No other torch op
    # runs here: torch's OpenMP pool hangs in a forked child of a process that used it.
    x = torch.from_numpy(np.ascontiguousarray(src)).permute(2, 0, 1).unsqueeze(0)
    resized = F.interpolate(
        x, size=[height, width], mode="bicubic", align_corners=False, antialias=True
    )
    return resized[0].permute(1, 2, 0).numpy()


class PillowResizer:
    """Pillow's BICUBIC ``Image.resize`` (what the PIL processor runs); releases the GIL."""

    name = "pillow-bicubic"

    def __call__(self, image: Image.Image | np.ndarray, height: int, width: int) -> np.ndarray:
        if not isinstance(image, Image.Image):
            image = Image.fromarray(np.ascontiguousarray(image))
        if image.size == (width, height):
            # The PIL processor copies the pixels out here; so do we, but through Pillow's own
            # copy of its RGBX bytes (4032x3024: ~5 ms against ~40 for np.asarray), which the
            # patch kernel reads as RGB.
            held = held_rgb(image)  # decoded by imaging.decode: the decoder's own array
            if held is not None:
                return held
            copied = rgbx_copy(image)  # None for other modes: np.asarray then
            if copied is None:
                return np.asarray(image)
            return copied.reshape(height, width, 4)
        try:
            resized = image.resize((width, height), resample=Image.Resampling.BICUBIC)
        except OSError as exc:  # truncated or corrupt encoded data surfaces at load time
            raise QwenInputError(f"cannot decode image: {exc}") from exc
        return np.asarray(resized)


_QWEN_INPUT = InputRules(check_size=None, input_error=QwenInputError)


class KernelPillowResizer(PillowResizer):
    """The same bytes as :class:`PillowResizer`, from the Pillow-exact numba resampler with
    row bands on every core; Pillow itself where that resampler is not enabled (unverified
    Pillow release, no numba), decided on every call."""

    name = "pillow-bicubic-numba"

    def __call__(self, image: Image.Image | np.ndarray, height: int, width: int) -> np.ndarray:
        from ..imaging import resample

        size = image.size if isinstance(image, Image.Image) else (image.shape[1], image.shape[0])
        if size == (width, height) or not resample.kernel_enabled():
            return super().__call__(image, height, width)
        # Qwen's processors apply no pixel limit to arrays; a corrupt image surfaces when its
        # pixels are read, as a QwenInputError.
        return resample.resize_rgb(image, width, height, rules=_QWEN_INPUT)
