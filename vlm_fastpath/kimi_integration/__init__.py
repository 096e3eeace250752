"""Model-side math for Kimi K2.5/K2.6 (MoonViT) image input; imports no engine."""

from .config import KimiMediaConfig
from .errors import ImageTooLargeError, KimiConfigError, KimiInputError, KimiProcessorError
from .navit_resize import ResizePlan, navit_resize_image, plan_image, plan_video_chunk
from .normalize_lut import build_normalize_lut
from .processor import FusedKimiProcessor

__all__ = [
    "FusedKimiProcessor",
    "ImageTooLargeError",
    "KimiConfigError",
    "KimiInputError",
    "KimiMediaConfig",
    "KimiProcessorError",
    "ResizePlan",
    "build_normalize_lut",
    "navit_resize_image",
    "plan_image",
    "plan_video_chunk",
]
