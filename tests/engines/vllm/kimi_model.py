"""A local Kimi K2.5 "checkpoint" and the context vLLM's processing info is built with.

Used by the vLLM engine tests and ``benchmarks/vllm_processor.py``. Everything is offline:
``preprocessor_config.json`` carries ``media_proc_cfg`` (and an ``auto_map`` to a small remote
processor of our own, which vLLM <= 0.24 loads with ``trust_remote_code``), and the processing
context gives ``KimiK25ProcessingInfo.__init__`` the three things it reads: the model config
(path, revision, trust_remote_code), the HF config (placeholder token id) and a tokenizer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.kimi_integration.reference_kimi import KIMI_K25_CFG

HERE = Path(__file__).resolve().parent
MEDIA_PAD = "<|media_pad|>"
MEDIA_PAD_ID = 163605


def make_model_dir(root: Path, media_proc_cfg: dict[str, Any] | None = None) -> Path:
    """Write a minimal Kimi K2.5 model folder under ``root`` and return it."""
    model = Path(root) / "kimi-k25-tiny"
    model.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "remote_kimi_processor.py", model / "kimi_test_processor.py")
    config = {
        "media_proc_cfg": dict(media_proc_cfg or KIMI_K25_CFG),
        "auto_map": {"AutoImageProcessor": "kimi_test_processor.KimiTestImageProcessor"},
    }
    (model / "preprocessor_config.json").write_text(json.dumps(config, indent=2))
    (model / "config.json").write_text(
        json.dumps({"model_type": "kimi_k25", "media_placeholder_token_id": MEDIA_PAD_ID})
    )
    return model


class StubTokenizer:
    """The tokenizer calls ``KimiK25ProcessingInfo`` and ``KimiK25Processor`` make."""

    unk_token_id = None

    def convert_tokens_to_ids(self, token: str) -> int:
        return MEDIA_PAD_ID if token == MEDIA_PAD else 0

    def decode(self, token_id: Any) -> str:
        return MEDIA_PAD if token_id == MEDIA_PAD_ID else "?"

    def __call__(self, texts: list[str]) -> dict[str, list[list[int]]]:
        ids = [[1] + [MEDIA_PAD_ID] * text.count(MEDIA_PAD) + [2] for text in texts]
        return {"input_ids": ids}


class StubProcessingContext:
    """Stands in for vLLM's ``InputProcessingContext`` (only what the Kimi info reads)."""

    def __init__(self, model_dir: Path, trust_remote_code: bool = True) -> None:
        self.model_config = SimpleNamespace(
            model=str(model_dir), revision=None, trust_remote_code=trust_remote_code
        )
        self.tokenizer = StubTokenizer()
        self.hf_config = SimpleNamespace(
            media_placeholder_token_id=MEDIA_PAD_ID, image_token_id=MEDIA_PAD_ID
        )

    def get_hf_config(self, *args: Any, **kwargs: Any) -> Any:
        return self.hf_config

    def get_tokenizer(self) -> StubTokenizer:
        return self.tokenizer


def processing_info(model_dir: Path) -> Any:
    """Run vLLM's real ``KimiK25ProcessingInfo.__init__`` and return the info object."""
    from vllm.model_executor.models import kimi_k25

    return kimi_k25.KimiK25ProcessingInfo(StubProcessingContext(model_dir))


def clear_processor_caches() -> None:
    """Forget processors vLLM cached, so the next info object loads afresh."""
    import sys

    for name in ("vllm.transformers_utils.processor", "vllm.model_executor.models.kimi_k25"):
        loader = getattr(sys.modules.get(name), "cached_get_image_processor", None)
        clear = getattr(loader, "cache_clear", None)
        if clear is not None:
            clear()
