"""``row_progress``: a waiter learns which rows a decoder has finished, and never earlier.

The fake decoders here write like the codec libraries (every row once, top to bottom) but
adversarially: a row's tail (where the mark sits) first, the rest of the row after a pause.
So a waiter that trusted a row as soon as its own mark was gone would copy a half-written
row, and the copies taken as rows are reported would differ from the final image.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from vlm_fastpath.imaging import row_progress
from vlm_fastpath.imaging.row_progress import MARK, RowProgress

pytestmark = pytest.mark.skipif(not row_progress.supported(),
                                reason="rows cannot be followed on this machine")

# How long a test waits for its waiter thread. Generous: it ends as soon as the rows are in
# (milliseconds, even on a loaded 2-core machine); only a broken build waits this long.
WAIT_S = 60.0


def _write_rows(out: np.ndarray, image: np.ndarray, pause_every: int = 7,
                fail_at: int | None = None) -> None:
    """Rows of ``image`` into ``out`` in order, each tail first; raises at ``fail_at``."""
    rows, src = out.reshape(out.shape[0], -1), image.reshape(image.shape[0], -1)
    tail = min(MARK.shape[0], rows.shape[1])
    for r in range(rows.shape[0]):
        if fail_at is not None and r == fail_at:
            raise OSError("broken data stream")
        rows[r, -tail:] = src[r, -tail:]
        if r % pause_every == 0:
            time.sleep(0.0005)  # the waiter sees this row's mark gone, its body not yet
        rows[r, :-tail] = src[r, :-tail]


def _follow(progress: RowProgress, out: np.ndarray, step: int,
            copied: threading.Event | None = None) -> tuple[np.ndarray, list[int]]:
    """Copy rows as soon as they are reported written; the reports, in order. ``copied`` is
    set once the first reported rows are copied (a writer can wait for it)."""
    copies = np.zeros_like(out)
    reports = []
    have = 0
    while have < out.shape[0]:
        got = progress.wait(have + step)
        reports.append(got)
        if got < 0:
            break
        copies[have:got] = out[have:got]
        have = got
        if copied is not None:
            copied.set()
    return copies, reports


def _joined(waiter: threading.Thread) -> None:
    waiter.join(WAIT_S)
    assert not waiter.is_alive(), f"the waiter did not end in {WAIT_S} s"


@pytest.mark.parametrize("shape", [(257, 61, 3), (96, 1, 1), (130, 2), (64, 33, 4)])
@pytest.mark.parametrize("step", [1, 5, 64])
def test_rows_are_reported_only_once_written(shape, step):
    image = np.random.default_rng(sum(shape) + step).integers(0, 256, shape, np.uint8)
    out = np.zeros(shape, np.uint8)
    progress = RowProgress(out)
    progress.mark()
    result = {}
    waiter = threading.Thread(target=lambda: result.update(
        zip(("copies", "reports"), _follow(progress, out, step), strict=True)), daemon=True)
    waiter.start()
    _write_rows(out, image)
    progress.done()
    _joined(waiter)
    assert np.array_equal(out, image)
    assert np.array_equal(result["copies"], image)
    reports = result["reports"]
    assert reports == sorted(reports) and reports[-1] == shape[0]


def test_an_abort_stops_the_waiter():
    image = np.random.default_rng(1).integers(0, 256, (200, 40, 3), np.uint8)
    out = np.zeros_like(image)
    progress = RowProgress(out)
    progress.mark()
    result = {}
    waiter = threading.Thread(target=lambda: result.update(r=progress.wait(200)), daemon=True)
    waiter.start()
    with pytest.raises(OSError):
        _write_rows(out, image, fail_at=120)
    progress.abort()
    _joined(waiter)
    assert result["r"] == -1
    assert progress.wait(10) == -1


def test_a_row_that_ends_like_the_mark_waits_for_the_end():
    image = np.random.default_rng(2).integers(0, 256, (50, 10, 4), np.uint8)
    image[20, -1] = MARK  # its real tail is the mark: the scan stops there
    out = np.zeros_like(image)
    progress = RowProgress(out)
    progress.mark()
    out[:] = image  # every row written, the decode not yet over
    assert progress.wait(10) >= 10
    assert progress.known == 19  # rows after row 20 are not trusted yet
    progress.done()
    assert progress.wait(50) == 50


def test_the_done_flag_counts_every_row_and_bad_buffers_are_refused():
    out = np.zeros((30, 8, 3), np.uint8)
    progress = RowProgress(out)
    progress.mark()
    assert np.all(out[:, -1, :] == MARK[1:]) and np.all(out[:, -2, 2] == MARK[0])
    progress.done()
    assert progress.wait(30) == 30
    with pytest.raises(ValueError):
        RowProgress(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError):
        RowProgress(np.zeros((4, 6), np.uint8)[:, ::2])


# -- the codec libraries themselves: what ``decode.variants.rows_in_order`` relies on -------------
def _followed_decode(decode, data: bytes, shape: tuple[int, ...],
                     copied: threading.Event | None = None
                     ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``decode`` into a marked buffer while a thread copies rows as they are reported
    (``copied``: set once it copied the first ones)."""
    out = np.empty(shape, np.uint8)
    progress = RowProgress(out)
    progress.mark()
    seen: dict[str, tuple[np.ndarray, list[int]]] = {}
    waiter = threading.Thread(target=lambda: seen.update(r=_follow(progress, out, 1, copied)),
                              daemon=True)
    waiter.start()
    try:
        decode(data, out)
    except BaseException:
        progress.abort()  # the waiter stops rather than outlive the test
        raise
    progress.done()
    _joined(waiter)
    copies, reports = seen["r"]
    return out, copies, reports


def _real_codec(variant: str):
    from vlm_fastpath.imaging.decode import layer

    found = layer.decoder_for(variant)
    if found is None:
        pytest.skip(f"no verified {variant} decoder here")
    return found


@pytest.mark.parametrize("variant, fmt, params", [
    ("jpeg-ycbcr", "JPEG", {"quality": 90}),
    ("jpeg-ycbcr", "JPEG", {"quality": 80, "progressive": True}),
    ("png-8bit", "PNG", {}),
    ("png-deflate", "PNG", {}),
    ("webp-still", "WEBP", {"quality": 85}),
    ("webp-still", "WEBP", {"lossless": True, "method": 0}),
], ids=["jpeg", "jpeg-progressive", "png", "png-deflate", "webp-lossy", "webp-lossless"])
def test_the_codec_libraries_write_rows_once_in_order(variant, fmt, params):
    from PIL import Image

    from fixtures import decode_corpus
    from vlm_fastpath.imaging.decode import variants

    decode = _real_codec(variant)
    data = decode_corpus.save(Image.fromarray(decode_corpus.photo_like(1537, 1024, seed=4)),
                              fmt, **params)
    assert variants.rows_in_order(variant, data)
    for _ in range(3):
        out, copies, reports = _followed_decode(decode, data, (1024, 1537, 3))
        assert np.array_equal(copies, out), "a row was reported before its last write"


def test_a_decoder_writing_rows_in_two_passes_is_caught():
    """The check above can fail: a decoder that writes every row, then writes them again (an
    alpha plane, an interlace pass) has its first-pass rows reported and copied. The second
    pass starts only once the waiter has copied first-pass rows, however late it runs."""
    image = np.random.default_rng(5).integers(0, 256, (300, 40, 3), np.uint8)
    copied = threading.Event()

    def two_passes(data: bytes, out: np.ndarray) -> np.ndarray:
        for provisional in (True, False):
            for r in range(out.shape[0]):
                out[r] = image[r] // 2 if provisional else image[r]
            if provisional:  # every mark is gone: the rows above the last are reported
                assert copied.wait(WAIT_S), "no first-pass row was ever reported"
        return out

    _, copies, reports = _followed_decode(two_passes, b"", image.shape, copied)
    assert len(reports) > 1 and not np.array_equal(copies, image)
