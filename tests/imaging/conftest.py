"""The decode tests prove identity for every verified row, the exact-but-not-faster ones too."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _every_verified_decoder(monkeypatch):
    from vlm_fastpath.imaging.decode import ENV_SWITCH

    monkeypatch.setenv(ENV_SWITCH, "all")
