"""Batched same-shape resize of Kimi K2.5's GPU preprocessing (sglang #31227), on the release.

``_gpu_preprocess_images`` runs on the CPU here: the release's two helpers that move inputs to
CUDA (``_pil_to_cuda_chw``, ``_ensure_chw_rgb``) are replaced by CPU versions for both the
release's function and ours. Every result is compared with ``torch.equal`` to the release's own
function; interpolate calls are counted through the module's ``F.interpolate``.
"""

from __future__ import annotations

import time
from unittest import mock

import numpy as np
import pytest
import torch

from vlm_fastpath.patches import REGISTRY

PROC = "sglang.srt.multimodal.processors.kimi_k25"
NAME = "sglang-kimi-k25-batched-same-shape-resize"
NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")
# target 210x266, padded to 224x280 (patch 14)
CONFIG = {"new_height": 210, "new_width": 266, "pad_height": 14, "pad_width": 14}
OTHER = {"new_height": 140, "new_width": 168, "pad_height": 0, "pad_width": 0}


def _cpu_chw(image):
    if not isinstance(image, torch.Tensor):
        return torch.from_numpy(np.asarray(image.convert("RGB"))).permute(2, 0, 1)
    if image.dim() == 2:
        image = image.unsqueeze(0)
    return image.repeat(3, 1, 1) if image.shape[0] == 1 else image[:3]


@pytest.fixture
def proc(engine, monkeypatch):
    import importlib

    module = importlib.import_module(PROC)
    monkeypatch.setattr(module, "_pil_to_cuda_chw", _cpu_chw)
    if hasattr(module, "_ensure_chw_rgb"):
        monkeypatch.setattr(module, "_ensure_chw_rgb", _cpu_chw)
    yield module
    REGISTRY.revert(engine="sglang")


@pytest.fixture
def backport(proc, engine):
    if engine["version"] not in NEEDS_IT:
        pytest.skip(f"sglang {engine['version']} batches same-shape resizes upstream")
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang", patches=[NAME])
    assert REGISTRY.get(NAME) and _status() == "applied"
    return proc


def _status():
    return {r.name: r.status.value for r in REGISTRY.status("sglang")}[NAME]


def _norm(device="cpu"):
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073], device=device).view(1, 3, 1, 1)
    std_inv = 1.0 / torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
    return mean, std_inv


def _images(shapes, seed=0, dtype=torch.uint8):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, shape, generator=gen, dtype=torch.int64).to(dtype)
            for shape in shapes]


def _counted(module, func, *args):
    calls = []
    real = torch.nn.functional.interpolate

    def record(x, *a, **k):
        calls.append(tuple(x.shape))
        return real(x, *a, **k)

    with mock.patch(f"{PROC}.F.interpolate", side_effect=record):
        out = func(*args)
    return out, calls


def _both(engine, module, images, configs):
    original = engine["originals"][(PROC, "_gpu_preprocess_images")]
    mean, std_inv = _norm()
    ref, ref_calls = _counted(module, original, images, configs, mean, std_inv, 14)
    got, calls = _counted(module, module._gpu_preprocess_images, images, configs, mean,
                          std_inv, 14)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    return ref_calls, calls


def test_four_same_shape_images_share_one_interpolate(backport, engine):
    images = _images([(3, 300, 400)] * 4)
    ref_calls, calls = _both(engine, backport, images, [CONFIG] * 4)
    assert len(ref_calls) == 4 and ref_calls[0] == (1, 3, 300, 400)
    assert calls == [(4, 3, 300, 400)]


def test_a_target_group_batches_per_source_shape_and_dtype(backport, engine):
    images = _images([(3, 300, 400)] * 3 + [(3, 280, 420)])
    images.append(images[0].float())  # same shape, other dtype: a call of its own
    ref_calls, calls = _both(engine, backport, images, [CONFIG] * 5)
    assert len(ref_calls) == 5
    assert sorted(calls) == sorted([(3, 3, 300, 400), (1, 3, 280, 420), (1, 3, 300, 400)])


def test_mixed_targets_pil_and_singletons(backport, engine):
    from PIL import Image

    arrays = _images([(300, 400, 3)] * 2, seed=3)
    pil = [Image.fromarray(a.numpy()) for a in arrays]
    images = [pil[0], *_images([(3, 120, 150)]), pil[1], *_images([(3, 300, 400)], seed=5)]
    configs = [CONFIG, OTHER, CONFIG, CONFIG]
    ref_calls, calls = _both(engine, backport, images, configs)
    assert len(ref_calls) == 4
    # the PIL images and the tensor of the same source shape share one call
    assert calls == [(3, 3, 300, 400), (1, 3, 120, 150)]


def test_nothing_to_batch_runs_the_release_function(backport, engine):
    images = _images([(3, 300, 400), (3, 120, 150)])
    ref_calls, calls = _both(engine, backport, images, [CONFIG, OTHER])
    assert calls == ref_calls
    _both(engine, backport, [], [])


def test_resize_by_source_shape_contract(backport):
    """0.5.16's ``_resize_images_by_source_shape``: one call per source shape, input order."""
    torch.manual_seed(0)
    indexed = [(0, torch.randn(3, 32, 24)), (1, torch.randn(3, 32, 24)),
               (2, torch.randn(3, 28, 20))]
    expected = [torch.nn.functional.interpolate(image.unsqueeze(0), size=(16, 12),
                                                mode="bicubic", align_corners=False)
                for _, image in indexed]
    out, calls = _counted(backport, backport._resize_images_by_source_shape, indexed, 16, 12)
    assert calls == [(2, 3, 32, 24), (1, 3, 28, 20)]
    assert len(out) == 3 and all(torch.equal(a, b) for a, b in zip(out, expected, strict=True))


def test_revert_removes_it(backport, engine):
    REGISTRY.revert(engine="sglang")
    assert not hasattr(backport, "_resize_images_by_source_shape")
    assert backport._gpu_preprocess_images is engine["originals"][(PROC, "_gpu_preprocess_images")]
    REGISTRY.apply(engine="sglang", patches=[NAME])
    REGISTRY.apply(engine="sglang", patches=[NAME])  # idempotent
    assert _status() == "applied"


def test_stands_aside_where_upstream_batches(proc, engine):
    from vlm_fastpath.patches.sglang.encoder_dp_ipc.multimodal_processors_kimi_k25 import (
        release_resizes_plainly,
    )

    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang", patches=[NAME])
    if engine["version"] in NEEDS_IT:
        assert _status() == "applied" and release_resizes_plainly(proc)
        return
    assert hasattr(proc, "_resize_images_by_source_shape") and _status() == "upstream"
    assert proc._gpu_preprocess_images is engine["originals"][(PROC, "_gpu_preprocess_images")]
    # the release's resize is read from its code: 0.5.17+ antialiases and rounds, which the
    # batched plain resize would not reproduce
    import inspect

    if "antialias=True" in inspect.getsource(proc):
        assert not release_resizes_plainly(proc)


def test_cpu_timing(backport, engine, capsys):
    """Four 1024x1024 uint8 images to one target: release vs batched (printed, -s)."""
    original = engine["originals"][(PROC, "_gpu_preprocess_images")]
    images = _images([(3, 1024, 1024)] * 4, seed=9)
    config = {"new_height": 896, "new_width": 896, "pad_height": 0, "pad_width": 0}
    mean, std_inv = _norm()
    timings = {}
    for label, func in (("release", original), ("batched", backport._gpu_preprocess_images)):
        func(images, [config] * 4, mean, std_inv, 14)
        best = min(_timed(func, images, [config] * 4, mean, std_inv) for _ in range(3))
        timings[label] = best
    with capsys.disabled():
        print(f"\n[resize 4x1024^2->896^2 CPU] release {timings['release'] * 1e3:.1f} ms, "
              f"batched {timings['batched'] * 1e3:.1f} ms")


def _timed(func, images, configs, mean, std_inv):
    start = time.perf_counter()
    func(images, configs, mean, std_inv, 14)
    return time.perf_counter() - start
