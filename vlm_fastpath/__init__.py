"""vlm-fastpath: a fast image input path for vision-language models in vLLM and SGLang."""

from __future__ import annotations

__version__ = "0.1.0"
