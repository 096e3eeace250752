"""Exceptions raised for bad input, so callers can tell a user error from a bug.

All derive from :mod:`vlm_fastpath.imaging.errors` (so from ``ValueError``, which engines
map to a 400-style "bad request" answer instead of crashing a worker): the shared kernels raise
these classes when Kimi's processor calls them.
"""

from __future__ import annotations

from ..imaging.errors import ImagingConfigError, ImagingError, ImagingInputError, PixelLimitError


class KimiProcessorError(ImagingError):
    """Base class for every error the Kimi processor raises on purpose."""


class KimiConfigError(KimiProcessorError, ImagingConfigError):
    """The ``media_proc_cfg`` is missing a key or holds a value of the wrong kind."""


class KimiInputError(KimiProcessorError, ImagingInputError):
    """A media item cannot be turned into pixels (wrong type, empty, wrong dtype...)."""


class ImageTooLargeError(KimiInputError, PixelLimitError):
    """The image exceeds Pillow's decompression-bomb limit (``2 * Image.MAX_IMAGE_PIXELS``).

    Pillow's own ``DecompressionBombError`` is not an ``OSError``; code that only catches
    ``OSError`` lets it escape, so it is turned into this ``ValueError`` subclass.
    """


class DeferredPayloadError(KimiProcessorError):
    """A deferred-preprocessing payload cannot be processed on the vision owner.

    Raised for an object that is not a payload, a payload of another format version, one
    built under a different ``media_proc_cfg`` or background config, or encoded bytes whose
    decoder (Pillow and its codec libraries) differs from the sender's, so the decoded
    pixels could differ from the eager path's.
    """
