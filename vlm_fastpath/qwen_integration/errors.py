"""Exceptions raised for bad input or settings, so callers can tell a user error from a bug.

All derive from :mod:`vlm_fastpath.imaging.errors` (so from ``ValueError``: the engines map a
``ValueError`` raised while processing a request to a "bad request" answer instead of failing
the worker); the shared kernels raise these classes when Qwen's processor calls them.
"""

from __future__ import annotations

from ..imaging.errors import ImagingConfigError, ImagingError, ImagingInputError, PixelLimitError


class QwenProcessorError(ImagingError):
    """Base class for every error the Qwen-VL processor raises on purpose."""


class QwenConfigError(QwenProcessorError, ImagingConfigError):
    """A setting (config file, constructor or per-call override) we cannot honour exactly."""


class QwenInputError(QwenProcessorError, ImagingInputError):
    """An image cannot be turned into pixels (wrong type, dtype, shape, empty...)."""


class UnsupportedTransparencyError(QwenInputError):
    """A transparent image, where the installed transformers converts those in a way we do not
    reproduce (``rgb_rules``): the engine's own processor answers it instead."""


class AspectRatioError(QwenInputError):
    """``smart_resize`` rejects the image: aspect ratio above 200 or a degenerate target."""


class QwenImageTooLargeError(QwenInputError, PixelLimitError):
    """The image exceeds Pillow's decompression-bomb limit (``2 * Image.MAX_IMAGE_PIXELS``)."""
