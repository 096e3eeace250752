"""Data-less tensors and undecodable configs are input errors in both processors (issue #31).

A torch ``NotImplementedError`` or a bare ``UnicodeDecodeError`` would not be the model's own
error type: callers could not tell bad input from a bug, and in an engine run-time containment
would count it as a fault of the patch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fixtures.reference_kimi import KIMI_K25_CFG
from tests.qwen_integration.helpers import CONFIGS
from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiConfigError, KimiInputError
from vlm_fastpath.qwen_integration import (
    FastQwen2VLImageProcessor,
    QwenConfigError,
    QwenInputError,
)


def _kimi(image: Any) -> Any:
    return FusedKimiProcessor(KIMI_K25_CFG).preprocess([{"type": "image", "image": image}])


def _qwen(image: Any) -> Any:
    return FastQwen2VLImageProcessor(CONFIGS["qwen2.5-vl"])(images=[image])


PROCESSORS: dict[str, tuple[Callable[[Any], Any], type[Exception]]] = {
    "kimi": (_kimi, KimiInputError),
    "qwen": (_qwen, QwenInputError),
}
# Each layout: the processor's own tensor layout (Kimi HWC, Qwen CHW); shape and dtype valid.
SHAPES = {"kimi": (40, 56, 3), "qwen": (3, 40, 56)}


def _meta(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8, device="meta")


def _sparse(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.uint8).to_sparse()


DATA_LESS = {"meta": (_meta, "'meta' device"), "sparse": (_sparse, "layout")}


@pytest.mark.parametrize("kind", list(DATA_LESS))
@pytest.mark.parametrize("model", list(PROCESSORS))
def test_data_less_tensors_are_input_errors(model: str, kind: str) -> None:
    run, error = PROCESSORS[model]
    make, match = DATA_LESS[kind]
    with pytest.raises(error, match=match):
        run(make(SHAPES[model]))


CONFIG_FILES = {
    "kimi": ({"media_proc_cfg": KIMI_K25_CFG}, FusedKimiProcessor.from_pretrained, KimiConfigError),
    "qwen": (CONFIGS["qwen2.5-vl"], FastQwen2VLImageProcessor.from_pretrained, QwenConfigError),
}


def _latin1(text: str) -> bytes:
    return text.replace('{', '{"note": "caf\u00e9", ', 1).encode("latin-1")


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "latin-1": _latin1,
    "utf-16": lambda text: text.encode("utf-16"),
    "binary": lambda _text: bytes(range(256)) * 4,
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("model", list(CONFIG_FILES))
def test_undecodable_config_files_are_config_errors(
    tmp_path: Path, model: str, encoding: str
) -> None:
    config, load, error = CONFIG_FILES[model]
    (tmp_path / "preprocessor_config.json").write_bytes(ENCODINGS[encoding](json.dumps(config)))
    with pytest.raises(error, match="not UTF-8"):
        load(tmp_path)
