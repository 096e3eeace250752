"""Tiny Qwen2.5-VL / Qwen3-VL checkpoint folders for the engine tests, built offline.

No weights: the engines' processors only read ``config.json``, the tokenizer and
``preprocessor_config.json``. The tokenizer is the serving benchmark's recipe (a byte-level BPE
trained locally with the Qwen special tokens, the Qwen2-VL chat template), so the folders need
nothing from the network. Test-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.serving.checkpoints import (
    QWEN_CHAT_TEMPLATE,
    QWEN_PREPROCESSOR,
    QWEN_SPECIALS,
    _fast_tokenizer,
    _round_up,
    _train_tokenizer,
)

QWEN25 = "qwen2.5-vl-tiny"
QWEN3 = "qwen3-vl-tiny"

# Qwen3-VL's own image constants (patch 16, mean/std 0.5), as its checkpoints ship them.
QWEN3_PREPROCESSOR: dict[str, Any] = {
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen3VLProcessor",
}
QWEN3_VIDEO_PREPROCESSOR: dict[str, Any] = {
    "size": {"shortest_edge": 4096, "longest_edge": 25165824},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "video_processor_type": "Qwen3VLVideoProcessor",
    "processor_class": "Qwen3VLProcessor",
}


def _tokenizer(out: Path) -> dict[str, int]:
    """Train and save the tokenizer; returns the special tokens' ids."""
    tok = _fast_tokenizer(
        _train_tokenizer(QWEN_SPECIALS, 1024), eos_token="<|im_end|>",
        pad_token="<|endoftext|>", unk_token=None, model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = QWEN_CHAT_TEMPLATE
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN_CHAT_TEMPLATE)
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    ids["vocab"] = _round_up(len(tok))
    return ids


def _text_config(ids: dict[str, int]) -> dict[str, Any]:
    return {
        "vocab_size": ids["vocab"], "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 64, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                            "mrope_section": [8, 12, 12]},
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }


def _token_ids(ids: dict[str, int]) -> dict[str, int]:
    return {
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


def build_qwen25(out: Path, preprocessor: dict[str, Any] | None = None) -> Path:
    """A Qwen2.5-VL folder (config, tokenizer, preprocessor_config.json) under ``out``."""
    from transformers import Qwen2_5_VLConfig

    out.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer(out)
    config = Qwen2_5_VLConfig(
        text_config=_text_config(ids),
        vision_config={
            "depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 1,
            "out_hidden_size": 128, "fullatt_block_indexes": [0], "window_size": 112,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        tie_word_embeddings=False,
        **_token_ids(ids),
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    config.save_pretrained(out)
    data = dict(QWEN_PREPROCESSOR if preprocessor is None else preprocessor)
    (out / "preprocessor_config.json").write_text(json.dumps(data, indent=2) + "\n")
    return out


def build_qwen3(out: Path) -> Path:
    """A Qwen3-VL folder; raises ImportError where transformers has no Qwen3-VL."""
    from transformers import Qwen3VLConfig

    out.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer(out)
    text = _text_config(ids)
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000000.0,
                               "mrope_section": [8, 12, 12], "mrope_interleaved": True}
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={
            "depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 1,
            "out_hidden_size": 128, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        tie_word_embeddings=False,
        **_token_ids(ids),
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.save_pretrained(out)
    (out / "preprocessor_config.json").write_text(json.dumps(QWEN3_PREPROCESSOR, indent=2))
    (out / "video_preprocessor_config.json").write_text(
        json.dumps(QWEN3_VIDEO_PREPROCESSOR, indent=2)
    )
    return out


def ensure(root: Path, name: str = QWEN25) -> Path:
    """The folder ``root/name``, built on first use."""
    out = Path(root) / name
    if (out / "preprocessor_config.json").exists():
        return out
    return {QWEN25: build_qwen25, QWEN3: build_qwen3}[name](out)
