"""The reliability probe's cases: never silently wrong pixels, bad input -> a specific error.

- A deferred payload whose frame disagrees with its plan (another image, another size, mode or
  channel count) is refused on the owner with ``KimiInputError`` naming both sizes, on every
  backend: never resized or truncated to the plan.
- ``prepare`` decodes encoded bytes fully, so a truncated or undecodable file fails on the
  sender, with the request, and ``run`` cannot fail for input reasons.
- Small gaps: meta tensors, non-UTF-8 config files, ``recipe=``/``resize_backend=`` typos,
  ``choose_form`` sizes, the integer/boolean array message, an unloadable numba layer.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from fixtures import bad_images
from fixtures.reference_kimi import KIMI_K25_CFG
from vlm_fastpath.kimi_integration import FusedKimiProcessor, KimiMediaConfig
from vlm_fastpath.kimi_integration.deferred import DeferredKimiProcessor, choose_form
from vlm_fastpath.kimi_integration.deferred.transport import TransportForm
from vlm_fastpath.kimi_integration.errors import (
    DeferredPayloadError,
    KimiConfigError,
    KimiInputError,
)

K25_BACKENDS = ["pillow", "torch-pillow", "torch-antialias"]


def _img(obj):
    return {"type": "image", "image": obj}


def _jpeg(width: int, height: int, seed: int = 0, mode: str = "RGB") -> bytes:
    image = bad_images.photo(width, height, seed)
    if mode != "RGB":
        image = image.convert(mode)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


# -- 1. payloads are checked against their plan ------------------------------------------------
@pytest.mark.parametrize("backend", K25_BACKENDS)
def test_other_encoded_image_than_planned_is_refused(backend):
    """The probe's case: a 1024x1024 JPEG in place of the planned (larger) image."""
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(_jpeg(1300, 1300))])
    frame = payload.medias[0].frames[0]
    assert frame.form is TransportForm.ENCODED
    frame.data = _jpeg(1024, 1024, seed=3)
    with pytest.raises(KimiInputError, match=r"decoded size 1024x1024.*1300x1300"):
        proc.run(payload, resize_backend=backend)


@pytest.mark.parametrize("backend", K25_BACKENDS)
def test_raw_frame_of_another_size_is_refused(backend):
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(bad_images.photo(120, 80))])
    frame = payload.medias[0].frames[0]
    assert frame.form is TransportForm.RAW
    frame.data = torch.zeros((3, 60, 100), dtype=torch.uint8)
    with pytest.raises(KimiInputError, match=r"decoded size 100x60.*120x80"):
        proc.run(payload, resize_backend=backend)


def test_k3_raw_frame_of_another_size_is_refused():
    proc = DeferredKimiProcessor(KIMI_K25_CFG, recipe="k3")
    payload = proc.prepare([_img(bad_images.photo(120, 80))])
    payload.medias[0].frames[0].data = torch.zeros((3, 80, 119), dtype=torch.uint8)
    with pytest.raises(KimiInputError, match=r"119x80.*120x80"):
        proc.run(payload)


@pytest.mark.parametrize("backend", K25_BACKENDS)
def test_channel_count_mismatch_is_refused(backend):
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(bad_images.photo(120, 80))])
    payload.medias[0].frames[0].data = torch.zeros((1, 80, 120), dtype=torch.uint8)
    with pytest.raises(KimiInputError, match=r"channel count 1.*3"):
        proc.run(payload, resize_backend=backend)


def test_encoded_mode_mismatch_is_refused():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(_jpeg(1300, 1300))])
    payload.medias[0].frames[0].data = _jpeg(1300, 1300, mode="L")
    with pytest.raises(KimiInputError, match=r"mode 'L'.*'RGB'"):
        proc.run(payload)


def test_video_frame_of_another_size_is_refused():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    frames = [bad_images.photo(64, 48, seed=i) for i in range(4)]
    payload = proc.prepare([{"type": "video_chunk", "video_chunk": frames}])
    payload.medias[0].frames[2].data = torch.zeros((3, 48, 65), dtype=torch.uint8)
    with pytest.raises(KimiInputError, match=r"65x48.*64x48"):
        proc.run(payload, resize_backend="torch-pillow")


def test_plan_of_another_size_is_refused():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(bad_images.photo(120, 80))])
    other = proc.prepare([_img(bad_images.photo(300, 200))])
    payload.medias[0].plan = other.medias[0].plan
    with pytest.raises(KimiInputError, match="plan"):
        proc.run(payload)


def test_frames_without_a_source_size_are_refused():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(bad_images.photo(120, 80))])
    payload.medias[0].frames[0].width = 0
    with pytest.raises(DeferredPayloadError, match="source size"):
        proc.run(payload)


def test_untouched_payload_still_equals_eager():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    medias = [_img(_jpeg(1300, 1300)), _img(bad_images.photo(120, 80))]
    eager = proc.eager(medias)["pixel_values"]
    for backend in ("pillow", "torch-pillow"):
        out = proc.run(proc.prepare(medias), resize_backend=backend)
        assert torch.equal(out["pixel_values"], eager)


# -- 2. prepare verifies encoded bytes ---------------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [bad_images.truncated(_jpeg(1300, 1300)), bad_images.truncated(bad_images.png_bytes(900, 700))],
    ids=["truncated-jpeg", "truncated-png"],
)
def test_truncated_encoded_bytes_fail_in_prepare(data):
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    assert proc.decide(_img(data)).form is TransportForm.ENCODED  # headers alone look fine
    with pytest.raises(KimiInputError, match="cannot decode image.*truncated"):
        proc.prepare([_img(data)])


def test_undecodable_bytes_fail_in_prepare():
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    with pytest.raises(KimiInputError, match="cannot decode image"):
        proc.prepare([_img(bad_images.garbage())])


def test_truncated_bytes_fail_the_same_way_eagerly():
    data = bad_images.truncated(_jpeg(1300, 1300))
    with pytest.raises(KimiInputError, match="truncated"):
        FusedKimiProcessor(KIMI_K25_CFG).preprocess([_img(data)])


# -- 4. small gaps -----------------------------------------------------------------------------
def test_meta_tensor_is_an_input_error():
    meta = torch.empty((32, 32, 3), dtype=torch.uint8, device="meta")
    with pytest.raises(KimiInputError, match="'meta' device"):
        FusedKimiProcessor(KIMI_K25_CFG).preprocess([_img(meta)])
    with pytest.raises(KimiInputError, match="'meta' device"):
        DeferredKimiProcessor(KIMI_K25_CFG).prepare([_img(meta)])
    with pytest.raises(KimiInputError, match="'meta' device"):
        DeferredKimiProcessor(KIMI_K25_CFG, recipe="k3").prepare([_img(meta)])


def test_non_utf8_config_file_is_a_config_error(tmp_path):
    path = tmp_path / "preprocessor_config.json"
    path.write_bytes(b'{"media_proc_cfg": {"patch_size": 14, "\xff\xfe": 1}}')
    with pytest.raises(KimiConfigError, match="not UTF-8"):
        KimiMediaConfig.from_pretrained(tmp_path)
    with pytest.raises(KimiConfigError, match="not UTF-8"):
        FusedKimiProcessor.from_pretrained(path)


def test_unreadable_config_path_is_a_config_error(tmp_path):
    (tmp_path / "preprocessor_config.json").mkdir()  # a folder where the file should be
    with pytest.raises(KimiConfigError, match="cannot read"):
        KimiMediaConfig.from_pretrained(tmp_path)


def test_recipe_and_backend_typos_are_config_errors():
    with pytest.raises(KimiConfigError, match="recipe must be one of.*'k35'"):
        DeferredKimiProcessor(KIMI_K25_CFG, recipe="k35")
    proc = DeferredKimiProcessor(KIMI_K25_CFG)
    payload = proc.prepare([_img(bad_images.photo(40, 30))])
    with pytest.raises(KimiConfigError, match="resize_backend must be one of.*'pilow'"):
        proc.run(payload, resize_backend="pilow")
    k3 = DeferredKimiProcessor(KIMI_K25_CFG, recipe="k3")
    with pytest.raises(KimiConfigError, match="resize_backend"):
        k3.run(k3.prepare([_img(bad_images.photo(40, 30))]), resize_backend="pillow")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"raw_bytes": -1, "processed": 10}, "raw_bytes"),
        ({"raw_bytes": 5, "processed": -10}, "processed"),
        ({"raw_bytes": math.nan, "processed": 10}, "raw_bytes"),
        ({"raw_bytes": 5, "processed": math.nan}, "processed"),
        ({"raw_bytes": 5, "processed": None}, "processed"),
        ({"raw_bytes": 5, "processed": 10, "encoded_bytes": -3}, "encoded_bytes"),
        ({"raw_bytes": 5, "processed": 10, "encoded_bytes": 2.5}, "encoded_bytes"),
        ({"raw_bytes": True, "processed": 10}, "raw_bytes"),
    ],
)
def test_choose_form_refuses_bad_sizes(kwargs, name):
    with pytest.raises(KimiInputError, match=name):
        choose_form(**kwargs)


def test_choose_form_still_takes_none_for_absent_forms():
    assert choose_form(None, 10).form is TransportForm.EAGER
    assert choose_form(5, 10, None).form is TransportForm.RAW
    assert choose_form(np.int64(5), np.int64(10)).form is TransportForm.RAW


@pytest.mark.parametrize(
    ("array", "advice"),
    [
        (np.zeros((8, 8, 3), dtype=np.int64), "clip and cast integer"),
        (np.zeros((8, 8, 3), dtype=np.uint16), "clip and cast integer"),
        (np.zeros((8, 8, 3), dtype=bool), "boolean masks"),
        (np.zeros((8, 8, 3), dtype=np.float32), "convert floats"),
        (torch.zeros((8, 8, 3), dtype=torch.int32), "clip and cast integer"),
        (torch.zeros((8, 8, 3), dtype=torch.bool), "boolean masks"),
    ],
    ids=["int64", "uint16", "bool", "float32", "torch-int32", "torch-bool"],
)
def test_non_uint8_message_names_the_right_fix(array, advice):
    with pytest.raises(KimiInputError, match=advice) as info:
        FusedKimiProcessor(KIMI_K25_CFG).preprocess([_img(array)])
    if advice != "convert floats":
        assert "float" not in str(info.value)


_TBB_SCRIPT = textwrap.dedent(
    """
    import numba
    from numba import njit, prange
    import numpy as np
    from vlm_fastpath.imaging.threading_layer import ensure_loadable_threading_layer

    @njit(parallel=True)
    def total(x):
        s = 0.0
        for i in prange(x.shape[0]):
            s += x[i]
        return s

    chosen = ensure_loadable_threading_layer()
    print(chosen, total(np.ones(1000)), numba.threading_layer())
    """
)


def test_unloadable_numba_layer_falls_back_to_workqueue():
    pytest.importorskip("numba")
    from vlm_fastpath.imaging.threading_layer import layer_loads

    if layer_loads("tbb"):
        pytest.skip("tbb is installed here: nothing to fall back from")
    env = dict(os.environ, NUMBA_THREADING_LAYER="tbb")
    out = subprocess.run([sys.executable, "-c", _TBB_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["workqueue", "1000.0", "workqueue"]
    assert "cannot load here" in out.stderr


def test_loadable_numba_layer_is_left_alone():
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    out = subprocess.run([sys.executable, "-c", _TBB_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "workqueue" and "cannot load" not in out.stderr


def test_processor_works_under_an_unloadable_numba_layer():
    """End to end once ``patchify_kernel`` calls the fallback before its first launch."""
    pytest.importorskip("numba")
    from vlm_fastpath.imaging.threading_layer import layer_loads
    from vlm_fastpath.kimi_integration import patchify_kernel

    source = open(patchify_kernel.__file__, encoding="utf-8").read()
    if "ensure_loadable_threading_layer" not in source:
        pytest.skip("patchify_kernel does not call ensure_loadable_threading_layer yet")
    if layer_loads("tbb"):
        pytest.skip("tbb is installed here: nothing to fall back from")
    script = textwrap.dedent(
        """
        import numpy as np
        from vlm_fastpath.kimi_integration import FusedKimiProcessor
        from fixtures.reference_kimi import KIMI_K25_CFG
        image = np.zeros((300, 200, 3), dtype=np.uint8)
        out = FusedKimiProcessor(KIMI_K25_CFG).preprocess([{"type": "image", "image": image}])
        print(tuple(out["pixel_values"].shape))
        """
    )
    env = dict(os.environ, NUMBA_THREADING_LAYER="tbb")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
