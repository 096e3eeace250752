"""SGLang engine suite: run with one pinned release's python (``.envs/sglang-<ver>/bin/python``).

The engine is imported once per session; the patches are applied at import by our .pth/plugin
door, so the session first reverts them and keeps the pristine originals for comparison.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

sglang = pytest.importorskip("sglang")

from vlm_fastpath.patches import REGISTRY  # noqa: E402

SGLANG_MODULES = (
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.managers.mm_utils",
    "sglang.srt.layers.attention.vision",
    "sglang.srt.models.kimi_k25",
    "sglang.srt.multimodal.processors.kimi_k25",
    "sglang.srt.utils.cuda_ipc_transport_utils",
    "sglang.srt.multimodal.mm_utils",
    "sglang.srt.multimodal.processors.base_processor",
    "sglang.srt.models.qwen2_vl",
    "sglang.srt.models.qwen2_5_vl",
    "sglang.srt.models.qwen3_vl",
    "sglang.srt.models.qwen3_vl_moe",
    "sglang.srt.multimodal.processors.qwen_vl",
    "sglang.srt.utils.common",
)

H2D = "sglang-batched-feature-h2d"
GRID = "sglang-vectorized-mm-grid-counts"
VISION = "sglang-vision-host-max-seqlen"
MOONVIT = "sglang-moonvit-max-seqlen-once"
PROC = "sglang-kimi-k25-fused-cpu-processor"

EXPECTED = {
    "0.5.12.post1": {H2D: "applied", GRID: "applied", VISION: "applied", MOONVIT: "applied",
                     PROC: "applied"},
    "0.5.15.post1": {H2D: "applied", GRID: "upstream", VISION: "applied", MOONVIT: "applied",
                     PROC: "applied"},
    "0.5.17": {H2D: "applied", GRID: "upstream", VISION: "upstream", MOONVIT: "upstream",
               PROC: "applied"},
    "0.5.23": {H2D: "upstream", GRID: "upstream", VISION: "upstream", MOONVIT: "upstream",
               PROC: "applied"},
}

# deferred CUDA-IPC reconstruction under encoder DP: upstream from 0.5.16
IPC = (
    "sglang-ipc-consumer-count",
    "sglang-ipc-deferred-reconstruction",
    "sglang-encoder-dp-local-loader",
    "sglang-kimi-k25-encoder-dp-owner-only",
    "sglang-ipc-cache-hit-release",
    "sglang-kimi-k25-defer-ipc-marker",
)
for _version, _status in (("0.5.12.post1", "applied"), ("0.5.15.post1", "applied"),
                          ("0.5.17", "upstream"), ("0.5.23", "upstream")):
    EXPECTED[_version].update(dict.fromkeys(IPC, _status))

# the same for Qwen-VL: 0.5.17 has the deferral machinery but no Qwen wiring (not covered);
# 0.5.23 wires Qwen3-VL (and its processor marks), not Qwen2.5-VL
QWEN25, QWEN3 = "sglang-qwen2-5-vl-encoder-dp-owner-only", "sglang-qwen3-vl-encoder-dp-owner-only"
QWEN_MARK = "sglang-qwen-vl-defer-ipc-marker"
QWEN_IPC = (QWEN25, QWEN3, QWEN_MARK)
for _version, _statuses in (
    ("0.5.12.post1", ("applied", "applied", "applied")),
    ("0.5.15.post1", ("applied", "applied", "applied")),
    ("0.5.17", ("unsupported-version",) * 3),
    ("0.5.23", ("unsupported-version", "upstream", "upstream")),
):
    EXPECTED[_version].update(zip(QWEN_IPC, _statuses, strict=True))

# Kimi K2.5 deferred preprocessing: no upstream equivalent for K2.5
DEFER = ("sglang-kimi-k25-deferred-owner", "sglang-kimi-k25-deferred-sender")
for _version, _status in (("0.5.12.post1", "applied"), ("0.5.15.post1", "applied"),
                          ("0.5.17", "applied"), ("0.5.23", "unsupported-version")):
    EXPECTED[_version].update(dict.fromkeys(DEFER, _status))

# Kimi K3 deferred preprocessing: 0.5.17 only; upstream from 0.5.18. Releases before
# 0.5.17 have no K3 module: the registry sees the trigger is absent ("not-needed").
# The engine fixture imports the K3 modules where they exist, so statuses do not depend on
# test order.
K3_MODULES = ("sglang.srt.models.kimi_k3", "sglang.srt.multimodal.processors.kimi_k3")
K3_DEFER = ("sglang-kimi-k3-deferred-owner", "sglang-kimi-k3-deferred-sender")
for _version, _status in (("0.5.12.post1", "not-needed"), ("0.5.15.post1", "not-needed"),
                          ("0.5.17", "applied"), ("0.5.23", "upstream")):
    EXPECTED[_version].update(dict.fromkeys(K3_DEFER, _status))

# Kimi K2.5 GPU preprocessing: one interpolate per (source shape, dtype, target); 0.5.16+ upstream
RESIZE = "sglang-kimi-k25-batched-same-shape-resize"
for _version, _status in (("0.5.12.post1", "applied"), ("0.5.15.post1", "applied"),
                          ("0.5.17", "upstream"), ("0.5.23", "upstream")):
    EXPECTED[_version][RESIZE] = _status

# MoonViT with the SDPA vision backend: mask from host cu_seqlens (0.5.17/0.5.23 still sync)
SDPA = "sglang-moonvit-sdpa-host-cu-seqlens"
for _version, _status in (("0.5.12.post1", "applied"), ("0.5.15.post1", "applied"),
                          ("0.5.17", "unsupported-version"), ("0.5.23", "unsupported-version")):
    EXPECTED[_version][SDPA] = _status


# exact fast decoding on the CPU path: 0.5.19+, with the codec libraries of vlm-fastpath[decode]
from vlm_fastpath.imaging.decode import unavailable_reason  # noqa: E402

for _version in EXPECTED:
    EXPECTED[_version]["sglang-fast-image-decode"] = "unsupported-version" if (
        _version != "0.5.23") else ("stood-aside" if unavailable_reason() else "applied")

# our Qwen-VL image and video processors on the CPU preprocessing path: every pinned release
for _version in EXPECTED:
    EXPECTED[_version]["sglang-qwen-vl-cpu-image-processor"] = "applied"
    EXPECTED[_version]["sglang-qwen-vl-cpu-video-processor"] = "applied"
    # compact Qwen-VL image items (the tokenizer side and the three models' expansion)
    for _name in ("sglang-qwen-compact-image-rows", "sglang-qwen2-vl-compact-rows",
                  "sglang-qwen2-5-vl-compact-rows", "sglang-qwen3-vl-compact-rows"):
        EXPECTED[_version][_name] = "applied"


def _present(names):
    import importlib.util

    return tuple(name for name in names if importlib.util.find_spec(name) is not None)


def _snapshot():
    """Every attribute any SGLang patch may replace, as it is now (by identity)."""
    snap = {}
    for name in SGLANG_MODULES + _present(K3_MODULES):
        mod = importlib.import_module(name)
        for key, value in vars(mod).items():
            if inspect.isfunction(value) or inspect.isclass(value):
                snap[(name, key)] = value
                if inspect.isclass(value) and value.__module__ == name:
                    for attr, member in vars(value).items():
                        if inspect.isfunction(member):
                            snap[(name, f"{key}.{attr}")] = member
    return snap


@pytest.fixture(scope="session")
def engine():
    for name in SGLANG_MODULES + _present(K3_MODULES):
        importlib.import_module(name)
    REGISTRY.revert(engine="sglang")
    originals = _snapshot()
    version = sglang.__version__
    yield {"version": version, "originals": originals, "snapshot": _snapshot}
    REGISTRY.revert(engine="sglang")


@pytest.fixture
def unpatched(engine):
    REGISTRY.revert(engine="sglang")
    yield engine
    REGISTRY.revert(engine="sglang")


@pytest.fixture
def patched(engine):
    REGISTRY.revert(engine="sglang")
    REGISTRY.apply(engine="sglang")
    yield engine
    REGISTRY.revert(engine="sglang")


@pytest.fixture(scope="session")
def kimi_model(engine):
    from fixtures import sglang_cpu as _testing

    REGISTRY.revert(engine="sglang")
    try:
        return _testing.build_kimi_k25()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MoonViT cannot be built outside a server on {engine['version']}: {exc}")
