"""Build tiny random-weight checkpoints for the serving benchmark, fully offline.

    python -m benchmarks.serving.checkpoints [--out .cache/serving/models] [--force]

Run it with the serving environment's python (it needs torch, transformers and tokenizers).
Nothing it writes is committed: the folders are rebuilt from this recipe and cached.

- ``qwen2.5-vl-tiny``: Qwen2.5-VL with random weights saved by transformers (hidden 128,
  2 layers, head_dim 64, vision depth 2), a byte-level BPE tokenizer trained here on local
  text plus the Qwen special tokens, the Qwen2-VL chat template and the checkpoint's
  preprocessor_config.json of the real Qwen2.5-VL-7B-Instruct (min_pixels 3136, max_pixels
  12845056, CLIP mean/std), so images up to 12.8 MP keep their size, as in production. Both
  vision blocks use window attention (``fullatt_block_indexes`` []; the real model has full
  attention blocks): with one full-attention block a 4032x3024 image (62208 patches) took
  ~40 s of vision tower on 2 cores against ~0.25 s of image preprocessing.
- ``kimi-k2.5-tiny``: Kimi K2.5 config (text model DeepSeek-V3, one layer, one attention head,
  kv_lora_rank 512 and qk_rope_head_dim 64 as vLLM's CPU MLA needs; one-layer MoonViT with
  head_dim 16: small compute, real token counts), ``use_unified_vision_chunk``, a tokenizer
  with the Kimi media tokens, and the real ``media_proc_cfg``. No weights: it is served with
  vLLM's ``--load-format dummy``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from vlm_fastpath.bench.checkpoints import QWEN25_VL_CFG

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / ".cache" / "serving" / "models"
RECIPE_VERSION = "2"  # bump to rebuild every cached checkpoint

QWEN = "qwen2.5-vl-tiny"
KIMI = "kimi-k2.5-tiny"
MODELS = (QWEN, KIMI)
# A model's own recipe version, appended to its stamp: bump one to rebuild only that checkpoint
# (qwen 2: max_pixels 12845056 as the real checkpoints, vision tower window attention only).
MODEL_RECIPE = {QWEN: "2", KIMI: ""}

QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
KIMI_SPECIALS = [
    "[BOS]", "[EOS]", "[PAD]", "[UNK]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
    "<|im_system|>", "<|im_middle|>", "<|media_begin|>", "<|media_content|>", "<|media_end|>",
    "<|media_pad|>", "<|kimi_k25_video_placeholder|>",
]

# Same rendering as the Qwen2-VL/Qwen2.5-VL instruct checkpoints' template.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Kimi K2.5's role layout; image parts become the model's media placeholder.
KIMI_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|im_system|>system<|im_middle|>"
    "{% elif message['role'] == 'user' %}<|im_user|>user<|im_middle|>"
    "{% else %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|media_begin|>image<|media_content|><|media_pad|><|media_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
)

QWEN_PREPROCESSOR = QWEN25_VL_CFG

KIMI_MEDIA_PROC_CFG = {
    "in_patch_limit": 16384,
    "patch_size": 14,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "merge_kernel_size": 2,
    "fixed_output_tokens": None,
    "patch_limit_on_one_side": 512,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
    "config_type": "image_processor",
}


def _corpus() -> list[str]:
    """Local English + code text to train the BPE on (Python's own stdlib sources)."""
    import email
    import json as json_mod
    import logging
    import textwrap

    texts = []
    for module in (argparse, email, json_mod, logging, textwrap, shutil):
        path = getattr(module, "__file__", None)
        if path:
            texts.append(Path(path).read_text(encoding="utf-8", errors="ignore"))
    texts.append(
        "Describe this image. What is in the picture? The quick brown fox jumps over the lazy "
        "dog. A photo of a cat sitting on a chair next to a window with the sun shining."
    )
    return texts


def _train_tokenizer(specials: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer


def _fast_tokenizer(tokenizer, **kwargs):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **kwargs)


def _round_up(n: int, k: int = 64) -> int:
    return (n + k - 1) // k * k


def build_qwen(out: Path) -> None:
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    raw = _train_tokenizer(QWEN_SPECIALS, 2048)
    tok = _fast_tokenizer(
        raw, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        model_max_length=32768, clean_up_tokenization_spaces=False,
    )
    tok.chat_template = QWEN_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    vocab = _round_up(len(tok))
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab, "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 64, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                "mrope_section": [8, 12, 12]},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 1,
            "out_hidden_size": 128, "fullatt_block_indexes": [], "window_size": 112,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN_CHAT_TEMPLATE)
    (out / "preprocessor_config.json").write_text(json.dumps(QWEN_PREPROCESSOR, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"]],
        "pad_token_id": ids["<|endoftext|>"], "do_sample": False,
    }, indent=2) + "\n")


def build_kimi(out: Path) -> None:
    raw = _train_tokenizer(KIMI_SPECIALS, 2048)
    tok = _fast_tokenizer(
        raw, bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]", unk_token="[UNK]",
        model_max_length=262144, clean_up_tokenization_spaces=False,
    )
    tok.chat_template = KIMI_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in KIMI_SPECIALS}
    vocab = _round_up(len(tok))
    text = {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": 128,
        "intermediate_size": 256,
        "moe_intermediate_size": 64,
        "num_hidden_layers": 1,
        "first_k_dense_replace": 1,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "moe_layer_freq": 1,
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 64,
        "v_head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": ids["[BOS]"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["[PAD]"],
        "torch_dtype": "bfloat16",
    }
    vision = {
        "model_type": "kimi_k25_vision",
        "patch_size": 14,
        "pos_emb_height": 64,
        "pos_emb_width": 64,
        "pos_emb_time": 4,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "hidden_act": "gelu_pytorch_tanh",
        "merge_kernel_size": [2, 2],
    }
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text,
        "vision_config": vision,
        "projection_hidden_size": 128,
        "projection_layer_norm_eps": 1e-5,
        "image_token_id": ids["<|media_pad|>"],
        "video_token_id": ids["<|kimi_k25_video_placeholder|>"],
        "vision_start_token_id": ids["<|media_begin|>"],
        "vision_end_token_id": ids["<|media_end|>"],
        "use_unified_vision_chunk": True,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tok.save_pretrained(out)
    (out / "chat_template.jinja").write_text(KIMI_CHAT_TEMPLATE)
    (out / "preprocessor_config.json").write_text(
        json.dumps({"media_proc_cfg": KIMI_MEDIA_PROC_CFG}, indent=2) + "\n"
    )
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": ids["[BOS]"], "eos_token_id": [ids["<|im_end|>"], ids["[EOS]"]],
        "do_sample": False,
    }, indent=2) + "\n")


BUILDERS = {QWEN: build_qwen, KIMI: build_kimi}


def ensure(name: str, out_root: Path = DEFAULT_OUT, force: bool = False) -> Path:
    """Path of checkpoint ``name``, building it first when missing or stale."""
    out = out_root / name
    stamp = out / ".recipe"
    version = RECIPE_VERSION + (f".{MODEL_RECIPE[name]}" if MODEL_RECIPE.get(name) else "")
    if not force and stamp.exists() and stamp.read_text().strip() == version:
        return out
    tmp = out_root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    BUILDERS[name](tmp)
    (tmp / ".recipe").write_text(version + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("models", nargs="*", help=f"any of {', '.join(MODELS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    for name in args.models or MODELS:
        start = time.perf_counter()
        path = ensure(name, args.out, args.force)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        took = time.perf_counter() - start
        print(f"checkpoint {name}: {path} ({size / 1e6:.1f} MB, {took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
