"""Exceptions raised for bad input, so callers can tell a user error from a bug.

All derive from ``ValueError`` because engines already map ``ValueError`` raised while
processing a request to a 400-style "bad request" answer instead of crashing a worker.
"""

from __future__ import annotations


class KimiProcessorError(ValueError):
    """Base class for every error the Kimi processor raises on purpose."""


class KimiConfigError(KimiProcessorError):
    """The ``media_proc_cfg`` is missing a key or holds a value of the wrong kind."""


class KimiInputError(KimiProcessorError):
    """A media item cannot be turned into pixels (wrong type, empty, wrong dtype...)."""


class ImageTooLargeError(KimiInputError):
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
