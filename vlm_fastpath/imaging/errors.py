"""The one error base of the model side: every processor's errors derive from it.

``ValueError`` because the engines answer a ``ValueError`` raised while processing a request
with a "bad request" instead of failing the worker. Shared kernels raise these classes; each
model's processor derives its own from them so that a caller catching ``ImagingError`` gets
every model's bad-input errors, and one catching ``KimiInputError`` keeps getting Kimi's.
"""

from __future__ import annotations


class ImagingError(ValueError):
    """Base class for every error vlm-fastpath's model side raises on purpose."""


class ImagingConfigError(ImagingError):
    """A setting (config file, constructor or per-call override) that cannot be honoured exactly."""


class ImagingInputError(ImagingError):
    """An input cannot be turned into pixels (wrong type, dtype, shape, empty, corrupt...)."""


class PixelLimitError(ImagingInputError):
    """The input exceeds a pixel limit (Pillow's decompression-bomb limit, ``2 * MAX_IMAGE_PIXELS``,
    or an engine's). Pillow's own ``DecompressionBombError`` is not an ``OSError``, so code that
    only catches ``OSError`` lets it escape; this ``ValueError`` subclass does not."""
