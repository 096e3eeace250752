"""Fixtures for the Qwen-VL processor tests: pairs of (transformers processor, ours)."""

from __future__ import annotations

from typing import Any

import pytest

from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor

from .helpers import CONFIGS, hf_classes, hf_kwargs


def _pair(mode: str, config_name: str) -> tuple[Any, FastQwen2VLImageProcessor]:
    hf = hf_classes()[mode](**hf_kwargs(CONFIGS[config_name]))
    return hf, FastQwen2VLImageProcessor.from_hf(hf)


@pytest.fixture(scope="session")
def pairs() -> dict[tuple[str, str], tuple[Any, FastQwen2VLImageProcessor]]:
    """(mode, config) -> (transformers processor, ours mirrored from it)."""
    return {(m, c): _pair(m, c) for m in ("torchvision", "pil") for c in CONFIGS}


@pytest.fixture(params=["torchvision", "pil"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pair25(pairs, mode):  # noqa: ANN001, ANN201
    return pairs[(mode, "qwen2.5-vl")]
