"""``vlm-fastpath bench``: does the plugin help on this machine? Answered from the wheel alone.

Times our processors against the ones the installed engine would use (vLLM's fused Kimi K2.5
processor; transformers' Qwen2-VL processors), on synthetic images or the user's own, after
checking that every contender's output equals ours. Imports nothing from the source checkout.
"""

from __future__ import annotations

from .cli import add_arguments, run

__all__ = ["add_arguments", "run"]
