"""The lookup tables equal each transformers processor's own rescale/normalize on all bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlm_fastpath.qwen_integration import QwenConfigError, build_lut

from .helpers import hf_classes

FLAGS = [(True, True), (True, False), (False, True), (False, False)]
STATS = [
    ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    ((0.1234567, 0.7654321, 0.333333), (0.0712345, 0.9, 1e-3)),
]


def _hf_reference(mode: str, do_rescale, do_normalize, factor, mean, std) -> np.ndarray:  # noqa: ANN001
    hf = hf_classes()[mode]()
    if mode == "torchvision":
        image = torch.arange(256, dtype=torch.uint8).view(1, 1, 1, 256).repeat(1, 3, 1, 1)
        out = hf.rescale_and_normalize(image, do_rescale, factor, do_normalize, mean, std)
        return out.reshape(3, 256).numpy()
    image = np.broadcast_to(np.arange(256, dtype=np.uint8), (3, 1, 256)).copy()
    if do_rescale:
        image = hf.rescale(image, factor)
    if do_normalize:
        image = hf.normalize(image, mean, std)
    return np.asarray(image, dtype=np.float32).reshape(3, 256)  # the PIL patchify's cast


@pytest.mark.parametrize("flags", FLAGS, ids=["both", "rescale", "normalize", "none"])
@pytest.mark.parametrize("stats", range(len(STATS)))
def test_lut_equals_hf_ops(mode, flags, stats):
    do_rescale, do_normalize = flags
    mean, std = STATS[stats]
    expected = _hf_reference(mode, do_rescale, do_normalize, 1 / 255, mean, std)
    lut = build_lut(mode, do_rescale=do_rescale, rescale_factor=1 / 255,
                    do_normalize=do_normalize, image_mean=mean, image_std=std)
    assert lut.dtype == expected.dtype and lut.shape == (3, 256)
    assert np.array_equal(lut.view(np.uint8), expected.view(np.uint8))  # bitwise, -0.0 too


def test_lut_property_random_stats(mode):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    unit = st.floats(0.0, 1.0, allow_nan=False, width=64)
    positive = st.floats(1e-3, 2.0, allow_nan=False, width=64)

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(mean=st.tuples(unit, unit, unit), std=st.tuples(positive, positive, positive),
                      factor=st.sampled_from([1 / 255, 1 / 127.5, 0.00392156862745098, 1.0]))
    def check(mean, std, factor):  # noqa: ANN001
        expected = _hf_reference(mode, True, True, factor, mean, std)
        lut = build_lut(mode, do_rescale=True, rescale_factor=factor, do_normalize=True,
                        image_mean=mean, image_std=std)
        assert np.array_equal(lut.view(np.uint8), expected.view(np.uint8))

    check()


def test_the_two_processors_really_differ():
    """Why there are two tables: CLIP statistics give different floats in the two HF paths."""
    mean, std = STATS[0]
    tv = build_lut("torchvision", do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                   image_mean=mean, image_std=std)
    pil = build_lut("pil", do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                    image_mean=mean, image_std=std)
    assert not np.array_equal(tv, pil)


def test_lut_rejects_zero_std():
    with pytest.raises(QwenConfigError):
        build_lut("pil", do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                  image_mean=(0, 0, 0), image_std=(1, 0, 1))
