"""Bad images fail on the sender, as that request's error, on every path that ships payloads.

Both deferring senders (Kimi K2.5 and K3) ship raw uint8 pixels, so ``prepare`` decodes every
image fully: a truncated file raises ``KimiInputError`` (a ``ValueError``, SGLang's bad-request
type) in the tokenizer process and never reaches the vision owner. The next request is served.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from fixtures import bad_images
from vlm_fastpath.kimi_integration.errors import KimiInputError
from vlm_fastpath.patches import REGISTRY

from . import test_deferred_kimi_k3 as k3
from . import test_deferred_kimi_k25 as k25


def _truncated_image() -> Image.Image:
    """Opens (header only) like any upload; its pixels cannot be decoded."""
    return Image.open(io.BytesIO(bad_images.truncated(bad_images.jpeg_bytes(256, 256))))


def _good_image() -> Image.Image:
    return Image.open(io.BytesIO(bad_images.jpeg_bytes(256, 256, seed=1)))


@pytest.fixture
def applied(engine):
    REGISTRY.revert(engine="sglang")
    results = {r.name: r.status.value for r in REGISTRY.apply(engine="sglang")}
    yield results
    REGISTRY.revert(engine="sglang")


def test_k25_sender_refuses_a_truncated_image(applied, monkeypatch):
    if applied.get(k25.SENDER) != "applied":
        pytest.skip(f"K2.5 deferral is {applied.get(k25.SENDER)} here")
    wrapper = k25._wrapper()
    prompt = f"x{k25.TOKEN}"
    with pytest.raises(KimiInputError, match="truncated"):
        k25._run(wrapper, monkeypatch, "1", [_truncated_image()], prompt)
    with pytest.raises(ValueError, match="truncated"):  # the eager path: the same error
        k25._run(wrapper, monkeypatch, "0", [_truncated_image()], prompt)
    out = k25._run(wrapper, monkeypatch, "1", [_good_image()], prompt)
    assert len(out["_vlm_fastpath_kimi_deferred"]) == 1


def test_k3_sender_refuses_a_truncated_image(applied, monkeypatch):
    proc = pytest.importorskip("sglang.srt.multimodal.processors.kimi_k3")
    if applied.get(k3.SENDER) != "applied":
        pytest.skip(f"K3 deferral is {applied.get(k3.SENDER)} here")
    monkeypatch.setattr(proc, "_k3_to_cuda_chw", k3._cpu_chw)
    wrapper = k3._wrapper(None)
    prompt = f"x{k3.TOKEN}"
    with pytest.raises(KimiInputError, match="truncated"):
        k3._lazy(wrapper, monkeypatch, [_truncated_image()], prompt)
    out = k3._lazy(wrapper, monkeypatch, [_good_image()], prompt)
    assert len(out[k3.KEY]) == 1
