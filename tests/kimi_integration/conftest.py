"""Fixtures for the FusedKimiProcessor tests (helpers live in ``helpers.py``)."""

from __future__ import annotations

import pytest

from fixtures.reference_kimi import CLIP_CFG, KIMI_K25_CFG
from vlm_fastpath.kimi_integration import FusedKimiProcessor


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kimi_cfg() -> dict:
    return KIMI_K25_CFG


@pytest.fixture(scope="session")
def clip_cfg() -> dict:
    return CLIP_CFG


@pytest.fixture(scope="session")
def proc() -> FusedKimiProcessor:
    return FusedKimiProcessor(KIMI_K25_CFG)


@pytest.fixture(scope="session")
def clip_proc() -> FusedKimiProcessor:
    return FusedKimiProcessor(CLIP_CFG)
