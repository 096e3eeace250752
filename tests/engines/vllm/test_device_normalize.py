"""uint8 transport + device-side normalization for Kimi (patch ``vllm-kimi-device-normalize``).

Runs vLLM's real ``KimiK25ProcessingInfo`` and ``KimiK25MultiModalProcessor`` (with vLLM's own
``InputProcessingContext.call_hf_processor``, which casts floating outputs to the model dtype),
the real field config, batching (``group_and_batch_mm_kwargs``) and the real
``KimiK25ForConditionalGeneration.embed_multimodal`` -> ``_parse_and_validate_media_input`` ->
``_process_media_input``, on CPU. The model object is a stand-in: an instance of vLLM's class made
with ``__new__`` + ``nn.Module.__init__`` (its real ``__init__`` builds MoonViT and DeepseekV2,
which need vLLM's parallel state and the device), holding a tiny vision tower that only fixes the
tower dtype; ``vision_tower_forward`` is replaced by a recorder, so what is compared is exactly
what the vision tower would receive.
"""

from __future__ import annotations

import inspect
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from packaging.version import Version
from PIL import Image

import vlm_fastpath
from fixtures.reference_kimi import KIMI_K25_CFG, ref_preprocess
from fixtures.vllm_kimi_model import clear_processor_caches
from fixtures.vllm_requests import hf_inputs as _hf_inputs
from fixtures.vllm_requests import kimi_context as _context
from fixtures.vllm_requests import kimi_mm_processor as _mm_processor

from .test_fresh_process import _probe

vllm = pytest.importorskip("vllm")

NAME = "vllm-kimi-device-normalize"
UINT8_UPSTREAM = Version("0.32")
MIB = 1024 * 1024


def _patch_module():
    return sys.modules["vlm_fastpath.patches.vllm.device_normalize.models_kimi_k25"]


def _status() -> dict[str, dict]:
    return {r["name"]: r for r in vlm_fastpath.status("vllm")}


@pytest.fixture()
def patched(vllm_version):
    if vllm_version >= UINT8_UPSTREAM:
        pytest.skip("vLLM normalizes Kimi pixels on the device itself from 0.32")
    assert _status()[NAME]["status"] == "applied"


# -- vLLM's processing side, with its own call_hf_processor ------------------------------------
def _batched_kwargs(processor, hf_inputs) -> list[dict]:
    """vLLM's field config + per-item split + the runner's batching, as EngineCore does it."""
    from vllm.multimodal import utils as mm_utils
    from vllm.multimodal.inputs import MultiModalKwargsItems

    fields = processor._get_mm_fields_config(hf_inputs, {})
    items = MultiModalKwargsItems.from_hf_inputs(hf_inputs, fields)
    group = getattr(mm_utils, "group_and_batch_mm_kwargs", None) or (
        mm_utils.group_mm_kwargs_by_modality
    )
    pairs = [("vision_chunk", item) for item in items["vision_chunk"]]
    return [kwargs for _, _, kwargs in group(pairs, device="cpu")]


# -- the model side ------------------------------------------------------------------------------
def _stand_in_model(kimi, dtype: torch.dtype):
    cls = kimi.KimiK25ForConditionalGeneration
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    model.vision_tower = torch.nn.Linear(1, 1).to(dtype)  # only its parameter dtype is read
    model.mm_projector = None
    model.use_data_parallel = False
    return model


def _tower_inputs(monkeypatch, kimi, model, batches) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []

    def record(vision_tower, pixel_values, grid_thws, **kwargs):
        seen.append(pixel_values)
        return [pixel_values.new_zeros(1)]

    monkeypatch.setattr(kimi, "vision_tower_forward", record)
    for kwargs in batches:
        model.embed_multimodal(**kwargs)
    monkeypatch.undo()
    return seen


def _image(seed: int, width: int, height: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    return Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode)


def _medias() -> list[dict]:
    return [
        {"type": "image", "image": _image(1, 900, 700)},
        {"type": "image", "image": _image(2, 333, 517)},
        {"type": "image", "image": _image(3, 301, 455, "RGBA")},
        {"type": "image", "image": _image(4, 517, 333, "L")},
        {"type": "video_chunk", "video_chunk": [_image(10 + i, 320, 240) for i in range(4)]},
    ]


# -- tests ---------------------------------------------------------------------------------------
def test_status_per_version(vllm_version):
    result = _status()[NAME]
    expected = "upstream" if vllm_version >= UINT8_UPSTREAM else "applied"
    assert result["status"] == expected, result
    assert result["engine_version"] == vllm.__version__
    if expected == "upstream":
        assert "mm_device_do_normalize" in result["reason"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_tower_receives_what_the_release_gives_it(
    patched, monkeypatch, kimi_module, model_dir, dtype
):
    medias = _medias()
    ref_float, ref_grids, _ = ref_preprocess(medias, KIMI_K25_CFG)
    ref_uint8, _, _ = ref_preprocess(medias, KIMI_K25_CFG, uint8=True)

    # Patched: uint8 leaves the API server, the model normalizes.
    processor = _mm_processor(kimi_module, model_dir, dtype)
    hf_inputs = _hf_inputs(processor, medias)
    assert hf_inputs["pixel_values"].dtype == torch.uint8
    assert torch.equal(hf_inputs["pixel_values"], ref_uint8)
    batches = _batched_kwargs(processor, hf_inputs)
    assert all(b["pixel_values"].dtype == torch.uint8 for b in batches)
    model = _stand_in_model(kimi_module, dtype)
    ctx = processor.info.ctx
    normalizer = _patch_module().attach_normalizer(
        model, SimpleNamespace(model_config=ctx.model_config)
    )
    assert normalizer is not None
    # Bit for bit the eager float32 of the checkpoint's arithmetic, before any cast.
    assert torch.equal(normalizer.to_float32(hf_inputs["pixel_values"]), ref_float)
    patched_seen = _tower_inputs(monkeypatch, kimi_module, model, batches)

    # Unpatched vLLM: the checkpoint's own processor, float32 cast to the model dtype.
    vlm_fastpath.revert("vllm")
    processor = _mm_processor(kimi_module, model_dir, dtype)
    assert not type(processor.info.image_processor).__module__.startswith("vlm_fastpath")
    hf_inputs = _hf_inputs(processor, medias)
    assert hf_inputs["pixel_values"].dtype == dtype
    assert torch.equal(hf_inputs["grid_thws"], ref_grids)
    batches = _batched_kwargs(processor, hf_inputs)
    release_seen = _tower_inputs(
        monkeypatch, kimi_module, _stand_in_model(kimi_module, dtype), batches
    )

    assert len(patched_seen) == len(release_seen) >= 1
    for mine, theirs in zip(patched_seen, release_seen, strict=True):
        assert mine.dtype == theirs.dtype == dtype
        assert torch.equal(mine, theirs)
    if dtype == torch.float32:
        assert torch.equal(torch.cat(patched_seen), ref_float)


def test_profiling_dummy_inputs_are_uint8_and_normalized(
    patched, monkeypatch, kimi_module, model_dir
):
    processor = _mm_processor(kimi_module, model_dir, torch.bfloat16)
    dummy = processor.dummy_inputs.get_dummy_mm_data(4096, {"vision_chunk": 1}, {})
    hf_inputs = _hf_inputs(processor, dummy["vision_chunk"])
    assert hf_inputs["pixel_values"].dtype == torch.uint8
    model = _stand_in_model(kimi_module, torch.bfloat16)
    ctx = processor.info.ctx
    normalizer = _patch_module().attach_normalizer(
        model, SimpleNamespace(model_config=ctx.model_config)
    )
    seen = _tower_inputs(monkeypatch, kimi_module, model, _batched_kwargs(processor, hf_inputs))
    expected = normalizer.to_float32(hf_inputs["pixel_values"]).to(torch.bfloat16)
    assert torch.equal(torch.cat(seen), expected)


def test_payload_bytes(patched, kimi_module, model_dir):
    from vllm.v1.serial_utils import MsgpackEncoder

    medias = [{"type": "image", "image": _image(20 + i, 1536, 1024)} for i in range(4)]
    processor = _mm_processor(kimi_module, model_dir, torch.bfloat16)
    uint8 = _hf_inputs(processor, medias)["pixel_values"]
    eager = processor.info.hf_processor(vision_chunks=medias, return_tensors="pt")["pixel_values"]
    as_shipped = processor.info.ctx._postprocess_output({"pixel_values": eager})["pixel_values"]
    assert eager.dtype == torch.float32 and uint8.dtype == torch.uint8
    assert eager.shape == uint8.shape == (4 * 110 * 74, 3, 14, 14)
    assert eager.nbytes == 76_581_120 and round(eager.nbytes / MIB, 1) == 73.0
    assert as_shipped.nbytes == 38_290_560  # what 0.24 ships at bf16: 36.5 MiB
    assert uint8.nbytes == 19_145_280 and round(uint8.nbytes / MIB, 1) == 18.3

    def wire(tensor: torch.Tensor) -> int:
        return sum(len(memoryview(buf).cast("B")) for buf in MsgpackEncoder().encode(tensor))

    assert wire(uint8) < uint8.nbytes + 1024
    assert wire(as_shipped) > 2 * uint8.nbytes
    print(
        f"\npayload 4x1536x1024: float32 {eager.nbytes / MIB:.1f} MiB, shipped bf16 "
        f"{wire(as_shipped) / MIB:.1f} MiB, uint8 {wire(uint8) / MIB:.1f} MiB (msgpack)"
    )


def test_float_input_passes_through(patched, kimi_module, model_dir):
    model = _stand_in_model(kimi_module, torch.bfloat16)
    ctx = _context(model_dir, torch.bfloat16)
    clear_processor_caches()
    _patch_module().attach_normalizer(model, SimpleNamespace(model_config=ctx.model_config))
    pixels = torch.randn(8, 3, 14, 14).to(torch.bfloat16)
    grids = torch.tensor([[1, 2, 4]])
    out = model._parse_and_validate_media_input(pixel_values=pixels, grid_thws=grids)
    assert out["pixel_values"] is pixels or torch.equal(out["pixel_values"], pixels)


def test_uint8_without_table_is_refused(patched, kimi_module):
    model = _stand_in_model(kimi_module, torch.bfloat16)  # no normalizer attached
    pixels = torch.zeros(8, 3, 14, 14, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="uint8 pixel_values"):
        model._parse_and_validate_media_input(
            pixel_values=pixels, grid_thws=torch.tensor([[1, 2, 4]])
        )


def test_init_wrapper_attaches_the_table(patched, kimi_module, model_dir):
    cls = kimi_module.KimiK25ForConditionalGeneration
    init = cls.__dict__["__init__"]
    assert list(inspect.signature(init).parameters)[:3] == ["self", "vllm_config", "prefix"]

    def fake_original(self, vllm_config, prefix=""):  # stands for MoonViT + DeepseekV2 setup
        torch.nn.Module.__init__(self)

    wrapper = _patch_module().make_init(fake_original)
    model = cls.__new__(cls)
    ctx = _context(model_dir, torch.float16)
    clear_processor_caches()
    wrapper(model, vllm_config=SimpleNamespace(model_config=ctx.model_config), prefix="")
    normalizer = model.__dict__[_patch_module().NORMALIZER_ATTR]
    assert normalizer.transport_dtype == torch.float16
    assert dict(model.named_buffers()) == {} and dict(model.named_parameters()) == {}


def test_revert_restores_originals(patched, kimi_module):
    info_cls = kimi_module.KimiK25ProcessingInfo
    model_cls = kimi_module.KimiK25ForConditionalGeneration
    targets = [
        (info_cls, "get_hf_processor"),
        (model_cls, "__init__"),
        (model_cls, "_parse_and_validate_media_input"),
    ]
    vlm_fastpath.revert("vllm")
    originals = {key: key[0].__dict__[key[1]] for key in targets}
    assert not any(hasattr(fn, "__vlm_fastpath_original__") for fn in originals.values())
    vlm_fastpath.apply("vllm")
    for (owner, attr), original in originals.items():
        assert owner.__dict__[attr] is not original
        assert owner.__dict__[attr].__vlm_fastpath_original__ is original
    vlm_fastpath.revert("vllm")
    for (owner, attr), original in originals.items():
        assert owner.__dict__[attr] is original
    assert _status()[NAME]["status"] == "pending"


def test_held_view_is_float32_once_the_patch_is_off(patched, kimi_module, model_dir):
    """A uint8 view vLLM got before a revert would feed raw bytes to a model whose
    normalizing half is gone: once the patch is off it answers as vLLM's processor (#31)."""
    medias = _medias()[:2]
    vlm_fastpath.revert("vllm")
    clear_processor_caches()
    theirs = _mm_processor(kimi_module, model_dir, torch.float32).info.get_hf_processor(
    ).image_processor.preprocess(medias, return_tensors="pt")
    vlm_fastpath.apply("vllm")
    processor = _mm_processor(kimi_module, model_dir, torch.float32)
    view = processor.info.get_hf_processor().image_processor
    assert view.preprocess(medias, return_tensors="pt")["pixel_values"].dtype == torch.uint8
    vlm_fastpath.revert("vllm", patches=[NAME])
    out = view.preprocess(medias, return_tensors="pt")
    assert out["pixel_values"].dtype == torch.float32
    assert torch.equal(out["pixel_values"], theirs["pixel_values"])


def test_skip_by_name(patched, monkeypatch, kimi_module, model_dir):
    vlm_fastpath.revert("vllm")
    monkeypatch.setenv("VLM_FASTPATH_SKIP", NAME)
    vlm_fastpath.apply("vllm")
    status = _status()
    assert status[NAME]["status"] == "disabled"
    assert status["vllm-kimi-processor"]["status"] == "applied"
    processor = _mm_processor(kimi_module, model_dir, torch.float32)
    hf_inputs = _hf_inputs(processor, _medias()[:1])
    assert hf_inputs["pixel_values"].dtype == torch.float32


def test_stands_aside_without_processor_patch(model_dir, vllm_version):
    result = _probe("device_normalize", model_dir, VLM_FASTPATH_SKIP="vllm-kimi-processor")
    assert result["dtype"] == "torch.float32"
    assert result["wrapped"] == []
    if vllm_version >= UINT8_UPSTREAM:
        assert result["status"][NAME] == "upstream"
        return
    assert result["status"]["vllm-kimi-processor"] == "disabled"
    assert result["status"][NAME] == "not-needed"
    assert "vllm-kimi-processor: disabled" in result["reasons"][NAME]


def test_fresh_process_applies(model_dir, vllm_version):
    result = _probe("device_normalize", model_dir)
    if vllm_version >= UINT8_UPSTREAM:
        assert result["status"][NAME] == "upstream"
        assert result["wrapped"] == []
        return
    assert result["status"][NAME] == "applied"
    assert result["dtype"] == "torch.uint8"
    assert result["wrapped"] == ["get_hf_processor", "__init__", "_parse"]


def test_table_lookup_is_exact_for_any_statistics():
    from vlm_fastpath.kimi_integration import build_normalize_lut

    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    normalizer = _patch_module().DeviceNormalizer(build_normalize_lut(mean, std), torch.float32)
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16).expand(2, 3, 16, 16)
    got = normalizer.to_float32(values.contiguous())
    x = (values.numpy().astype(np.float64) / 255.0).astype(np.float32)
    for c in range(3):  # the checkpoint's float ops, channel by channel
        plane = (x[:, c].astype(np.float64) - mean[c]).astype(np.float32)
        plane = (plane.astype(np.float64) * (1.0 / std[c])).astype(np.float32)
        assert torch.equal(got[:, c], torch.from_numpy(plane))
