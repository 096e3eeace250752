"""The backport of sglang #31227 honours 0.5.16's interfaces on 0.5.12 - 0.5.15.post1.

Each test states one behaviour upstream's unit tests for #31227 assert
(``test/registered/unit/models/test_kimi_k25.py`` and
``test/registered/unit/multimodal/test_feature_materialization.py`` as of 0.5.16 - 0.5.17),
checked here on a backported release with our patches applied: code written against 0.5.16
must work unchanged. The parallel state those tests set through 0.5.16's ``get_parallel()`` is
set here through the releases' own getters (``sglang.srt.layers.dp_attention``).
"""

from __future__ import annotations

import types
from unittest import mock

import pytest
import torch

from vlm_fastpath.patches import REGISTRY

NEEDS_IT = ("0.5.12.post1", "0.5.15.post1")
KEY_VALUE = "_sglang_defer_cuda_ipc_feature_reconstruction"


@pytest.fixture
def backport(engine):
    if engine["version"] not in NEEDS_IT:
        pytest.skip(f"sglang {engine['version']} has #31227 upstream")
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    yield engine
    REGISTRY.revert(engine="sglang")


class PackedTower:
    """MoonViT3d's call contract: ``(pixel_values, grid_thws)`` positional, a list out."""

    device = torch.device("cpu")
    merge_kernel_size = (2, 2)

    def __init__(self) -> None:
        self.config = types.SimpleNamespace(hidden_size=2)
        self.patch_embed = types.SimpleNamespace(
            proj=types.SimpleNamespace(weight=torch.empty(1, dtype=torch.float32))
        )
        self.grid_thws = None
        self.calls = 0

    def __call__(self, pixel_values, grid_thws):
        self.grid_thws, self.calls = grid_thws, self.calls + 1
        return [pixel_values.reshape(-1, 4, pixel_values.shape[-1])]


class Group:
    """An attention-TP group of two seen from one rank: the other rank contributes zeros."""

    def __init__(self, other_first: bool = False) -> None:
        self.other_first = other_first

    def all_gather(self, tensor, dim=0):
        parts = [torch.zeros_like(tensor), tensor]
        return torch.cat(parts if self.other_first else parts[::-1], dim=dim)


def _ranks(monkeypatch, size: int, rank: int, group=None) -> None:
    import sglang.srt.layers.dp_attention as dpa

    monkeypatch.setattr(dpa, "get_attention_tp_size", lambda: size)
    monkeypatch.setattr(dpa, "get_attention_tp_rank", lambda: rank)
    monkeypatch.setattr(dpa, "get_attention_tp_group", lambda: group, raising=False)


def _dp_helper():
    import sglang.srt.multimodal.mm_utils as mm

    return mm.run_dp_sharded_mrope_vision_model


# materialize_multimodal_features (test_feature_materialization.py)


def test_materialize_packs_variable_lengths_and_casts(backport):
    import sglang.srt.multimodal.mm_utils as mm

    first = torch.arange(6, dtype=torch.float32).view(2, 3)
    second = torch.arange(9, dtype=torch.float32).view(3, 3) + 10
    out = mm.materialize_multimodal_features(
        [first, second], device=torch.device("cpu"), dtype=torch.bfloat16
    )
    assert out.shape == (5, 3) and out.dtype == torch.bfloat16
    assert torch.equal(out.float(), torch.cat([first, second]))


def test_materialize_rejects_other_trailing_shapes_with_upstream_message(backport):
    import sglang.srt.multimodal.mm_utils as mm

    with pytest.raises(ValueError, match="matching trailing shapes"):
        mm.materialize_multimodal_features(
            [torch.empty(2, 3), torch.empty(1, 4)], device=torch.device("cpu"),
            dtype=torch.float32,
        )
    with pytest.raises(ValueError, match="at least one tensor"):
        mm.materialize_multimodal_features([], device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="leading dimension"):
        mm.materialize_multimodal_features([torch.tensor(1.0)], device="cpu",
                                           dtype=torch.float32)
    with pytest.raises(TypeError, match="expected torch.Tensor"):
        mm.materialize_multimodal_features([torch.empty(1, 3), [1, 2, 3]], device="cpu",
                                           dtype=torch.float32)


# run_dp_sharded_mrope_vision_model with rope_type="rope_2d_packed" (test_kimi_k25.py)


def test_packed_tower_at_attention_tp_1(backport, monkeypatch):
    _ranks(monkeypatch, 1, 0)
    tower, pixels = PackedTower(), torch.randn(4, 2)
    out = _dp_helper()(tower, pixels, [[1, 2, 2]], rope_type="rope_2d_packed")
    assert torch.equal(out, pixels.reshape(1, 4, 2))
    assert torch.equal(tower.grid_thws, torch.tensor([[1, 2, 2]]))
    assert tower.grid_thws.device.type == "cpu"


def test_packed_tower_at_attention_tp_1_loads_lazily(backport, monkeypatch):
    _ranks(monkeypatch, 1, 0)
    tower, pixels = PackedTower(), torch.randn(4, 2)
    loader = mock.Mock(return_value=pixels)
    out = _dp_helper()(tower, None, [[1, 2, 2]], rope_type="rope_2d_packed",
                       load_local_pixel_values=loader, pixel_values_device=pixels.device,
                       pixel_values_dtype=pixels.dtype)
    assert torch.equal(out, pixels.reshape(1, 4, 2))
    loader.assert_called_once_with([0])


def test_release_rope_2d_name_also_works_at_attention_tp_1(backport, monkeypatch):
    """The releases' own Kimi K2.5 code passes "rope_2d" (and pixel values)."""
    _ranks(monkeypatch, 1, 0)
    tower, pixels = PackedTower(), torch.randn(8, 2)
    out = _dp_helper()(tower, pixels, [[1, 2, 2], [1, 2, 2]], rope_type="rope_2d")
    assert torch.equal(out, pixels.reshape(2, 4, 2))


def test_empty_rank_uses_config_hidden_size_and_skips_the_tower(backport, monkeypatch):
    _ranks(monkeypatch, 2, 1, Group(other_first=False))
    tower = PackedTower()
    out = _dp_helper()(tower, torch.randn(4, 2), [[1, 2, 2]], rope_type="rope_2d_packed")
    assert out.shape == (1, 4, 2)
    assert tower.grid_thws is None and tower.calls == 0


def test_lazy_loader_loads_only_the_local_shard(backport, monkeypatch):
    _ranks(monkeypatch, 2, 0, Group(other_first=False))
    features = [torch.full((4, 2), 1.0), torch.full((4, 2), 2.0)]
    loader = mock.Mock(side_effect=lambda idx: torch.cat([features[i] for i in idx]))
    out = _dp_helper()(PackedTower(), None, [[1, 2, 2], [1, 2, 2]], rope_type="rope_2d_packed",
                       load_local_pixel_values=loader, pixel_values_device=torch.device("cpu"),
                       pixel_values_dtype=torch.float32)
    loader.assert_called_once_with([0])
    assert out.shape == (2, 4, 2)
    assert torch.equal(out[0], features[0].reshape(4, 2))


def test_packed_grid_metadata_stays_on_the_host_at_tp_2(backport, monkeypatch):
    _ranks(monkeypatch, 2, 0, Group(other_first=False))
    tower = PackedTower()
    _dp_helper()(tower, torch.randn(8, 2), [[1, 2, 2], [1, 2, 2]], rope_type="rope_2d_packed")
    assert tower.grid_thws.device.type == "cpu"


def test_dp_helper_argument_errors_are_upstreams(backport, monkeypatch):
    _ranks(monkeypatch, 1, 0)
    with pytest.raises(ValueError, match="pixel_values or load_local_pixel_values"):
        _dp_helper()(PackedTower(), None, [[1, 2, 2]], rope_type="rope_2d_packed")
    with pytest.raises(ValueError, match="pixel_values_device and pixel_values_dtype are required"):
        _dp_helper()(PackedTower(), None, [[1, 2, 2]], rope_type="rope_2d_packed",
                     load_local_pixel_values=lambda idx: None)


# Kimi K2.5 get_image_feature under encoder DP (test_kimi_k25.py)


def _kimi_model():
    import sglang.srt.models.kimi_k25 as kimi

    model = kimi.KimiK25ForConditionalGeneration.__new__(kimi.KimiK25ForConditionalGeneration)
    torch.nn.Module.__init__(model)
    model.use_data_parallel = True
    model.vision_tower = PackedTower()
    model.mm_projector = lambda embeds: embeds
    return model


def _item(feature, grid=None, **fields):
    from sglang.srt.managers.schedule_batch import Modality, MultimodalDataItem

    from fixtures.sglang_cpu import make_item

    data = {} if grid is None else {"image_grid_thw": torch.tensor(grid)}
    data.update(fields.pop("model_specific_data", {}))
    item = make_item(MultimodalDataItem, Modality.IMAGE, feature, data)
    item.offsets = [(0, 1)]
    for name, value in fields.items():
        setattr(item, name, value)
    return item


def test_kimi_encoder_dp_uses_the_packed_contract_with_a_loader(backport):
    model = _kimi_model()
    embeds = torch.randn(1, 2)
    with mock.patch("sglang.srt.models.kimi_k25.run_dp_sharded_mrope_vision_model",
                    return_value=embeds) as run_dp:
        out = model.get_image_feature([_item(torch.randn(4, 2), [[1, 2, 2]])])
    assert out is embeds
    tower, pixels, grids = run_dp.call_args.args
    assert tower is model.vision_tower and pixels is None and grids == [[1, 2, 2]]
    assert run_dp.call_args.kwargs["rope_type"] == "rope_2d_packed"
    assert callable(run_dp.call_args.kwargs["load_local_pixel_values"])


def test_kimi_loader_rejects_a_feature_that_is_no_tensor(backport):
    model = _kimi_model()
    with mock.patch("sglang.srt.models.kimi_k25.run_dp_sharded_mrope_vision_model") as run_dp:
        model.get_image_feature([_item(object(), [[1, 2, 2]])])
    loader = run_dp.call_args.kwargs["load_local_pixel_values"]
    with pytest.raises(TypeError, match="Kimi-K2.5/K2.7 image feature must be a torch.Tensor"):
        loader([0])


# the lazy CUDA-IPC item (test_kimi_k25.py)


def _bare_proxy(**attrs):
    """A proxy made the way upstream's test makes one: ``__new__``, no ``proxy_state``."""
    from sglang.srt.utils.cuda_ipc_transport_utils import CudaIpcTensorTransportProxy

    proxy = CudaIpcTensorTransportProxy.__new__(CudaIpcTensorTransportProxy)
    for name, value in attrs.items():
        setattr(proxy, name, value)
    return proxy


@pytest.fixture
def dp_server(monkeypatch):
    """The scheduler's published server args with encoder DP on (our stricter check)."""
    from sglang.srt import server_args as sa

    args = types.SimpleNamespace(mm_enable_dp_encoder=True, tp_size=8)
    monkeypatch.setattr(sa, "get_global_server_args", lambda: args, raising=False)
    return args


def test_marked_proxy_without_proxy_state_stays_lazy(backport, dp_server, monkeypatch):
    from sglang.srt.managers.schedule_batch import MultimodalInputs, MultimodalProcessorOutput
    from sglang.srt.utils import cuda_ipc_transport_utils as transport

    proxy = _bare_proxy(reconstruct_on_target_device=mock.Mock())
    assert not hasattr(proxy, "proxy_state")
    item = _item(proxy, hash=123, pad_value=456,
                 model_specific_data={transport.DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY: True})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    inputs = MultimodalInputs.from_processor_output(MultimodalProcessorOutput(mm_items=[item]))
    assert inputs.mm_items[0].feature is proxy
    proxy.reconstruct_on_target_device.assert_not_called()


def test_reconstruct_passes_the_consumer_count_to_the_proxy(backport):
    proxy = _bare_proxy(reconstruct_on_target_device=mock.Mock(return_value=torch.randn(1, 2)))
    item = _item(proxy)
    item.reconstruct(0, ipc_consumer_count=8)
    proxy.reconstruct_on_target_device.assert_called_once_with(0, consumer_count=8)


def test_cache_hit_acknowledges_a_bare_proxy(backport):
    """Counted by ``isinstance``: a proxy without ``proxy_state`` is still released."""
    proxy = _bare_proxy(acknowledge_consumption=mock.Mock())
    _item(proxy).acknowledge_deferred_cuda_ipc_feature(8)
    proxy.acknowledge_consumption.assert_called_once_with(8)


def test_acknowledgement_is_idempotent_before_it_validates(backport):
    proxy = _bare_proxy(sync_data_meta=None, _consumer_acknowledged=True)
    proxy.acknowledge_consumption(0)  # already counted: returns, as upstream, without raising
    fresh = _bare_proxy(sync_data_meta=None)
    with pytest.raises(ValueError, match="consumer_count must be positive"):
        fresh.acknowledge_consumption(0)


def test_upstream_constant_name_is_published_and_reverted(backport):
    import sglang.srt.managers.schedule_batch as sb
    import sglang.srt.utils.cuda_ipc_transport_utils as transport

    assert transport.DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY == KEY_VALUE
    assert sb.DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY == KEY_VALUE
    REGISTRY.revert(engine="sglang")
    assert not hasattr(transport, "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY")
    assert not hasattr(sb, "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY")


def test_stricter_check_a_marker_without_encoder_dp_is_reconstructed(backport, monkeypatch):
    """What the scheduler's own ``mm_enable_dp_encoder`` guards: the model built from those
    args runs its non-DP branch, which cannot take a proxy."""
    from sglang.srt import server_args as sa
    from sglang.srt.managers.schedule_batch import MultimodalInputs, MultimodalProcessorOutput

    monkeypatch.setattr(sa, "get_global_server_args",
                        lambda: types.SimpleNamespace(mm_enable_dp_encoder=False, tp_size=2),
                        raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    tensor = torch.randn(1, 2)
    proxy = _bare_proxy(reconstruct_on_target_device=mock.Mock(return_value=tensor))
    item = _item(proxy, hash=1, pad_value=2, model_specific_data={KEY_VALUE: True})
    inputs = MultimodalInputs.from_processor_output(MultimodalProcessorOutput(mm_items=[item]))
    assert inputs.mm_items[0].feature is tensor
