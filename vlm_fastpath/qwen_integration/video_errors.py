"""Errors of the Qwen-VL video processor: Qwen's input errors and the model-neutral ones.

Both bases are ``ValueError``s, the class transformers' video processors raise for the same
inputs (mismatched frames, too few frames for Qwen3-VL, a bad aspect ratio), and what the
engines answer with a "bad request" instead of failing the worker.
"""

from __future__ import annotations

from vlm_fastpath.imaging.errors import ImagingInputError, PixelLimitError

from .errors import QwenInputError


class QwenVideoInputError(QwenInputError, ImagingInputError):
    """A video cannot be turned into patches: no frames, frames of different sizes in one
    video, a dtype or channel count no frame decoder produces, too few frames for Qwen3-VL."""


class QwenVideoTooLargeError(QwenVideoInputError, PixelLimitError):
    """A video whose frames exceed Pillow's decompression-bomb limit
    (``2 * Image.MAX_IMAGE_PIXELS``, the image processors' limit), or with more frames than
    :data:`~vlm_fastpath.qwen_integration.video_processor.MAX_FRAMES`."""
