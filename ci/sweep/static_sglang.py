"""Read an SGLang release's own source and derive what each vlm-fastpath SGLang patch should do.

Stdlib only, never imports SGLang: each input is a wheel (``sglang-<ver>-*.whl``) or a
site-packages directory holding ``sglang/``. For every input it prints the facts it read (the
code each patch's upstream detector looks for, found by parsing the release's modules) and,
with ``--csv``, the expected status of every SGLang patch, in the format of
``ci/sweep/expected/sglang.csv`` (``release,patch,status,reason``).

The statuses follow the registry's order of decisions (vlm_fastpath/patches/core/registry.py):
trigger module absent -> not-needed; the release already does it -> upstream; release outside
the patch's ``versions`` -> unsupported-version; a required patch not applied -> not-needed;
nothing to patch -> not-needed; else applied. Each patch's ``name``/``versions`` are read
from its source under vlm_fastpath/patches/sglang (``--patches``), never imported; the
upstream / not-needed rules below are this scanner's own reading of the release source.

    python3.11 ci/sweep/static_sglang.py /tmp/sgl/sglang-0.5.17-*.whl [more...]
    python3.11 ci/sweep/static_sglang.py --csv /tmp/sgl/sglang-*.whl > ci/sweep/expected/sglang.csv
    python3.11 ci/sweep/static_sglang.py \
        "$(python3.11 ci/envs.py path sglang-0.5.17)/lib/python3.11/site-packages"
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from release_source import ReleaseSource, in_range, read_patch_specs, run_cli  # ci/sweep/

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "vlm_fastpath/patches/sglang"

# Models that concatenate every item's feature before their tower (the H2D patch's list,
# vlm_fastpath/patches/sglang/_common.py BATCHED_FEATURE_MODELS). Upstream's skip list never
# names Qwen2.5-VL; it names every other one from 0.5.18 (Kimi K3 added), reported as a fact.
BATCHED = ("KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration",
           "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
           "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
           "Qwen3_5MoeForConditionalGeneration")
UPSTREAM_SKIP = tuple(m for m in BATCHED if m != "Qwen2_5_VLForConditionalGeneration")


# -- reading a release -----------------------------------------------------------------------
class Release(ReleaseSource):
    """The ``sglang`` package of one wheel or site-packages dir, read as text."""

    package = "sglang"

    def defines(self, module: str, name: str) -> bool:
        tree = self.tree(module)
        for node in tree.body if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return True
        return False


def params(fn: ast.FunctionDef | None) -> list[str]:
    if fn is None:
        return []
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def strings_in(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def keywords_in(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {k.arg for n in ast.walk(node) if isinstance(n, ast.Call) for k in n.keywords
            if k.arg}


def attr_calls(node: ast.AST | None, attr: str) -> int:
    """How many ``<x>.<attr>(...)`` calls ``node`` makes."""
    if node is None:
        return 0
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and n.func.attr == attr)


MM_UTILS = "sglang.srt.managers.mm_utils"
MM_SCHED = "sglang.srt.managers.mm_schedule"
SB = "sglang.srt.managers.schedule_batch"
VISION = "sglang.srt.layers.attention.vision"
KIMI = "sglang.srt.models.kimi_k25"
KIMI_PROC = "sglang.srt.multimodal.processors.kimi_k25"
MMM = "sglang.srt.multimodal.mm_utils"
QWEN25 = "sglang.srt.models.qwen2_5_vl"
QWEN3 = "sglang.srt.models.qwen3_vl"
QWEN_PROC = "sglang.srt.multimodal.processors.qwen_vl"
BASE_PROC = "sglang.srt.multimodal.processors.base_processor"
COMMON = "sglang.srt.utils.common"
K3 = "sglang.srt.models.kimi_k3"
K3_PROC = "sglang.srt.multimodal.processors.kimi_k3"
K3_UP = "sglang.srt.multimodal.kimi_k3_image_processing"
COMPACT_MODELS = (("qwen2", "sglang.srt.models.qwen2_vl", "Qwen2VLForConditionalGeneration"),
                  ("qwen2_5", QWEN25, "Qwen2_5_VLForConditionalGeneration"),
                  ("qwen3", QWEN3, "Qwen3VLForConditionalGeneration"))


def facts(r: Release) -> dict[str, object]:
    f: dict[str, object] = {"version": r.version()}
    sched = MM_SCHED if r.func(MM_SCHED, "_move_items_to_device") else MM_UTILS
    f["embedding_sched_module"] = sched.rsplit(".", 1)[1]
    move = r.func(sched, "_move_items_to_device")
    f["move_params"] = params(move)
    f["move_per_item_to"] = attr_calls(move, "to") > 0
    skip = r.func(sched, "_can_skip_pre_embed_feature_move")
    f["skip_models"] = sorted(strings_in(skip) & set(BATCHED)) if skip else None
    f["call_sites"] = [n for n in ("_get_chunked_embedding_full",
                                   "_get_chunked_embedding_by_item",
                                   "_batch_encode_per_image_misses") if r.func(sched, n)]
    expand = r.func(MM_UTILS, "get_new_expanded_mm_items")
    f["expand_item_calls"] = attr_calls(expand, "item") if expand else None
    f["vision_resolve_precomputed_max_seqlen"] = r.defines(VISION, "resolve_precomputed_max_seqlen")
    layer_fwd = r.func(KIMI, "forward", cls="MoonViTEncoderLayer")
    f["moonvit_layer_passes_max_seqlen"] = "max_seqlen" in keywords_in(layer_fwd)
    enc_fwd = r.func(KIMI, "forward", cls="MoonViT3dEncoder")
    f["moonvit_encoder_max_seqlen_item"] = "max_seqlen" in r.source(KIMI, enc_fwd) and (
        attr_calls(enc_fwd, "item") > 0)
    mask = r.func(VISION, "generate_patch_attention_mask", cls="VisionSdpaAttention")
    f["sdpa_mask_reads_back_cpu"] = attr_calls(mask, "cpu") > 0
    item_cls = r.klass(SB, "MultimodalDataItem")
    f["item_msgspec_struct"] = bool(item_cls) and any(
        "Struct" in ast.unparse(b) for b in item_cls.bases)
    f["item_reconstruct_params"] = params(r.func(SB, "reconstruct", cls="MultimodalDataItem"))
    f["item_can_defer_ipc"] = r.func(
        SB, "can_defer_cuda_ipc_feature_reconstruction", cls="MultimodalDataItem") is not None
    dp = r.func(MMM, "run_dp_sharded_mrope_vision_model")
    f["dp_run_load_local_pixel_values"] = "load_local_pixel_values" in params(dp)
    kimi_text = r.text(KIMI) or ""
    f["kimi_encoder_dp"] = "run_dp_sharded_mrope_vision_model" in kimi_text
    for label, mod, cls in (("qwen2_5", QWEN25, "Qwen2_5_VLForConditionalGeneration"),
                            ("qwen3", QWEN3, "Qwen3VLForConditionalGeneration")):
        f[f"{label}_encoder_dp"] = "run_dp_sharded_mrope_vision_model" in (r.text(mod) or "")
        f[f"{label}_local_loader"] = "load_local_pixel_values" in r.source(mod, r.klass(mod, cls))
    f["qwen_processor_marks_ipc"] = "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY" in (
        r.text(QWEN_PROC) or "")
    f["qwen_vl_image_processor"] = r.klass(QWEN_PROC, "QwenVLImageProcessor") is not None
    base_init = r.func(BASE_PROC, "__init__", cls="BaseMultimodalProcessor")
    f["base_init_keeps_processor"] = bool(base_init) and params(base_init)[:4] == [
        "self", "hf_config", "server_args", "_processor"] and (
        "self._processor = _processor" in r.source(BASE_PROC, base_init))
    f["processor_pool"] = r.exists("sglang.srt.multimodal.processors.executor")
    for label, mod, cls in COMPACT_MODELS:
        f[f"{label}_image_feature_items"] = params(
            r.func(mod, "get_image_feature", cls=cls))[:2] == ["self", "items"]
    f["base_process_mm_data"] = params(
        r.func(BASE_PROC, "process_mm_data", cls="BaseMultimodalProcessor"))[:2] == [
        "self", "input_text"]
    f["qwen_image_artifacts"] = r.func(
        QWEN_PROC, "prepare_artifact_batch", cls="QwenVLImageProcessor") is not None
    load = r.source(COMMON, r.func(COMMON, "_load_image"))
    f["cpu_load_opens_then_fully_loads"] = bool(r.func(COMMON, "_fully_load_pil_image")) and (
        0 <= load.find("Image.open(BytesIO(") < load.find("_fully_load_pil_image(image)"))
    wrapper = r.klass(KIMI_PROC, "KimiGPUProcessorWrapper")
    f["kimi_wrapper"] = wrapper is not None
    f["kimi_wrapper_cpu_call"] = r.func(KIMI_PROC, "_cpu_call", cls="KimiGPUProcessorWrapper") \
        is not None
    f["kimi_force_cpu_env"] = r.defines(KIMI_PROC, "_FORCE_CPU_IMAGE_PREPROCESSING")
    f["kimi_gpu_preprocess"] = r.defines(KIMI_PROC, "_gpu_preprocess_images")
    f["kimi_resize_by_source_shape"] = r.defines(KIMI_PROC, "_resize_images_by_source_shape")
    f["kimi_k25_processor_marks_ipc"] = "DEFER_CUDA_IPC_FEATURE_RECONSTRUCTION_KEY" in (
        r.text(KIMI_PROC) or "")
    f["kimi_k25_upstream_deferred_preprocessing"] = "DEFERRED_PREPROCESSING_KEY" in (
        (r.text(KIMI_PROC) or "") + kimi_text)
    f["k3_model"] = r.exists(K3)
    f["k3_processor"] = r.exists(K3_PROC)
    f["k3_wrapper"] = r.klass(K3_PROC, "KimiK3GPUProcessorWrapper") is not None
    f["k3_upstream_deferred_preprocessing"] = r.defines(K3_UP, "DEFERRED_PREPROCESSING_KEY")
    env = r.text("sglang.srt.environ") or ""
    m = re.search(r"SGLANG_USE_PICKLE_IPC\s*=\s*EnvBool\((\w+)\)", env)
    f["pickle_ipc_default"] = m.group(1) if m else None
    return f


# -- the patches -----------------------------------------------------------------------------
def patch_specs(folder: Path) -> dict[str, str]:
    """``name -> versions`` of every SGLang Patch class, read from the patch sources."""
    specs = read_patch_specs(folder, "sglang")
    return {name: str(spec["versions"]) for name, spec in specs.items()}


@dataclass
class Rule:
    """What the release must hold for one patch: ``(reason, None)`` = no, ``(.., reason)`` = yes."""

    trigger: str
    upstream: object = None  # f -> reason | None
    not_needed: object = None  # f -> reason | None
    requires: tuple[str, ...] = field(default=())
    in_range_reason: object = None  # f -> reason why it applies
    outside_note: object = None  # f -> what the release has, for unsupported-version rows


def _h2d_upstream(f):
    if "data_embedding_func" in f["move_params"]:
        return "_move_items_to_device(items, device, data_embedding_func) skips per model"
    return None


def _h2d_outside(f):
    skip = set(f["skip_models"] or ())
    named = "names K2.5/K3/Qwen3/3.5" if skip >= set(UPSTREAM_SKIP) else f"names {len(skip)}"
    return (f"call sites moved to {f['embedding_sched_module']}; skip list {named}, "
            "not Qwen2.5-VL")


def _h2d_applies(f):
    missing = [m.replace("ForConditionalGeneration", "") for m in BATCHED
               if m not in (f["skip_models"] or ())]
    return f"per-item .to(device) in _move_items_to_device; skip list lacks {'/'.join(missing)}"


RULES: dict[str, Rule] = {
    "sglang-batched-feature-h2d": Rule(MM_UTILS, _h2d_upstream, None, (), _h2d_applies,
                                       _h2d_outside),
    "sglang-vectorized-mm-grid-counts": Rule(
        MM_UTILS,
        lambda f: None if f["expand_item_calls"] else
        "get_new_expanded_mm_items has no per-row .item() (dim=-1 products)",
        None, (), lambda f: f"get_new_expanded_mm_items: {f['expand_item_calls']} .item() calls"),
    "sglang-vision-host-max-seqlen": Rule(
        VISION,
        lambda f: "vision.py defines resolve_precomputed_max_seqlen"
        if f["vision_resolve_precomputed_max_seqlen"] else None,
        None, (), lambda f: "backends recompute seq_lens.max().item() per call"),
    "sglang-moonvit-max-seqlen-once": Rule(
        KIMI,
        lambda f: "MoonViTEncoderLayer.forward passes max_seqlen= (computed once)"
        if f["moonvit_layer_passes_max_seqlen"] else None,
        None, (), lambda f: "MoonViTEncoderLayer drops max_seqlen: .item() per block"),
    "sglang-moonvit-sdpa-host-cu-seqlens": Rule(
        KIMI,
        lambda f: None if f["sdpa_mask_reads_back_cpu"] else
        "SDPA mask built without cu_seqlens.cpu()",
        None, ("sglang-moonvit-max-seqlen-once",),
        lambda f: "SDPA generate_patch_attention_mask reads cu_seqlens.cpu() per block",
        lambda f: "SDPA mask still reads cu_seqlens.cpu() per block (known gap)"),
    "sglang-kimi-k25-fused-cpu-processor": Rule(
        KIMI_PROC, None,
        lambda f: None if f["kimi_wrapper_cpu_call"] else "no KimiGPUProcessorWrapper._cpu_call",
        (), lambda f: "KimiGPUProcessorWrapper._cpu_call uses the checkpoint's numpy processor"
        + ("; SGLANG_FORCE_CPU_IMAGE_PREPROCESSING" if f["kimi_force_cpu_env"] else ""),
        lambda f: "_cpu_call still present (CPU fallback)" if f["kimi_wrapper_cpu_call"] else ""),
}
_IPC = "MultimodalDataItem.can_defer_cuda_ipc_feature_reconstruction (#31227)"


def _ipc(extra=None):
    return lambda f: _IPC if f["item_can_defer_ipc"] else (extra(f) if extra else None)


def _ipc_applies(f):
    args = ", ".join(f["item_reconstruct_params"][1:])
    return f"no can_defer_cuda_ipc_feature_reconstruction; reconstruct({args})"


for _name in ("sglang-ipc-consumer-count", "sglang-ipc-deferred-reconstruction",
              "sglang-ipc-cache-hit-release", "sglang-kimi-k25-defer-ipc-marker"):
    RULES[_name] = Rule({"sglang-ipc-cache-hit-release": MM_UTILS,
                         "sglang-kimi-k25-defer-ipc-marker":
                             "sglang.srt.multimodal.processors.base_processor"}.get(_name, SB),
                        _ipc(), None, (), _ipc_applies)
RULES["sglang-kimi-k25-encoder-dp-owner-only"] = Rule(
    KIMI, _ipc(), lambda f: None if f["kimi_encoder_dp"] else "Kimi K2.5 has no encoder DP",
    (), _ipc_applies)
RULES["sglang-encoder-dp-local-loader"] = Rule(
    MMM, lambda f: "run_dp_sharded_mrope_vision_model takes load_local_pixel_values"
    if f["dp_run_load_local_pixel_values"] else None, None, (),
    lambda f: "run_dp_sharded_mrope_vision_model has no load_local_pixel_values")
for _label, _mod, _name in (("qwen2_5", QWEN25, "sglang-qwen2-5-vl-encoder-dp-owner-only"),
                            ("qwen3", QWEN3, "sglang-qwen3-vl-encoder-dp-owner-only")):
    RULES[_name] = Rule(
        _mod,
        (lambda lab: lambda f: "model passes load_local_pixel_values to the DP sharding"
         if f[f"{lab}_local_loader"] else None)(_label),
        (lambda lab: lambda f: None if f[f"{lab}_encoder_dp"] else "no encoder DP")(_label),
        (), lambda f: "every TP rank reconstructs every IPC feature (no local loader)",
        (lambda lab: lambda f: "model has no load_local_pixel_values")(_label))
RULES["sglang-qwen-vl-defer-ipc-marker"] = Rule(
    "sglang.srt.multimodal.processors.base_processor",
    lambda f: "can_defer exists and the Qwen-VL processor sets the deferral marker"
    if f["item_can_defer_ipc"] and f["qwen_processor_marks_ipc"] else None, None, (),
    lambda f: "no deferral marker on Qwen-VL items",
    lambda f: "Qwen-VL processor sets no deferral marker")
RULES["sglang-kimi-k25-batched-same-shape-resize"] = Rule(
    KIMI_PROC,
    lambda f: "Kimi processor defines _resize_images_by_source_shape"
    if f["kimi_resize_by_source_shape"] else None,
    lambda f: None if f["kimi_gpu_preprocess"] else "no Kimi GPU preprocessing", (),
    lambda f: "_gpu_preprocess_images resizes one image per interpolate")
for _name, _trig in (("sglang-kimi-k25-deferred-owner", KIMI),
                     ("sglang-kimi-k25-deferred-sender", KIMI_PROC)):
    RULES[_name] = Rule(
        _trig,
        lambda f: "the release defers Kimi K2.5 preprocessing itself"
        if f["kimi_k25_upstream_deferred_preprocessing"] else None,
        (lambda f: None if f["kimi_wrapper"] else "no KimiGPUProcessorWrapper")
        if _trig == KIMI_PROC else None, (),
        lambda f: "Kimi K2.5 float32 pixel_values built in the tokenizer (no upstream deferral)"
        + ("; items are msgspec Structs, payload needs pickle IPC (default "
           f"{f['pickle_ipc_default']})" if f["item_msgspec_struct"] else ""),
        lambda f: "no upstream K2.5 deferral either")
for _name, _trig in (("sglang-kimi-k3-deferred-owner", K3),
                     ("sglang-kimi-k3-deferred-sender", K3_PROC)):
    RULES[_name] = Rule(
        _trig,
        lambda f: "kimi_k3_image_processing.DEFERRED_PREPROCESSING_KEY (#33921)"
        if f["k3_upstream_deferred_preprocessing"] else None,
        (lambda f: None if f["k3_wrapper"] else "no KimiK3GPUProcessorWrapper")
        if _trig == K3_PROC else None, (),
        lambda f: "K3 preprocessed eagerly in the tokenizer (no DEFERRED_PREPROCESSING_KEY)")
RULES["sglang-fast-image-decode"] = Rule(
    COMMON, None,
    lambda f: None if f["cpu_load_opens_then_fully_loads"] else (
        "_load_image does not open with Pillow then call _fully_load_pil_image"), (),
    lambda f: "_load_image opens with Pillow, then _fully_load_pil_image(image) decodes",
    lambda f: "no _fully_load_pil_image" if not f["cpu_load_opens_then_fully_loads"] else "")
def _every_model(kind: str):
    def reason(f: dict) -> str:
        pool = "; its processor worker pool clones the twin" if f["processor_pool"] else ""
        return (f"BaseMultimodalProcessor.__init__ keeps the HF processor: every model's {kind} "
                f"processor of a class we mirror is the twin{pool}")
    return reason


RULES["sglang-qwen-vl-cpu-image-processor"] = Rule(
    BASE_PROC, None,
    lambda f: None if f["base_init_keeps_processor"] else (
        "BaseMultimodalProcessor.__init__ does not keep the processor as _processor"), (),
    _every_model("image"))

RULES["sglang-qwen-vl-cpu-video-processor"] = Rule(
    BASE_PROC, None,
    lambda f: None if f["base_init_keeps_processor"] else (
        "BaseMultimodalProcessor.__init__ does not keep the processor as _processor"),
    ("sglang-qwen-vl-cpu-image-processor",),
    _every_model("video"))

for _label, _mod, _cls in COMPACT_MODELS:
    RULES[f"sglang-{_label.replace('_', '-')}-vl-compact-rows"] = Rule(
        _mod, None,
        (lambda lab, cls: lambda f: None if f[f"{lab}_image_feature_items"] else (
            f"{cls}.get_image_feature(self, items) not found"))(_label, _cls), (),
        (lambda cls: lambda f: f"{cls}.get_image_feature(self, items): compact image items "
         "are expanded before it")(_cls))

RULES["sglang-qwen-compact-image-rows"] = Rule(
    QWEN_PROC, None,
    lambda f: None if f["base_process_mm_data"] else (
        "BaseMultimodalProcessor.process_mm_data(self, input_text, ...) not found"),
    ("sglang-qwen-vl-cpu-image-processor",),
    lambda f: "process_mm_data" + (" and the image-artifact prepare_artifact_batch"
                                   if f["qwen_image_artifacts"] else "")
    + " emit compact rows where the served model expands them")


def statuses(r: Release, f: dict, specs: dict[str, str]) -> list[tuple[str, str, str]]:
    version = str(f["version"])
    decided: dict[str, str] = {}
    rows = []
    for name in sorted(specs, key=lambda n: (bool(RULES.get(n) and RULES[n].requires), n)):
        rule = RULES.get(name)
        if rule is None:
            rows.append((name, "?", "no rule in static_sglang.py for this patch"))
            continue
        if not r.exists(rule.trigger):
            status, reason = "not-needed", f"no module {rule.trigger}"
        elif rule.upstream and (why := rule.upstream(f)):
            status, reason = "upstream", why
        elif not in_range(version, specs[name]):
            note = rule.outside_note(f) if rule.outside_note else ""
            status = "unsupported-version"
            reason = f"outside {specs[name]}" + (f"; {note}" if note else "")
        elif unmet := [d for d in rule.requires if decided.get(d) != "applied"]:
            status, reason = "not-needed", f"requires {', '.join(unmet)}"
        elif rule.not_needed and (why := rule.not_needed(f)):
            status, reason = "not-needed", why
        else:
            status, reason = "applied", rule.in_range_reason(f) if rule.in_range_reason else ""
        decided[name] = status
        rows.append((name, status, reason))
    return sorted(rows)


def main(argv: list[str] | None = None) -> int:
    return run_cli("sglang", __doc__.split("\n")[0], Release, facts, statuses, patch_specs,
                   PATCHES, argv)


if __name__ == "__main__":
    sys.exit(main())
