"""Read a vLLM release's own source and derive what each vlm-fastpath vLLM patch should do.

Stdlib only, never imports vLLM: each input is a wheel (``vllm-<ver>-*.whl``) or a
site-packages directory holding ``vllm/``. For every input it prints the facts it read from the
modules the patches touch (parsed with ``ast``) and, with ``--csv``, the expected status of
every vLLM patch in the format of ``ci/sweep/expected/vllm.csv`` (``release,patch,status,reason``).

The statuses follow the registry's order of decisions (vlm_fastpath/patches/core/registry.py):
trigger module absent -> not-needed; the release already does it -> upstream; release outside
the patch's ``versions`` -> unsupported-version; none of ``requires_any`` applied -> not-needed;
nothing to patch -> not-needed; the code the patch wraps is not there -> failed; else applied.
Each patch's ``name``/``versions``/``requires_any`` are read from its source under
vlm_fastpath/patches/vllm (``--patches``), never imported; the upstream / not-needed / applies
rules below are this scanner's own reading of the release source. ``warn:`` lines name code
in a release that a patch whose range covers it would not fit (a range to keep narrow).

    python3.11 ci/sweep/static_vllm.py /tmp/vllm-wheels/vllm-0.24.0-*.whl [more...]
    python3.11 ci/sweep/static_vllm.py --csv \
        $(python3.11 ci/envs.py path vllm-0.24.0)/lib/python3.11/site-packages
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from release_source import ReleaseSource, in_range, read_patch_specs, run_cli  # ci/sweep/

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "vlm_fastpath/patches/vllm"

PROCESSOR = "vllm.transformers_utils.processor"
KIMI = "vllm.model_executor.models.kimi_k25"
KIMI_VIT = "vllm.model_executor.models.kimi_k25_vit"
KIMI_FUSED = "vllm.transformers_utils.processors.kimi_k25_vision_fused"
MEDIA_IMAGE = "vllm.multimodal.media.image"
HASHER = "vllm.multimodal.hasher"
# The Qwen-VL image and video patches wrap two methods of vLLM's processing context (where
# every model's HF processor is resolved, and the door every HF call goes through).
CONTEXT = "vllm.multimodal.processing.context"
CONTEXT_CLASS = "InputProcessingContext"
QWEN_IMAGE = "vllm-qwen-vl-image-processor"
QWEN_VIDEO = "vllm-qwen-vl-video-processor"
# Where the resolution of unified vision chunks lives, newest first (0.33+, 0.32, 0.16-0.31):
# the vision-chunk hash patch's trigger is the first of these the release has.
VISION_CHUNK_HOMES = ("vllm.renderers.chat_utils.item_tracker", "vllm.renderers.chat_utils",
                      "vllm.entrypoints.chat_utils")
RESOLVE = "_resolve_vision_chunk_items"
FUSED_CLS = "KimiK25FusedVisionProcessor"
# What FastpathKimiVisionProcessor (vlm_fastpath/patches/adapters/kimi_vision.py)
# answers; vLLM calling anything else on its image processor does not fit our adapter.
ADAPTER_API = {"preprocess", "media_tokens_calculator", "num_frames_per_chunk",
               "get_resize_config", "resize_image", "media_proc_cfg", "to_dict",
               "to_json_string", "from_dict", "from_pretrained"}


# -- reading a release -----------------------------------------------------------------------
class Release(ReleaseSource):
    """The ``vllm`` package of one wheel or site-packages dir, read as text."""

    package = "vllm"

    def modules_importing(self, package: str, name: str) -> list[str]:
        """Modules under ``vllm/`` that ``from <package> import <name>`` (a copy of the object)."""
        if self._zip is not None:
            files = [n for n in self._zip.namelist() if n.startswith("vllm/")
                     and n.endswith(".py")]
        else:
            files = [str(p.relative_to(self.path)) for p in (self.path / "vllm").rglob("*.py")]
        found = []
        pattern = re.compile(rf"from {re.escape(package)} import\s*(?:\([^)]*\)|[^\n]*)")
        for rel in files:
            module = rel[:-3].replace("/", ".").removesuffix(".__init__")
            text = self.text(module) or ""
            if any(re.search(rf"\b{name}\b", m.group(0)) for m in pattern.finditer(text)):
                found.append(module)
        return sorted(found)

    def binds(self, module: str, name: str) -> bool:
        """``name`` is a module global: defined, assigned or imported at top level."""
        tree = self.tree(module)
        for node in tree.body if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return True
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                    (a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
        return False


def params(fn: ast.FunctionDef | None) -> list[str]:
    if fn is None:
        return []
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def names_loaded(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def calls_named(node: ast.AST | None, name: str) -> list[ast.Call]:
    if node is None:
        return []
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == name]


def class_defines(klass: ast.ClassDef | None, name: str) -> bool:
    """``name`` is in the class body (a method or an assignment): in its ``__dict__``."""
    for node in klass.body if klass is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def class_const(klass: ast.ClassDef | None, name: str) -> object:
    for node in klass.body if klass is not None else ():
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(
                node.value, ast.Constant):
            return node.value.value
    return None


def except_types(fn: ast.FunctionDef | None) -> list[str]:
    """The exception types every ``except`` clause in ``fn`` names (dotted as written)."""
    out: list[str] = []
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            elts = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            out.extend(ast.unparse(e) for e in elts)
    return out


def self_attr_stores(fn: ast.FunctionDef | None) -> dict[str, str]:
    """``self.<attr> = <expr>`` assignments in ``fn``: attr -> unparsed expr."""
    out: dict[str, str] = {}
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and (
                        t.value.id == "self"):
                    out[t.attr] = ast.unparse(node.value)
    return out


def image_processor_uses(r: Release, modules: tuple[str, ...], holders: set[str]) -> set[str]:
    """Attributes read off ``<x>.<holder>`` (the image processor vLLM keeps) in ``modules``."""
    used: set[str] = set()
    for module in modules:
        for node in ast.walk(r.tree(module) or ast.Module(body=[], type_ignores=[])):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and (
                    node.value.attr in holders):
                used.add(node.attr)
    return used


# -- facts -----------------------------------------------------------------------------------
def facts(r: Release) -> dict[str, object]:
    f: dict[str, object] = {"version": r.version()}

    # transformers_utils/processor.py: get_image_processor and its lru_cache twin
    gip = r.func(PROCESSOR, "get_image_processor")
    f["get_image_processor_params"] = params(gip) if gip else None
    cached = None
    for node in (r.tree(PROCESSOR) or ast.Module(body=[], type_ignores=[])).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "cached_get_image_processor"
                for t in node.targets):
            cached = ast.unparse(node.value)
    f["cached_get_image_processor"] = cached

    # model_executor/models/kimi_k25.py
    info, model = "KimiK25ProcessingInfo", "KimiK25ForConditionalGeneration"
    info_cls, model_cls = r.klass(KIMI, info), r.klass(KIMI, model)
    init = r.func(KIMI, "__init__", cls=info)
    f["kimi_info_class"] = info_cls is not None
    f["kimi_model_class"] = model_cls is not None
    f["kimi_binds_fused_class"] = r.binds(KIMI, FUSED_CLS)
    f["kimi_binds_cached_get_image_processor"] = r.binds(KIMI, "cached_get_image_processor")
    loads = calls_named(init, "cached_get_image_processor")
    f["kimi_info_init_loader_kwargs"] = sorted(
        k.arg for c in loads for k in c.keywords if k.arg) if loads else None
    f["kimi_info_init_reads_fused_class"] = FUSED_CLS in names_loaded(init)
    stores = self_attr_stores(init)
    f["kimi_info_keeps_processor_as"] = sorted(
        a for a in ("image_processor", "media_processor") if a in stores)
    hf = stores.get("hf_processor", "")
    m = re.match(r"(\w+)\(", hf)
    f["kimi_hf_processor"] = m.group(1) if m else None
    f["kimi_hf_processor_holds_it_as"] = sorted(
        a for a in ("image_processor", "media_processor") if f"{a}=" in hf)
    holders = set(f["kimi_info_keeps_processor_as"]) | set(f["kimi_hf_processor_holds_it_as"])
    uses = image_processor_uses(r, (KIMI, "vllm.transformers_utils.processors.kimi_k25"),
                                holders)
    f["kimi_image_processor_api_used"] = sorted(uses)
    f["kimi_image_processor_api_not_in_adapter"] = sorted(uses - ADAPTER_API)
    f["kimi_info_defines_get_hf_processor"] = class_defines(info_cls, "get_hf_processor")
    f["kimi_model_defines"] = sorted(n for n in ("__init__", "_parse_and_validate_media_input")
                                     if class_defines(model_cls, n))
    f["kimi_model_supports_mm_device_do_normalize"] = class_const(
        model_cls, "supports_mm_device_do_normalize")
    f["kimi_fused_module_defines_class"] = r.klass(KIMI_FUSED, FUSED_CLS) is not None
    # every copy the fused-processor patch rebinds (rebind_globals over vllm.*)
    f["kimi_fused_class_copies"] = r.modules_importing(KIMI_FUSED, FUSED_CLS)
    f["get_image_processor_copies"] = sorted(
        set(r.modules_importing(PROCESSOR, "get_image_processor"))
        | set(r.modules_importing(PROCESSOR, "cached_get_image_processor")))

    # model_executor/models/kimi_k25_vit.py
    vit_classes = ("MoonViT3dPretrainedModel", "MoonViT3dEncoder", "MoonViTEncoderLayer")
    f["moonvit_classes"] = [c for c in vit_classes if r.klass(KIMI_VIT, c) is not None]
    f["moonvit_encoder_prepare_encoder_metadata"] = class_defines(
        r.klass(KIMI_VIT, "MoonViT3dEncoder"), "prepare_encoder_metadata")
    attn = r.func(KIMI_VIT, "attention_qkvpacked", cls="MoonViTEncoderLayer")
    f["moonvit_attention_params"] = params(attn) if attn else None
    f["moonvit_attention_recomputes_max_seqlen"] = bool(re.search(
        r"max_seqlen\s*=\s*\(\s*cu_seqlens\[1:\]\s*-\s*cu_seqlens\[:-1\]\s*\)\.max\(\)",
        r.source(KIMI_VIT, attn)))
    f["moonvit_layer_forward_params"] = params(
        r.func(KIMI_VIT, "forward", cls="MoonViTEncoderLayer")) or None
    f["moonvit_encoder_forward_params"] = params(
        r.func(KIMI_VIT, "forward", cls="MoonViT3dEncoder")) or None
    f["moonvit_helpers"] = [n for n in ("tpool_patch_merger", "apply_rope")
                            if r.binds(KIMI_VIT, n)]

    # multimodal/media/image.py: ImageMediaIO.load_bytes
    io_cls = r.klass(MEDIA_IMAGE, "ImageMediaIO")
    load = r.func(MEDIA_IMAGE, "load_bytes", cls="ImageMediaIO")
    f["image_io_defines_load_bytes"] = class_defines(io_cls, "load_bytes")
    f["load_bytes_catches"] = except_types(load) if load else None
    f["load_bytes_names_DecompressionBombError"] = "DecompressionBombError" in r.source(
        MEDIA_IMAGE, load)
    text = r.source(MEDIA_IMAGE, load)
    opened = max(text.find("open_image("), text.find("Image.open("))
    f["load_bytes_opens_normalizes_loads"] = r.binds(MEDIA_IMAGE, "normalize_image") and (
        0 <= opened < text.find("normalize_image(image)") < text.find("image.load()"))

    # multimodal/hasher.py: MultiModalHasher.hash_kwargs and _get_hasher_factory
    f["hasher_class"] = r.klass(HASHER, "MultiModalHasher") is not None
    factory = r.func(HASHER, "_get_hasher_factory")
    f["get_hasher_factory_params"] = params(factory) if factory else None
    text = r.source(HASHER, r.func(HASHER, "hash_kwargs", cls="MultiModalHasher"))
    f["hash_kwargs_makes_hasher_by_factory"] = all(
        piece in text for piece in ("_get_hasher_factory(", "hasher_factory()", ".update(",
                                    ".hexdigest()"))

    # chat utils: _resolve_vision_chunk_items (unwraps each image chunk's MediaWithBytes);
    # multimodal/hasher.py: MultiModalHasher.serialize_item (its MediaWithBytes image branch)
    home = next((m for m in VISION_CHUNK_HOMES if r.exists(m)), None)
    f["vision_chunk_home"] = home
    resolve = r.func(home, RESOLVE) if home else None
    f["vision_chunk_resolve_params"] = params(resolve) if resolve else None
    f["vision_chunk_resolve_unwraps_media"] = "data.media" in r.source(home or "", resolve)
    serialize = r.func(HASHER, "serialize_item", cls="MultiModalHasher")
    f["hasher_serialize_item_params"] = params(serialize) if serialize else None
    f["hasher_hashes_wrapped_images_by_bytes"] = bool(re.search(
        r"isinstance\(obj, MediaWithBytes\) and isinstance\(obj\.media, Image\.Image\)",
        r.source(HASHER, serialize))) and "obj.original_bytes" in r.source(HASHER, serialize)

    # multimodal/processing/context.py: InputProcessingContext.get_hf_processor and
    # .call_hf_processor
    klass = r.klass(CONTEXT, CONTEXT_CLASS)
    f["context_class"] = klass is not None
    for method in ("get_hf_processor", "call_hf_processor"):
        fn = r.func(CONTEXT, method, cls=CONTEXT_CLASS)
        f[f"context_{method}"] = params(fn) if fn else None
    return f


# -- patch releases, file by file (ci/sweep/vllm-patch-releases.md) ---------------------------
KIMI_HF_PROCESSOR = "vllm.transformers_utils.processors.kimi_k25"


def patched_files(r: Release) -> list[str]:
    """Modules whose source decides what the vLLM patches do on ``r``: their trigger modules,
    the Kimi HF processor (device-normalize hands out a view of it) and every module holding a
    ``from ... import`` copy of an object a patch rebinds."""
    names = {PROCESSOR, KIMI, KIMI_VIT, KIMI_FUSED, MEDIA_IMAGE, KIMI_HF_PROCESSOR, HASHER}
    names |= {CONTEXT}
    names |= {next((m for m in VISION_CHUNK_HOMES if r.exists(m)), HASHER)}
    names |= set(r.modules_importing(KIMI_FUSED, FUSED_CLS))
    for name in ("get_image_processor", "cached_get_image_processor"):
        names |= set(r.modules_importing(PROCESSOR, name))
    return sorted(names)


def compare_files(new: Release, tested: Release) -> tuple[list[str], list[str]]:
    """(the files compared, those that differ) between two releases, by content; a module
    present in one release only differs."""
    names = sorted(set(patched_files(new)) | set(patched_files(tested)))
    present = [n for n in names if new.exists(n) or tested.exists(n)]
    return present, [n for n in present if new.text(n) != tested.text(n)]


# -- the patches -----------------------------------------------------------------------------
def patch_specs(folder: Path) -> dict[str, dict[str, object]]:
    """``name -> {versions, requires_any, ...}`` of every vLLM Patch class, from its source."""
    return read_patch_specs(folder, "vllm")


Check = Callable[[dict], "str | None"]


@dataclass
class Rule:
    """One patch read against a release. Each callable takes the facts and returns a reason
    (the rule holds) or None."""

    trigger: str
    upstream: Check | None = None
    not_needed: Check | None = None
    failed: Check | None = None  # the code the patch wraps is missing: apply would raise
    applies: Check | None = None  # the reason it applies (evidence)
    misfit: Check | None = None  # in range but the release's code does not fit the patch
    note: Check | None = None  # what the release has, for unsupported-version rows


def _cls_overrides_upstream(f):
    p = f["get_image_processor_params"] or []
    return "processor.py: get_image_processor(processor_cls_overrides=)" if (
        "processor_cls_overrides" in p) else None


def _cls_overrides_failed(f):
    if f["get_image_processor_params"] is None:
        return "processor.py: no get_image_processor"
    if f["cached_get_image_processor"] != "lru_cache(get_image_processor)":
        return f"processor.py: cached_get_image_processor = {f['cached_get_image_processor']}"
    return None


def _kimi_processor_failed(f):
    if not f["kimi_binds_cached_get_image_processor"]:
        return "kimi_k25.py: no cached_get_image_processor global"
    if f["kimi_info_init_loader_kwargs"] is None:
        return "kimi_k25.py: KimiK25ProcessingInfo.__init__ never calls cached_get_image_processor"
    return None


def _kimi_processor_misfit(f):
    extra = f["kimi_image_processor_api_not_in_adapter"]
    if extra:
        return (f"kimi_k25.py calls {', '.join(extra)} on the image processor "
                f"({'/'.join(f['kimi_info_keeps_processor_as'])}); our adapter has none")
    return None


def _kimi_processor_note(f):
    if f["kimi_image_processor_api_not_in_adapter"]:
        held = "/".join(f["kimi_info_keeps_processor_as"])
        return (f"kimi_k25.py: info.{held}."
                f"{'/'.join(f['kimi_image_processor_api_not_in_adapter'])} (not in our adapter)")
    return "kimi_k25.py: no KimiK25FusedVisionProcessor"


def _kimi_fused_failed(f):
    if not f["kimi_binds_fused_class"]:
        return "kimi_k25.py: no KimiK25FusedVisionProcessor"
    if not f["kimi_info_init_reads_fused_class"]:
        return "kimi_k25.py: KimiK25ProcessingInfo.__init__ does not read the fused class"
    return None


def _kimi_not_needed(*classes: str):
    def check(f):
        missing = [c for c, k in (("KimiK25ProcessingInfo", "kimi_info_class"),
                                  ("KimiK25ForConditionalGeneration", "kimi_model_class"))
                   if c in classes and not f[k]]
        return f"kimi_k25.py: no {', '.join(missing)}" if missing else None
    return check


def _devnorm_failed(f):
    if not f["kimi_info_defines_get_hf_processor"]:
        return "kimi_k25.py: KimiK25ProcessingInfo defines no get_hf_processor"
    missing = {"__init__", "_parse_and_validate_media_input"} - set(f["kimi_model_defines"])
    if missing:
        return f"kimi_k25.py: KimiK25ForConditionalGeneration defines no {', '.join(missing)}"
    return None


def _devnorm_misfit(f):
    held = f["kimi_hf_processor_holds_it_as"]
    if held != ["image_processor"]:
        return (f"kimi_k25.py: {f['kimi_hf_processor']}.{'/'.join(held) or '?'} "
                "(no .image_processor for the uint8 view to swap: inert)")
    return None


def _moonvit_failed(f):
    missing = {"tpool_patch_merger", "apply_rope"} - set(f["moonvit_helpers"])
    if missing:
        return f"kimi_k25_vit.py: no {', '.join(sorted(missing))}"
    if f["moonvit_attention_params"] is None:
        return "kimi_k25_vit.py: MoonViTEncoderLayer has no attention_qkvpacked"
    return None


def _moonvit_misfit(f):
    if f["moonvit_layer_forward_params"] != ["self", "hidden_states", "cu_seqlens",
                                             "rope_freqs_cis"]:
        return f"kimi_k25_vit.py: MoonViTEncoderLayer.forward{f['moonvit_layer_forward_params']}"
    if f["moonvit_encoder_forward_params"] != ["self", "hidden_states", "grid_thws"]:
        return f"kimi_k25_vit.py: MoonViT3dEncoder.forward{f['moonvit_encoder_forward_params']}"
    if not f["moonvit_attention_recomputes_max_seqlen"]:
        return "kimi_k25_vit.py: attention_qkvpacked does not recompute max_seqlen"
    return None


def _load_bytes_applies(f):
    caught = [t.rsplit(".", 1)[-1] for t in f["load_bytes_catches"] or []]
    return ("media/image.py: ImageMediaIO.load_bytes catches "
            + ("/".join(caught) if caught else "nothing") + ", not DecompressionBombError")


def _load_bytes_misfit(f):
    if not f["load_bytes_catches"]:  # no ValueError for any bad image to match
        return "media/image.py: ImageMediaIO.load_bytes catches nothing"
    return None


def _context_misfit(f):
    get, call = f["context_get_hf_processor"], f["context_call_hf_processor"]
    if get[:2] != ["self", "typ"] or not any(p.startswith("**") for p in get):
        return f"context.py: {CONTEXT_CLASS}.get_hf_processor({', '.join(get)})"
    if call[:3] != ["self", "hf_processor", "data"]:
        return f"context.py: {CONTEXT_CLASS}.call_hf_processor({', '.join(call)})"
    return None


def _context_note(f):
    if not f["context_class"]:
        return f"context.py: no {CONTEXT_CLASS}"
    return (f"context.py: {CONTEXT_CLASS}.get_hf_processor and .call_hf_processor"
            if f["context_get_hf_processor"] and f["context_call_hf_processor"]
            else f"context.py: {CONTEXT_CLASS} lacks get_hf_processor/call_hf_processor")


def _vision_chunk_failed(f):
    if f["vision_chunk_resolve_params"][:3] != [
            "vision_chunk_items", "mm_processor", "vision_chunks_modality_order"]:
        return f"{RESOLVE}({', '.join(f['vision_chunk_resolve_params'])}) has another shape"
    if f["hasher_serialize_item_params"] != ["cls", "obj"]:
        return "hasher.py: MultiModalHasher.serialize_item is not (cls, obj)"
    if not f["hasher_hashes_wrapped_images_by_bytes"]:
        return "hasher.py: serialize_item does not hash a MediaWithBytes image by its bytes"
    return None


def _qwen(kind: str) -> Rule:
    """Both patches wrap the same two methods; the video patch stacks on the image patch."""
    return Rule(
        trigger=CONTEXT,
        not_needed=lambda f: None if f["context_class"] else (
            f"context.py: no {CONTEXT_CLASS}"),
        failed=lambda f: None if (f["context_get_hf_processor"]
                                  and f["context_call_hf_processor"]) else _context_note(f),
        misfit=_context_misfit,
        applies=lambda f: (f"{_context_note(f)}: every model's {kind} processor of a class we "
                           "mirror is the twin"),
        note=_context_note,
    )


RULES: dict[str, Rule] = {
    "vllm-processor-cls-overrides": Rule(
        trigger=PROCESSOR,
        upstream=_cls_overrides_upstream,
        failed=_cls_overrides_failed,
        applies=lambda f: ("processor.py: get_image_processor has no processor_cls_overrides; "
                           "cached = lru_cache(get_image_processor)"),
    ),
    "vllm-kimi-processor": Rule(
        trigger=KIMI,
        upstream=lambda f: "kimi_k25.py: KimiK25FusedVisionProcessor" if (
            f["kimi_binds_fused_class"]) else None,
        not_needed=_kimi_not_needed("KimiK25ProcessingInfo"),
        failed=_kimi_processor_failed,
        misfit=_kimi_processor_misfit,
        applies=lambda f: ("kimi_k25.py: KimiK25ProcessingInfo.__init__ -> "
                           "cached_get_image_processor (remote code); no fused class"),
        note=_kimi_processor_note,
    ),
    "vllm-kimi-fused-processor": Rule(
        trigger=KIMI,
        not_needed=_kimi_not_needed("KimiK25ProcessingInfo"),
        failed=_kimi_fused_failed,
        applies=lambda f: ("kimi_k25.py: KimiK25ProcessingInfo.__init__ reads "
                           "KimiK25FusedVisionProcessor"),
        note=lambda f: "kimi_k25.py: no KimiK25FusedVisionProcessor" if (
            not f["kimi_binds_fused_class"]) else "",
    ),
    "vllm-kimi-device-normalize": Rule(
        trigger=KIMI,
        upstream=lambda f: ("kimi_k25.py: KimiK25ForConditionalGeneration."
                            "supports_mm_device_do_normalize = True") if (
            f["kimi_model_supports_mm_device_do_normalize"] is True) else None,
        not_needed=_kimi_not_needed("KimiK25ProcessingInfo", "KimiK25ForConditionalGeneration"),
        failed=_devnorm_failed,
        misfit=_devnorm_misfit,
        applies=lambda f: ("kimi_k25.py: no supports_mm_device_do_normalize; "
                           f"{f['kimi_hf_processor']}.image_processor is ours"),
        note=lambda f: _devnorm_misfit(f) or "",
    ),
    "vllm-moonvit-max-seqlen": Rule(
        trigger=KIMI_VIT,
        upstream=lambda f: "kimi_k25_vit.py: MoonViT3dEncoder.prepare_encoder_metadata" if (
            f["moonvit_encoder_prepare_encoder_metadata"]) else None,
        not_needed=lambda f: None if len(f["moonvit_classes"]) == 3 else (
            "kimi_k25_vit.py: no MoonViT tower classes"),
        failed=_moonvit_failed,
        misfit=_moonvit_misfit,
        applies=lambda f: ("kimi_k25_vit.py: attention_qkvpacked recomputes max_seqlen "
                           "per block; no prepare_encoder_metadata"),
    ),
    "vllm-image-loader-client-errors": Rule(
        trigger=MEDIA_IMAGE,
        upstream=lambda f: "media/image.py: load_bytes names DecompressionBombError" if (
            f["load_bytes_names_DecompressionBombError"]) else None,
        not_needed=lambda f: None if f["image_io_defines_load_bytes"] else (
            "media/image.py: no ImageMediaIO.load_bytes"),
        misfit=_load_bytes_misfit,
        applies=_load_bytes_applies,
        note=lambda f: _load_bytes_misfit(f) or "",
    ),
    "vllm-fast-image-decode": Rule(
        trigger=MEDIA_IMAGE,
        not_needed=lambda f: None if f["image_io_defines_load_bytes"] else (
            "media/image.py: no ImageMediaIO.load_bytes"),
        failed=lambda f: None if f["load_bytes_opens_normalizes_loads"] else (
            "media/image.py: load_bytes does not open, normalize_image(image), then load"),
        applies=lambda f: ("media/image.py: load_bytes opens, then normalize_image(image) "
                           "decodes"),
        note=lambda f: "" if f["load_bytes_opens_normalizes_loads"] else (
            "media/image.py: load_bytes does not call normalize_image on the opened image"),
    ),
    "vllm-threaded-mm-hash": Rule(
        trigger=HASHER,
        not_needed=lambda f: None if f["hasher_class"] else "hasher.py: no MultiModalHasher",
        failed=lambda f: None if (
            f["get_hasher_factory_params"] == ["algorithm"]
            and f["hash_kwargs_makes_hasher_by_factory"]) else (
            "hasher.py: hash_kwargs does not make its hasher by "
            "_get_hasher_factory(algorithm)() and update it"),
        applies=lambda f: ("hasher.py: hash_kwargs makes its hasher by "
                           "_get_hasher_factory(algorithm)()"),
    ),
    "vllm-vision-chunk-hash-bytes": Rule(
        trigger=HASHER,  # the resolution's home varies by release: read into the facts
        not_needed=lambda f: None if f["vision_chunk_resolve_params"] is not None else (
            f"no {RESOLVE} (no unified vision chunks)"),
        failed=_vision_chunk_failed,
        applies=lambda f: (f"{f['vision_chunk_home']}.{RESOLVE} unwraps each image's "
                           "MediaWithBytes; serialize_item hashes a wrapped image by its bytes"),
        upstream=lambda f: None if f["vision_chunk_resolve_params"] is None or f[
            "vision_chunk_resolve_unwraps_media"] else (
            f"{RESOLVE} does not unwrap the image's MediaWithBytes"),
    ),
    QWEN_IMAGE: _qwen("image"),
    QWEN_VIDEO: _qwen("video"),
}


def statuses(r: Release, f: dict, specs: dict[str, dict]) -> list[tuple[str, str, str]]:
    version = str(f["version"])
    decided: dict[str, str] = {}
    rows: list[tuple[str, str, str]] = []
    # patches with dependencies last, so the patches they need are decided first
    for name in sorted(specs, key=lambda n: (
            bool(specs[n].get("requires_any") or specs[n].get("requires")), n)):
        rule, spec = RULES.get(name), specs[name]
        if rule is None:
            rows.append((name, "?", "no rule in static_vllm.py for this patch"))
            continue
        any_of = tuple(spec.get("requires_any") or ())
        if not r.exists(rule.trigger):
            status, reason = "not-needed", f"no module {rule.trigger}"
        elif rule.upstream and (why := rule.upstream(f)):
            status, reason = "upstream", why
        elif not in_range(version, str(spec["versions"])):
            note = rule.note(f) if rule.note else ""
            status = "unsupported-version"
            reason = f"outside {spec['versions']}" + (f"; {note}" if note else "")
        elif any_of and not any(decided.get(d) == "applied" for d in any_of):
            status, reason = "not-needed", f"none of {', '.join(any_of)} applied"
        elif unmet := [d for d in spec.get("requires") or () if decided.get(d) != "applied"]:
            status, reason = "not-needed", f"requires {', '.join(unmet)}"
        elif rule.not_needed and (why := rule.not_needed(f)):
            status, reason = "not-needed", why
        elif rule.failed and (why := rule.failed(f)):
            status, reason = "failed", why
        else:
            status, reason = "applied", rule.applies(f) if rule.applies else ""
            if rule.misfit and (why := rule.misfit(f)):
                reason = f"{reason}; warn: {why}"
        decided[name] = status
        rows.append((name, status, reason))
    return sorted(rows)


def main(argv: list[str] | None = None) -> int:
    return run_cli("vllm", __doc__.split("\n")[0], Release, facts, statuses, patch_specs,
                   PATCHES, argv)


if __name__ == "__main__":
    sys.exit(main())
