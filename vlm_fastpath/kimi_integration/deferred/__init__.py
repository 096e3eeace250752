"""Deferred preprocessing: ship each image's smallest exact form to the vision owner.

See :mod:`.transport` (the sender's decision and the payload), :mod:`.processor` (eager
reference, sender ``prepare`` and owner ``run``), :mod:`.resize` (Pillow-exact bicubic on any
torch device) and :mod:`.background` (Kimi K3's transparent-background fill).
"""

from .background import K25_BACKGROUND, BackgroundConfig, fill_transparent_bg
from .parity import MismatchHistogram, mismatch_histogram
from .processor import RESIZE_BACKENDS, DeferredKimiProcessor
from .resize import pillow_resize, torch_antialias_resize
from .transport import (
    DEFERRED_PREPROCESSING_KEY,
    DeferredMedia,
    DeferredPayload,
    FramePayload,
    TransportDecision,
    TransportForm,
    choose_form,
    decoder_fingerprint,
    processed_bytes,
    to_chw_uint8,
)

__all__ = [
    "DEFERRED_PREPROCESSING_KEY",
    "K25_BACKGROUND",
    "RESIZE_BACKENDS",
    "BackgroundConfig",
    "DeferredKimiProcessor",
    "DeferredMedia",
    "DeferredPayload",
    "FramePayload",
    "MismatchHistogram",
    "TransportDecision",
    "TransportForm",
    "choose_form",
    "decoder_fingerprint",
    "fill_transparent_bg",
    "mismatch_histogram",
    "pillow_resize",
    "processed_bytes",
    "to_chw_uint8",
    "torch_antialias_resize",
]
