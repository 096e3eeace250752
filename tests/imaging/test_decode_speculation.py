"""Qwen pixel_values made while the image decodes (``decode.speculation``, ``row_progress``).

The reference is transformers' own Qwen2-VL processor on the image Pillow loads from the same
bytes. The decoders are the verified codec libraries, and also those libraries behind a slow,
adversarial writer (rows in bursts, each row's tail before its body): work that ran ahead of
the rows would read marks or zeros, and the pixel_values would differ.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures import decode_corpus
from tests.qwen_integration.helpers import CONFIGS, assert_same, hf_classes, hf_kwargs
from vlm_fastpath.imaging import decode, row_progress
from vlm_fastpath.imaging.decode import layer, speculation, variants
from vlm_fastpath.imaging.row_progress import MARK
from vlm_fastpath.qwen_integration import FastQwen2VLImageProcessor, speculative

pytestmark = [
    pytest.mark.skipif(decode.unavailable_reason() is not None,
                       reason=f"no verified codec library here: {decode.unavailable_reason()}"),
    pytest.mark.skipif(not row_progress.supported(),
                       reason="rows cannot be followed on this machine"),
]

UINT8 = {"do_rescale": False, "do_normalize": False}
# How long a test waits for another thread (a pool thread to pick work up, a loader, a forked
# child). Generous: on a loaded 2-core machine these take milliseconds, and the wait ends as
# soon as its condition holds, so only a broken build ever waits this long.
WAIT_S = 60.0
# After the work is picked up and before the first row: work that does not wait for its rows
# reads them now, unwritten. Only how surely that bug is caught depends on it, never a pass.
EARLY_READ_WINDOW_S = 0.05
# (progress, work) the current decode on each thread started (``_speculate`` records them)
_THIS_DECODE = threading.local()


@pytest.fixture(autouse=True)
def _no_abandoned_bytes():
    """Each test starts with no bytes marked abandoned (several tests load the same bytes;
    a collection first, so that work an earlier test left behind has had its say)."""
    import gc

    gc.collect()
    speculation._ABANDONED.clear()
    yield


class Spy:
    """Counts the processor's own fills, and keeps every speculation started."""

    def __init__(self, fast: FastQwen2VLImageProcessor, monkeypatch: pytest.MonkeyPatch):
        self.fills = 0
        self.started: list[speculation.Prepared] = []
        self.changed = threading.Condition()
        original_fill = fast._fill
        original_start = speculative.start

        def fill(*args: Any, **kwargs: Any) -> None:
            self.fills += 1
            original_fill(*args, **kwargs)

        def start(*args: Any, **kwargs: Any) -> Any:
            prepared = original_start(*args, **kwargs)
            if prepared is not None:
                with self.changed:
                    self.started.append(prepared)
                    self.changed.notify_all()
            return prepared

        monkeypatch.setattr(fast, "_fill", fill)
        monkeypatch.setattr(speculative, "start", start)

    def wait_started(self, count: int, timeout: float = WAIT_S) -> None:
        """Block until ``count`` pieces of work have been started (by another thread's load)."""
        with self.changed:
            ok = self.changed.wait_for(lambda: len(self.started) >= count, timeout)
        assert ok, f"{count - len(self.started)} more work never started in {timeout} s"


@pytest.fixture(scope="module", params=["float32", "uint8"])
def pair(request):
    hf = hf_classes()["torchvision"](**hf_kwargs(CONFIGS["qwen2.5-vl"]),
                                     **(UINT8 if request.param == "uint8" else {}))
    return hf, FastQwen2VLImageProcessor.from_hf(hf)


@pytest.fixture
def offered(pair, monkeypatch):
    """The fast processor offered, every size speculated on; the offer withdrawn after."""
    hf, fast = pair
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    speculation.offer(fast)
    spy = Spy(fast, monkeypatch)
    yield hf, fast, spy
    speculation.withdraw(fast)


def _wait_until_picked_up(timeout: float = WAIT_S) -> None:
    """Block until a pool thread has picked up the work this thread's decode started (its
    future running or done), so that a test can prove the work ran while the rows were still
    being written without betting on how soon the pool gets a core.

    Runs inside the decoder, whose errors the decode layer hands to Pillow: a failure here
    is ``pytest.fail`` (not an ``Exception``, so it reaches the test), after stopping the
    work so that no pool thread waits for rows that will never come."""
    progress, prepared = getattr(_THIS_DECODE, "started", (None, None))
    if prepared is None:
        pytest.fail("no work was started on the image")
    deadline = time.monotonic() + timeout
    while not (prepared.future.running() or prepared.future.done()):
        if time.monotonic() > deadline:
            progress.abort()
            pytest.fail(f"no pool thread picked up the speculative work in {timeout} s "
                        "(queued behind other work, or never submitted)")
        time.sleep(0.001)


def _slow_writer(decode_fn, fail_at: int | None = None, after_pickup: bool = False):
    """``decode_fn`` into a scratch array, then its rows into ``out`` as a slow decoder would
    write them: one at a time, each row's tail first (``test_row_progress``). With
    ``after_pickup``, no row is written before a pool thread has the decode's work."""

    def slow(data: bytes, out: np.ndarray) -> np.ndarray:
        scratch = decode_fn(data, np.empty_like(out))
        if after_pickup:
            _wait_until_picked_up()
            time.sleep(EARLY_READ_WINDOW_S)
        rows, src = out.reshape(out.shape[0], -1), scratch.reshape(out.shape[0], -1)
        tail = min(MARK.shape[0], rows.shape[1])
        for r in range(rows.shape[0]):
            if r == fail_at:
                raise ValueError("Premature end of JPEG file")
            rows[r, -tail:] = src[r, -tail:]
            time.sleep(0.00002)  # every row: work that reads a row early finds it unwritten
            rows[r, :-tail] = src[r, :-tail]
        return out

    return slow


def _slow_decoders(monkeypatch: pytest.MonkeyPatch, after_pickup: bool) -> None:
    for variant in ("jpeg-ycbcr", "png-deflate", "webp-still"):
        real = layer.decoder_for(variant)
        assert real is not None
        monkeypatch.setitem(layer._DECODERS, variant,
                            _slow_writer(real, after_pickup=after_pickup))


@pytest.fixture
def slow_decoders(monkeypatch):
    """Slow decoders; the speculative work may still be queued when the decode ends (then the
    call cancels it and does the work itself)."""
    _slow_decoders(monkeypatch, after_pickup=False)


@pytest.fixture
def slow_decoders_after_pickup(monkeypatch):
    """Slow decoders that write no row before a pool thread has picked up the decode's work:
    the work then surely runs during the decode, however loaded the machine is (without this,
    on a busy 2-core machine the decode could end first, and the work be cancelled)."""
    real_speculate = layer._speculate

    def recorded(*args: Any, **kwargs: Any) -> Any:
        _THIS_DECODE.started = real_speculate(*args, **kwargs)
        return _THIS_DECODE.started

    _THIS_DECODE.started = (None, None)
    monkeypatch.setattr(layer, "_speculate", recorded)
    _slow_decoders(monkeypatch, after_pickup=True)


def _pillow(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _encoded(width: int, height: int, fmt: str, seed: int = 0, **params: Any) -> bytes:
    image = Image.fromarray(decode_corpus.photo_like(width, height, seed=seed))
    if fmt == "WEBP-lossless":
        fmt, params = "WEBP", {**params, "lossless": True, "method": 0}
    return decode_corpus.save(image, fmt, **params)


# every format whose rows come in order: lossy and lossless WebP too (libwebp)
FORMATS = ["JPEG", "PNG", "WEBP", "WEBP-lossless"]


# resized on both sides; already whole merge blocks (only patchified); one merge row
SIZES = [(1203, 917), (1176, 840), (1000, 300), (56, 28)]


def _served(started: list[speculation.Prepared], before: int, taken: bool) -> bool:
    """Whether the call should have taken the prepared output: ``taken`` where work was
    started, unless it was still queued when the call came (then cancelled, and the call
    does it itself: a tiny image can decode before a pool thread picks its work up)."""
    if not taken:
        return False
    assert len(started) > before, "no work was started on the image"
    return not started[-1].future.cancelled()


def _check(hf, fast, spy, data: bytes, taken: bool = True) -> None:
    fills, before = spy.fills, len(spy.started)
    ours = decode.decode_bytes(data)
    got = fast(images=[ours], return_tensors="pt")
    assert_same(hf(images=[_pillow(data)], return_tensors="pt"), got)
    taken = _served(spy.started, before, taken)
    assert (spy.fills == fills) is taken, "the speculative result was (not) taken"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_pixel_values_made_while_decoding(offered, fmt, size):
    hf, fast, spy = offered
    _check(hf, fast, spy, _encoded(*size, fmt, quality=90) if fmt in ("JPEG", "WEBP") else
           _encoded(*size, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_strips_wait_for_their_rows(offered, slow_decoders_after_pickup, fmt, size):
    hf, fast, spy = offered
    _check(hf, fast, spy, _encoded(*size, fmt, seed=3))
    assert not spy.started[-1].future.cancelled()  # picked up before any row: it ran during it


def test_photographs(offered):
    hf, fast, spy = offered
    for item in decode_corpus.photographs():
        if Image.open(io.BytesIO(item.data)).mode == "RGB" and item.fast:
            _check(hf, fast, spy, item.data)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.integers(28, 700), height=st.integers(28, 700),
       fmt=st.sampled_from(FORMATS), quality=st.integers(40, 100),
       progressive=st.booleans())
def test_any_size_and_quality(offered, slow_decoders, width, height, fmt, quality,
                              progressive):
    hf, fast, spy = offered
    params = ({"quality": quality, "progressive": progressive} if fmt == "JPEG" else
              {"quality": quality} if fmt == "WEBP" else {})
    plan = fast._plan(fast.config, height, width)
    # one side resized and not the other: the processor's other path, not speculated on
    served = (plan.height == height) == (plan.width == width)
    _check(hf, fast, spy, _encoded(width, height, fmt, seed=width + height, **params),
           taken=served)


def test_a_failed_decode_stops_the_work_and_pillow_decides(offered, monkeypatch):
    hf, fast, spy = offered
    real = layer.decoder_for("jpeg-ycbcr")
    monkeypatch.setitem(layer._DECODERS, "jpeg-ycbcr", _slow_writer(real, fail_at=500))
    data = _encoded(1203, 917, "JPEG")
    ours = decode.decode_bytes(data)  # the fast decoder failed: Pillow decoded it
    assert type(ours) is not layer.decoded_image.DecodedImage
    assert len(spy.started) == 1
    with pytest.raises(speculation.DecodeAborted):
        spy.started[0].future.result(timeout=WAIT_S)
    fills = spy.fills
    assert_same(hf(images=[_pillow(data)], return_tensors="pt"),
                fast(images=[ours], return_tensors="pt"))
    assert spy.fills == fills + 1


def test_other_settings_do_not_take_it_and_it_is_taken_once(offered,
                                                            slow_decoders_after_pickup):
    """(The work is picked up during the decode: still queued at the call, it would be
    cancelled and done by the call, and "taken" could not be told from "computed".)"""
    hf, fast, spy = offered
    data = _encoded(1203, 917, "JPEG")
    ours = decode.decode_bytes(data)
    ref = _pillow(data)
    small = {"max_pixels": 300_000}
    fills = spy.fills
    assert_same(hf(images=[ref], return_tensors="pt", **small),
                fast(images=[ours], return_tensors="pt", **small))
    assert spy.fills == fills + 1  # other settings: computed
    copy = ours.copy()  # what vLLM's EXIF step hands on: the work goes with it
    assert_same(hf(images=[ref], return_tensors="pt"), fast(images=[copy], return_tensors="pt"))
    assert spy.fills == fills + 1  # taken
    assert_same(hf(images=[ref], return_tensors="pt"), fast(images=[ours], return_tensors="pt"))
    assert spy.fills == fills + 2  # only once, also through the original


def test_a_filled_store_or_another_processor_is_not_served(offered, slow_decoders_after_pickup):
    """(Each decode's work is picked up during it; the untaken first one is waited for, so
    that the second load has its place (``limit``) however slowly the pool runs.)"""
    hf, fast, spy = offered
    data = _encoded(1203, 917, "PNG")
    ours = decode.decode_bytes(data)
    ours.im  # noqa: B018 - Pillow's store filled: the pixels could change from here on
    fills = spy.fills
    ref = _pillow(data)
    assert_same(hf(images=[ref], return_tensors="pt"), fast(images=[ours], return_tensors="pt"))
    assert spy.fills == fills + 1
    spy.started[-1].future.result(timeout=WAIT_S)  # never taken: it still ends
    other = FastQwen2VLImageProcessor.from_hf(hf)
    ours = decode.decode_bytes(data)
    assert_same(hf(images=[ref], return_tensors="pt"), other(images=[ours], return_tensors="pt"))
    assert_same(hf(images=[ref], return_tensors="pt"), fast(images=[ours], return_tensors="pt"))
    assert spy.fills == fills + 1  # the offered processor took its own


def test_webp_rows_come_in_order_unless_alpha_is_written_over_them():
    found = {item.name: variants.rows_in_order("webp-still", item.data)
             for item in decode_corpus.webp_items()}
    assert found == {"webp-lossy": True, "webp-lossless": True, "webp-lossy-alpha": False,
                     "webp-lossless-alpha": True, "webp-exif-orientation-3": True,
                     "webp-animated": False}


def test_where_nothing_is_started(offered, monkeypatch):
    hf, fast, spy = offered
    gray = decode_corpus.save(Image.fromarray(decode_corpus.photo_like(300, 200, 1, 1)), "JPEG")
    interlaced = decode_corpus.interlaced_png(decode_corpus.photo_like(300, 200, 2))
    for data in (gray, interlaced):
        _check(hf, fast, spy, data, taken=False)
    monkeypatch.setenv("VLM_FASTPATH_DECODE_OVERLAP", "0")
    _check(hf, fast, spy, _encoded(300, 200, "JPEG"), taken=False)
    monkeypatch.delenv("VLM_FASTPATH_DECODE_OVERLAP")
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 300 * 200 + 1)
    _check(hf, fast, spy, _encoded(300, 200, "JPEG"), taken=False)
    # a PNG's rows come only after its whole stream is inflated: started from 4x the pixels
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 300 * 200 // 4 + 1)
    _check(hf, fast, spy, _encoded(300, 200, "PNG"), taken=False)
    assert len(spy.started) == 0
    _check(hf, fast, spy, _encoded(300, 200, "JPEG"))
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 300 * 200 // 4)
    _check(hf, fast, spy, _encoded(300, 200, "PNG"))
    assert len(spy.started) == 2
    spy.started.clear()
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    speculation.withdraw(fast)
    _check(hf, fast, spy, _encoded(300, 200, "JPEG"), taken=False)
    assert not spy.started or all(p.owner is fast for p in spy.started)
    assert len(spy.started) == 0


def test_several_loaders_at_once(offered, slow_decoders, monkeypatch):
    hf, fast, spy = offered
    monkeypatch.setattr(speculation, "limit", lambda: 100)  # each load starts its work
    before = len(spy.started)
    items = [_encoded(400 + 37 * k, 300 + 11 * k, "JPEG" if k % 2 else "PNG", seed=k)
             for k in range(6)]
    decoded: dict[int, Image.Image] = {}

    def load(k: int) -> None:
        decoded[k] = decode.decode_bytes(items[k])

    threads = [threading.Thread(target=load, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"a load did not end in {WAIT_S} s"
    fills = spy.fills
    for k, data in enumerate(items):
        assert_same(hf(images=[_pillow(data)], return_tensors="pt"),
                    fast(images=[decoded[k]], return_tensors="pt"))
    started = spy.started[before:]
    assert len(started) == len(items)
    # work still queued behind the others when its call came was done by the call
    assert spy.fills - fills == sum(p.future.cancelled() for p in started)


def test_work_nobody_takes_does_not_queue_up(offered, monkeypatch):
    """While ``limit()`` pieces of work run, a load starts none (a stream of loads whose
    work is never taken, as on vLLM's processor-cache hits, would otherwise queue it up on
    the pool); once they are done, loads start work again."""
    hf, fast, spy = offered
    monkeypatch.setattr(speculation, "limit", lambda: 1)
    gate = threading.Event()
    real = layer.decoder_for("png-deflate")

    def held(data: bytes, out: np.ndarray) -> np.ndarray:
        assert gate.wait(30), "the gate was never opened"
        return real(data, out)

    monkeypatch.setitem(layer._DECODERS, "png-deflate", held)
    first = _encoded(640, 480, "PNG", seed=11)
    loaded: dict[str, Image.Image] = {}
    loader = threading.Thread(target=lambda: loaded.update(a=decode.decode_bytes(first)))
    before = len(spy.started)
    loader.start()
    # the first load's work has started (its decode waits at the gate)
    spy.wait_started(before + 1)
    assert len(spy.started) == before + 1
    while_running = _encoded(600, 400, "JPEG", seed=12)
    _check(hf, fast, spy, while_running, taken=False)  # nothing started: the place is taken
    assert len(spy.started) == before + 1
    gate.set()
    loader.join(WAIT_S)
    assert not loader.is_alive(), f"the first load did not end in {WAIT_S} s"
    spy.started[before].future.result(timeout=WAIT_S)  # never taken: it still ends
    _check(hf, fast, spy, _encoded(600, 400, "JPEG", seed=13))  # the place is free again
    assert len(spy.started) == before + 2
    assert_same(hf(images=[_pillow(first)], return_tensors="pt"),
                fast(images=[loaded["a"]], return_tensors="pt"))


def test_bytes_whose_work_nobody_took_start_none_again(offered):
    """vLLM's processor cache answers an image a conversation sent before: the processor is
    never called on it, so work started on it is dropped. Once such work has died untaken,
    the same bytes start none; bytes whose work was taken still do."""
    import gc

    hf, fast, spy = offered
    sent_before = _encoded(640, 480, "JPEG", seed=21)
    fresh = _encoded(640, 480, "JPEG", seed=22)
    _check(hf, fast, spy, sent_before)  # first sent: the processor takes the work
    gc.collect()
    _check(hf, fast, spy, sent_before)  # taken before: started (and taken) again
    count = len(spy.started)
    image = decode.decode_bytes(sent_before)  # a cache hit: loaded, never processed
    assert len(spy.started) == count + 1
    spy.started[-1].future.result(timeout=WAIT_S)
    del image
    spy.started.clear()  # the spy's own references: the work is dropped for good
    gc.collect()
    _check(hf, fast, spy, sent_before, taken=False)  # nothing started on it
    assert not spy.started
    _check(hf, fast, spy, fresh)  # other bytes: started, taken
    assert len(spy.started) == 1


def test_fingerprints_tell_bytes_apart_by_length_and_samples():
    data = bytes(np.random.default_rng(3).integers(0, 256, 300_000, np.uint8))
    same = speculation.fingerprint(data)
    assert speculation.fingerprint(bytes(data)) == same
    for at in (10, 150_000, 299_990):  # head, middle, tail
        changed = bytearray(data)
        changed[at] ^= 1
        assert speculation.fingerprint(bytes(changed)) != same, at
    assert speculation.fingerprint(data + b"\0") != same
    assert speculation.fingerprint(b"") == (0, 0)


def test_a_forked_child_does_not_count_its_parents_work():
    import os

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    never_done: Any = __import__("concurrent.futures").futures.Future()
    assert speculation.reserve()
    speculation.release(never_done)  # work running in the parent at the fork
    try:
        pid = os.fork()
        if pid == 0:
            ok = all(speculation.reserve() for _ in range(speculation.limit()))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    finally:
        never_done.cancel()


# -- Kimi: the resampler's band kernel on the rows as they decode ------------------------------
@pytest.fixture(scope="module")
def kimi():
    from fixtures.reference_kimi import KIMI_K25_CFG
    from vlm_fastpath.kimi_integration import FusedKimiProcessor

    return FusedKimiProcessor(KIMI_K25_CFG)


@pytest.fixture(params=["float32", "uint8"])
def kimi_offered(kimi, request, monkeypatch):
    """Kimi offered, every size speculated on, its fills counted; the output kind (bytes or
    float32) learnt from a first call, as from the engine's start-up."""
    from vlm_fastpath.kimi_integration import speculative as kimi_speculative

    uint8 = request.param == "uint8"
    monkeypatch.setattr(layer, "OVERLAP_PIXELS", 1)
    flags = {"do_rescale": False, "do_normalize": False} if uint8 else {}
    kimi.preprocess([{"type": "image", "image": Image.new("RGB", (64, 48))}], **flags)
    counts: dict[str, Any] = {"fills": 0, "started": []}
    fill, start = kimi._fill, kimi_speculative.start

    def counted_fill(*args: Any, **kwargs: Any) -> None:
        counts["fills"] += 1
        fill(*args, **kwargs)

    def counted_start(*args: Any, **kwargs: Any) -> Any:
        prepared = start(*args, **kwargs)
        if prepared is not None:
            counts["started"].append(prepared)
        return prepared

    monkeypatch.setattr(kimi, "_fill", counted_fill)
    monkeypatch.setattr(kimi_speculative, "start", counted_start)
    speculation.offer(kimi)
    yield kimi, uint8, counts
    speculation.withdraw(kimi)


def _check_kimi(kimi, uint8: bool, counts: dict, data: bytes) -> None:
    from fixtures.reference_kimi import KIMI_K25_CFG
    from tests.kimi_integration.helpers import assert_parity, img

    fills, before = counts["fills"], len(counts["started"])
    ours = decode.decode_bytes(data)
    assert_parity(kimi, [img(ours)], KIMI_K25_CFG, oracle_medias=[img(_pillow(data))],
                  uint8=uint8)
    # resized (the band kernel) or kept at its size (the patch kernel): taken either way
    taken = _served(counts["started"], before, True)
    assert (counts["fills"] == fills) is taken, "the speculative result was (not) taken"


KIMI_SIZES = [(1203, 917), (3001, 2203), (700, 1400), (60, 45)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", KIMI_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_kimi_pixel_values_made_while_decoding(kimi_offered, fmt, size):
    _check_kimi(*kimi_offered, _encoded(*size, fmt, seed=size[1]))


@pytest.mark.parametrize("fmt", FORMATS)
# resized (two sizes); kept at its size, padded on the right and at the bottom (two sizes)
@pytest.mark.parametrize("size", [(3001, 2203), (2049, 2047), (1203, 917), (1501, 2003)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_kimi_strips_wait_for_their_rows(kimi_offered, slow_decoders_after_pickup, fmt, size):
    _check_kimi(*kimi_offered, _encoded(*size, fmt, seed=size[0]))
    started = kimi_offered[2]["started"]
    # picked up before any row was written: the work ran during the decode
    assert started and not started[-1].future.cancelled()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.integers(8, 900), height=st.integers(8, 900),
       fmt=st.sampled_from(FORMATS))
def test_kimi_any_size(kimi_offered, slow_decoders, width, height, fmt):
    _check_kimi(*kimi_offered, _encoded(width, height, fmt, seed=width * 3 + height))


def test_kimi_failed_decode_and_other_output_kind(kimi_offered, monkeypatch):
    from tests.kimi_integration.helpers import img
    from vlm_fastpath.kimi_integration import speculative as kimi_speculative

    kimi, uint8, counts = kimi_offered
    data = _encoded(3001, 2203, "PNG")  # resized (1203x917 would only be padded)
    ours = decode.decode_bytes(data)
    other = {} if uint8 else {"do_rescale": False, "do_normalize": False}
    fills = counts["fills"]
    kimi.preprocess([img(ours)], **other)  # the other output kind: computed
    assert counts["fills"] == fills + 1
    # never taken, it still ends; then the next load has its place (``limit``)
    counts["started"][-1].future.result(timeout=WAIT_S)
    real = layer.decoder_for("png-deflate")
    monkeypatch.setitem(layer._DECODERS, "png-deflate", _slow_writer(real, fail_at=300))
    seen: list[speculation.Prepared] = []
    start = kimi_speculative.start
    monkeypatch.setattr(kimi_speculative, "start",
                        lambda *a, **k: seen.append(start(*a, **k)) or seen[-1])
    ours = decode.decode_bytes(data)
    assert type(ours) is not layer.decoded_image.DecodedImage  # Pillow decoded it
    with pytest.raises(speculation.DecodeAborted):
        seen[0].future.result(timeout=WAIT_S)


def test_a_forked_child_can_offer_while_the_parent_held_the_lock():
    import os

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    with speculation._LOCK:  # another thread mid-offer when the process forks
        pid = os.fork()
        if pid == 0:  # the child: offering must not hang on the inherited lock
            try:
                holder = Spy.__new__(Spy)
                speculation.offer(holder)
                os._exit(0 if speculation.offered() is holder else 1)
            except BaseException:  # noqa: BLE001 - any failure is the child's exit code
                os._exit(2)
    import signal

    deadline = time.monotonic() + WAIT_S  # it exits at once unless it hangs
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WEXITSTATUS(status) == 0
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the child hung on the lock its parent held at fork")


def test_work_still_queued_is_cancelled_not_waited_for():
    """A call on a busy pool (or on a pool thread, ahead of the queued work) does the work
    itself: the queued work is cancelled, never waited for."""
    from concurrent.futures import Future

    ours = decode.decode_bytes(_encoded(300, 200, "JPEG"))
    owner = object()
    queued: Future = Future()
    speculation.attach(ours, speculation.Prepared(owner, "key", queued))
    got: list[Any] = []
    caller = threading.Thread(target=lambda: got.append(speculation.take(ours, owner, "key")),
                              daemon=True)
    caller.start()
    caller.join(WAIT_S)  # returns at once unless the call waits on the queued work
    assert got == [None], "the call waited for work that never started"
    assert queued.cancelled() and not speculation.pending(ours)
    running: Future = Future()
    running.set_running_or_notify_cancel()
    running.set_result("made")
    speculation.attach(ours, speculation.Prepared(owner, "key", running))
    assert speculation.take(ours, owner, "other") is None  # another key: left in place
    assert speculation.take(ours, owner, "key") == "made"


class _ScriptedProgress:
    """A decode that finishes after ``polls`` waits (or fails there: ``fail``)."""

    def __init__(self, polls: int, fail: bool = False) -> None:
        self.polls, self.fail, self.asked = polls, fail, []

    @property
    def finished(self) -> bool:
        return not self.fail and len(self.asked) >= self.polls

    def wait(self, need: int) -> int:
        self.asked.append(need)
        if self.fail and len(self.asked) >= self.polls:
            return -1
        return need


@settings(max_examples=200, deadline=None)
@given(units=st.integers(1, 40), step=st.sampled_from([1, 2, 4]), polls=st.integers(0, 15),
       lag=st.integers(0, 3))
def test_strips_cover_each_output_row_once_after_the_rows_they_read(units, step, polls, lag):
    rows = units * step
    progress = _ScriptedProgress(polls)
    done: list[tuple[int, int, int]] = []

    def reads(g0: int, g1: int) -> int:
        return g1 + lag

    def run(g0: int, g1: int, workers: int) -> None:
        if not progress.finished:  # while decoding, only rows already waited for are read
            assert progress.asked[-1] >= reads(g0, g1)
        done.append((g0, g1, workers))

    speculation.run_strips(rows, step, progress, reads, run)
    covered = [r for g0, g1, _ in done for r in range(g0, g1)]
    assert covered == list(range(rows))
    assert all(g0 % step == 0 and g1 % step == 0 for g0, g1, _ in done)
    assert len(done) <= speculation.STRIPS


def test_strips_stop_when_the_decode_fails():
    ran: list[tuple[int, int]] = []
    with pytest.raises(speculation.DecodeAborted):
        speculation.run_strips(48, 2, _ScriptedProgress(3, fail=True), lambda a, b: b,
                               lambda a, b, w: ran.append((a, b)))
    assert len(ran) == 2
