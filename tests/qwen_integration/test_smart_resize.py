"""``smart_resize`` equals transformers' function, errors included."""

from __future__ import annotations

import pytest

from vlm_fastpath.qwen_integration import AspectRatioError, smart_resize


def _hf_smart_resize():  # noqa: ANN202
    pytest.importorskip("torchvision")
    module = pytest.importorskip("transformers.models.qwen2_vl.image_processing_qwen2_vl")
    return module.smart_resize


def _compare(hf, height, width, factor, min_pixels, max_pixels) -> None:  # noqa: ANN001
    try:
        expected = hf(height, width, factor, min_pixels, max_pixels)
    except ValueError as exc:
        with pytest.raises(AspectRatioError) as ours:
            smart_resize(height, width, factor, min_pixels, max_pixels)
        assert str(ours.value) == str(exc)
        return
    if expected[0] <= 0 or expected[1] <= 0:
        with pytest.raises(AspectRatioError, match="empty"):
            smart_resize(height, width, factor, min_pixels, max_pixels)
        return
    assert smart_resize(height, width, factor, min_pixels, max_pixels) == expected


@pytest.mark.parametrize(
    "args",
    [
        (1, 1, 28, 3136, 12845056), (2048, 2048, 28, 3136, 12845056),
        (3024, 4032, 28, 3136, 12845056), (20, 8000, 28, 3136, 12845056),
        (20, 4000, 28, 3136, 12845056), (1, 200, 28, 3136, 12845056),
        (1, 201, 28, 3136, 12845056), (555, 777, 32, 65536, 16777216),
        (10, 10, 28, 1, 1), (100000, 1000, 28, 3136, 1003520), (5, 5, 28, 0, 100),
    ],
)
def test_known_cases(args):
    _compare(_hf_smart_resize(), *args)


def test_property_equals_transformers():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    hf = _hf_smart_resize()

    @hypothesis.settings(max_examples=2000, deadline=None, derandomize=True)
    @hypothesis.given(
        height=st.integers(1, 20000),
        width=st.integers(1, 20000),
        factor=st.sampled_from([28, 32, 16, 24, 56]),
        min_pixels=st.integers(0, 2_000_000),
        max_pixels=st.integers(1, 20_000_000),
    )
    def check(height, width, factor, min_pixels, max_pixels):  # noqa: ANN001
        _compare(hf, height, width, factor, min_pixels, max_pixels)

    check()


def test_zero_size_is_a_value_error():
    with pytest.raises(AspectRatioError, match="zero size"):
        smart_resize(0, 10)
