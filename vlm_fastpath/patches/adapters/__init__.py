"""Engine-neutral objects the patches hand to the engines in place of theirs.

``qwen_twin``: exact twins of transformers' Qwen2-VL image processors (vLLM and SGLang);
``kimi_vision``: the object that stands in for vLLM's fused Kimi vision processor;
``kimi_probe``: the behaviour probe that compares ours with the engine's before a hand-out.
Imported lazily by the patches' ``apply`` and hand-out code; importing them imports no engine.
"""
