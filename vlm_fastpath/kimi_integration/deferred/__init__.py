"""Deferred preprocessing: ship each image's smallest exact form to the vision owner.

Two pixel recipes (``DeferredKimiProcessor(..., recipe=...)``):

- ``"k25"`` (default): Kimi K2.5/K2.6's checkpoint processor, Pillow-exact
  (``convert("RGB")``, Pillow bicubic on uint8, LUT normalize); :mod:`.resize` ports Pillow's
  resampler bit-exactly to any torch device.
- ``"k3"``: the Kimi K3 release's torch arithmetic (SGLang 0.5.17+), not Pillow: alpha kept,
  float ``interpolate(bicubic, antialias=True)`` + round/clamp, the background fill after the
  resize, ``addcmul`` normalize (:mod:`.k3`).

See :mod:`.transport` (staging, the sender's decision and the payload), :mod:`.processor`
(eager reference, sender ``prepare`` and owner ``run``) and :mod:`.background` (Kimi K3's
transparent-background fill).
"""

from .background import (
    K25_BACKGROUND,
    BackgroundConfig,
    fill_transparent_bg,
    fill_transparent_bg_float,
)
from .k3 import k3_normalization, k3_resize
from .parity import MismatchHistogram, mismatch_histogram
from .processor import K3_RESIZE_BACKENDS, RESIZE_BACKENDS, DeferredKimiProcessor
from .resize import pillow_resize, torch_antialias_resize
from .transport import (
    DEFERRED_PREPROCESSING_KEY,
    RECIPES,
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
    "K3_RESIZE_BACKENDS",
    "K25_BACKGROUND",
    "RECIPES",
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
    "fill_transparent_bg_float",
    "k3_normalization",
    "k3_resize",
    "mismatch_histogram",
    "pillow_resize",
    "processed_bytes",
    "to_chw_uint8",
    "torch_antialias_resize",
]
