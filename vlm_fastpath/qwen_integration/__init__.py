"""Model-side math for Qwen2/2.5/3-VL image input; imports no engine."""

from .compat import check_compatible
from .config import PIL, TORCHVISION, QwenImageConfig
from .errors import (
    AspectRatioError,
    QwenConfigError,
    QwenImageTooLargeError,
    QwenInputError,
    QwenProcessorError,
)
from .hf_config import config_from_hf
from .normalize_lut import build_lut
from .processor import FastQwen2VLImageProcessor
from .smart_resize import smart_resize

__all__ = [
    "PIL",
    "TORCHVISION",
    "AspectRatioError",
    "FastQwen2VLImageProcessor",
    "QwenConfigError",
    "QwenImageConfig",
    "QwenImageTooLargeError",
    "QwenInputError",
    "QwenProcessorError",
    "build_lut",
    "check_compatible",
    "config_from_hf",
    "smart_resize",
]
