"""Images held in many Pillow blocks (large photos, under Pillow's 16 MiB blocks) are read a
strip at a time by the resampler's bands, never copied whole: against Pillow itself. Both
readers: the job loops that copy rows through Pillow's row table (``row-table``), and the band
tasks that copy them with Pillow's ``paste`` (``paste``, where no row table can be read).

The images are made small in many blocks (``pillow_blocks``) and the strip budget is made a
few rows (``resample.STRIP_BYTES``), so every case cuts bands into many strips, in every pass
order: horizontal first (ring), vertical first, one side only, no resize at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from fixtures.pillow_blocks import pillow_blocks
from fixtures.reference_kimi import KIMI_K25_CFG
from vlm_fastpath.imaging import resample
from vlm_fastpath.imaging.pillow_pixels import rgbx_view
from vlm_fastpath.imaging.resample import resize_rgb
from vlm_fastpath.kimi_integration import FusedKimiProcessor

from .helpers import assert_parity, img, rand_array, video
from .test_resample import (
    PROCESSOR_CASES,
    SETTINGS,
    _assert_same,
    _pil,
    case_config,
    needs_kernel,
    size_pairs,
)

pytestmark = needs_kernel


def _many_blocks(array: np.ndarray) -> Image.Image:
    with pillow_blocks(one_block=False):
        return Image.fromarray(array)


@pytest.fixture(params=["row-table", "paste"])
def strip_calls(request, monkeypatch):
    """Every ``(top, bottom)`` a band copies out of Pillow's memory, by the reader of this
    run; whole-image copies fail."""
    calls: list[tuple[int, int]] = []
    if request.param == "paste":
        monkeypatch.setattr(resample, "row_table", lambda image: None)
        real = resample.copy_rows

        def spy(image, top, bottom, out):
            calls.append((top, bottom))
            real(image, top, bottom, out)

        monkeypatch.setattr(resample, "copy_rows", spy)
    else:
        real_spans = resample.strip_spans
        real_table = resample.row_table

        def spans_spy(*args):
            spans = real_spans(*args)
            calls.extend((top, bottom) for _, _, top, bottom in spans)
            return spans

        def table(image):
            found = real_table(image)
            assert found is not None, "no row table for an RGB image in many blocks"
            return found

        monkeypatch.setattr(resample, "strip_spans", spans_spy)
        monkeypatch.setattr(resample, "row_table", table)
    real_pixels = resample.frame_pixels

    def whole_copy(frame):
        if isinstance(resample.frame_source(frame)[0], Image.Image):
            raise AssertionError("the resampler copied a whole many-block image")
        return real_pixels(frame)

    monkeypatch.setattr(resample, "frame_pixels", whole_copy)
    return calls


@SETTINGS
@given(strip_rows=st.integers(1, 64), **PROCESSOR_CASES)
def test_processor_parity_from_strips(monkeypatch, strip_calls, size, limit, side, patch, clip,
                                      uint8, strip_rows, seed):
    cfg = case_config(limit, side, patch, clip)
    image = _many_blocks(rand_array(seed, *size))
    monkeypatch.setattr(resample, "STRIP_BYTES", strip_rows * size[0] * 4)
    assert_parity(FusedKimiProcessor(cfg), [img(image)], cfg, uint8=uint8)


@SETTINGS
@given(sizes=size_pairs(), filter_name=st.sampled_from(["bicubic", "bilinear", "lanczos"]),
       strip_rows=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_bare_resampler_from_strips(monkeypatch, strip_calls, sizes, filter_name, strip_rows,
                                    seed):
    """1-pixel patches: every output row is a patch row, so strips are cut at any row; widths
    or heights kept as they are run the kernel without that pass."""
    w, h, ow, oh = sizes
    array = rand_array(seed, w, h)
    monkeypatch.setattr(resample, "STRIP_BYTES", strip_rows * w * 4)
    got = resize_rgb(_many_blocks(array), ow, oh, filter_name)
    _assert_same(got, _pil(array, ow, oh, filter_name))


@pytest.mark.parametrize(
    "sizes",
    [(500, 300, 500, 140), (300, 500, 140, 500), (700, 90, 300, 90), (64, 900, 64, 300),
     (40, 900, 30, 200), (333, 251, 900, 700)],
    ids=["height-only", "width-only", "width-only-wide", "height-only-tall", "vertical-first",
         "upscale"],
)
def test_one_pass_and_pass_orders_from_strips(monkeypatch, strip_calls, sizes):
    w, h, ow, oh = sizes
    array = rand_array(sum(sizes), w, h)
    monkeypatch.setattr(resample, "STRIP_BYTES", 7 * w * 4)
    _assert_same(resize_rgb(_many_blocks(array), ow, oh), _pil(array, ow, oh))
    assert len(strip_calls) > 3


def test_strips_stay_within_the_budget(monkeypatch, strip_calls):
    """No band holds more than its budget of source rows (unless one patch row needs more),
    the strips of a band overlap only by the vertical taps, and nothing is copied whole."""
    width, height = 1200, 1500
    array = rand_array(5, width, height)
    image = _many_blocks(array)
    assert rgbx_view(image) is None  # what a large photo is
    cfg = dict(KIMI_K25_CFG, in_patch_limit=3000)  # about 0.57x: ~25 source rows a patch row
    budget = 100
    monkeypatch.setattr(resample, "STRIP_BYTES", budget * width * 4)
    processor = FusedKimiProcessor(cfg)
    plan = processor.plan(img(image))
    assert plan.patch_size * height / plan.new_height < budget / 3
    assert_parity(processor, [img(image)], cfg)
    assert len(strip_calls) >= height // budget
    assert all(bottom - top <= budget for top, bottom in strip_calls)
    assert sum(bottom - top for top, bottom in strip_calls) < 1.5 * height


def test_video_chunk_of_unresized_frames_from_strips(monkeypatch, strip_calls):
    """Frames kept at their size (no pass at all) are copied strip by strip too."""
    cfg = dict(KIMI_K25_CFG, in_patch_limit=100_000)
    frames = [_many_blocks(rand_array(40 + i, 280, 196)) for i in range(4)]
    monkeypatch.setattr(resample, "STRIP_BYTES", 20 * 280 * 4)
    out = assert_parity(FusedKimiProcessor(cfg), [video(frames)], cfg)
    assert out["grid_thws"].tolist()[0][1:] == [196 // 14, 280 // 14]
    assert strip_calls


def test_strip_spans_cover_every_patch_row():
    ymin, ycnt, _ = resample._axis(1000, 300, "bicubic")
    for budget in (1, 10, 57, 10_000):
        for g0, g1 in ((0, 22), (3, 9), (21, 22)):
            spans = resample.strip_spans(ymin, ycnt, True, 1000, 14, g0, g1, budget)
            assert spans[0][0] == g0 and spans[-1][1] == g1
            assert all(a < b for a, b, _, _ in spans)
            assert all(s[1] == t[0] for s, t in zip(spans, spans[1:], strict=False))
            for a, b, top, bottom in spans:
                rows = range(a * 14, min(b * 14, 300))
                assert top == min(int(ymin[y]) for y in rows)
                assert bottom == max(int(ymin[y] + ycnt[y]) for y in rows)


def _frame_of(kind: str, array: np.ndarray):
    if kind == "array":
        return array
    if kind == "one-block":
        with pillow_blocks(one_block=True):
            return Image.fromarray(array)
    if kind == "many-blocks":
        return _many_blocks(array)
    return Image.fromarray(array).convert("RGBA")  # converted to RGB on the way in


FRAME_KINDS = st.sampled_from(["array", "one-block", "many-blocks", "rgba"])


@SETTINGS
@given(frames=st.lists(st.tuples(FRAME_KINDS, st.integers(1, 400), st.integers(1, 400)),
                       min_size=2, max_size=5),
       strip_rows=st.integers(1, 40), limit=st.integers(4, 2000), patch=st.sampled_from([7, 14]),
       as_video=st.booleans(), uint8=st.booleans(), seed=st.integers(0, 2**16))
def test_the_frames_of_one_call_run_in_one_loop(monkeypatch, frames, strip_rows, limit, patch,
                                                as_video, uint8, seed):
    """Several frames of any kind and size (a video chunk's share one size) in one call: all
    their bands and strips in one job loop (``_frames_jobs``), the checkpoint's pixels."""
    cfg = dict(KIMI_K25_CFG, in_patch_limit=limit, patch_size=patch)
    loops = []
    real = resample._frames_jobs
    monkeypatch.setattr(resample, "_frames_jobs",
                        lambda *a: loops.append(len(a[0])) or real(*a))
    monkeypatch.setattr(resample, "STRIP_BYTES", strip_rows * 400 * 4)
    sizes = [(frames[0][1], frames[0][2])] * len(frames) if as_video else [
        (w, h) for _, w, h in frames]
    made = [_frame_of(kind, rand_array(seed + i, w, h))
            for i, ((kind, _, _), (w, h)) in enumerate(zip(frames, sizes, strict=True))]
    twins = [Image.fromarray(f) if isinstance(f, np.ndarray) else f for f in made]  # oracle's
    if as_video:
        medias, oracle = [video(made)], [video(twins)]
    else:
        medias, oracle = [img(f) for f in made], [img(f) for f in twins]
    assert_parity(FusedKimiProcessor(cfg), medias, cfg, oracle_medias=oracle, uint8=uint8)
    assert loops == [len(frames)], loops
