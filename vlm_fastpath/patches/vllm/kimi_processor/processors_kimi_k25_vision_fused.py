"""vLLM ``vllm.transformers_utils.processors.kimi_k25_vision_fused``: replace the fused processor.

Why: vLLM 0.25.0 (PR vllm-project/vllm#47416) added ``KimiK25FusedVisionProcessor``, a numba
kernel that walks the output element by element (five integer div/mods each, writes scattered
over the channel planes). It only pays off with many cores: on 2 cores 8 images of 2048x2048
took about 2.15 s, slower than the checkpoint's plain numpy. ``FusedKimiProcessor`` produces the
same bytes (float32, or uint8 for device-side normalization when ``do_rescale`` and
``do_normalize`` are both False, as vLLM 0.32+ asks) with a patch-major kernel and threaded
Pillow resizes.

How: ``KimiK25ProcessingInfo.__init__`` (in ``vllm.model_executor.models.kimi_k25``) reads the
module global ``KimiK25FusedVisionProcessor`` at call time and hands it to
``cached_get_image_processor(..., processor_cls_overrides=...)``. The patch rebinds every module
global under ``vllm.`` that is that class (the defining module and ``kimi_k25``'s copy; on
0.32+ also ``vllm.models.kimi_k3.common.mm_preprocess``'s, whose ``KimiK3ProcessingInfo`` loads
the same class, so Kimi K3 images get ours too; not verified on a K3 checkpoint) to
``FastpathKimiVisionProcessor``, a ``BaseImageProcessor`` subclass with the same interface
(``preprocess``, ``media_tokens_calculator``, ``get_resize_config``, ``resize_image``,
``num_frames_per_chunk``, ``media_proc_cfg``, ``to_dict``/``from_dict``) that delegates to
``FusedKimiProcessor``. The class objects vLLM registers (processing info, model) are untouched.
Opt out by name: ``VLM_FASTPATH_SKIP=vllm-kimi-fused-processor``.

Upstream: vllm-project/vllm#47416 (0.25.0), do_rescale/do_normalize from vllm-project/vllm#50411
(0.32.0). Applies to vLLM >=0.25 with no upper bound, where its contract holds on the installed
code (``contract``): the fused class exists, ``KimiK25ProcessingInfo.__init__`` reads it, its
constructor and ``preprocess`` take what ours takes, ours offers every method it has, and ours
equals it on the probes of ``patches.kimi_probe`` (every PIL mode, transparency, odd sizes,
float32 and uint8).
Verified by the sweep on the releases ``verified.json`` lists; elsewhere the status says so.
"""

from __future__ import annotations

import sys

from ...core.base import Patch, PatchContext, signature_clause
from ...core.registry import register

KIMI_K25_VISION_FUSED = "vllm.transformers_utils.processors.kimi_k25_vision_fused"
KIMI_K25 = "vllm.model_executor.models.kimi_k25"
CLASS_NAME = "KimiK25FusedVisionProcessor"


@register
class KimiFusedProcessorPatch(Patch):
    name = "vllm-kimi-fused-processor"
    engine = "vllm"
    versions = ">=0.25"
    backport = False
    trigger = KIMI_K25
    modules = (KIMI_K25_VISION_FUSED, KIMI_K25)
    upstream_pr = "vllm-project/vllm#47416"
    summary = "KimiK25FusedVisionProcessor -> FusedKimiProcessor (bit-exact, faster on few cores)"
    models = {"KimiK25ForConditionalGeneration": ""}  # K3 loads the same class: unverified

    def not_needed(self) -> str | None:
        if not hasattr(sys.modules[KIMI_K25], "KimiK25ProcessingInfo"):
            return f"{KIMI_K25} has no KimiK25ProcessingInfo"
        return None

    def contract(self) -> str | None:
        kimi = sys.modules[KIMI_K25]
        original = kimi.__dict__.get(CLASS_NAME)
        if not isinstance(original, type):
            return f"structure: {KIMI_K25} has no class {CLASS_NAME}"
        init = getattr(kimi.KimiK25ProcessingInfo.__init__, "__code__", None)
        if init is None or CLASS_NAME not in init.co_names:
            return f"structure: KimiK25ProcessingInfo.__init__ no longer reads {CLASS_NAME}"
        for attr, params in (("__init__", ("self", "media_proc_cfg")),
                             ("preprocess", ("self", "medias"))):
            clause = signature_clause(original, attr, params)
            if clause:
                return clause
        from ...adapters.kimi_vision import FastpathKimiVisionProcessor

        missing = sorted(
            name for name in dir(original)
            if not name.startswith("_") and callable(getattr(original, name, None))
            and not hasattr(FastpathKimiVisionProcessor, name)
        )
        if missing:
            return f"structure: {CLASS_NAME} has {', '.join(missing)}, which ours lacks"
        from ...adapters import kimi_probe as probe

        return probe.verdict(original, probe.OursForProbe, probe.default_media_proc_cfg())

    def apply(self, ctx: PatchContext) -> None:
        kimi = sys.modules[KIMI_K25]
        original = kimi.__dict__.get(CLASS_NAME)
        if not isinstance(original, type):
            raise LookupError(f"{KIMI_K25} has no class {CLASS_NAME} (renamed?)")

        from ...adapters.kimi_vision import FastpathKimiVisionProcessor
        from ...adapters.switches import SWITCHES

        # a processor vLLM built and cached while applied answers with vLLM's after a revert
        ctx.set_attr(SWITCHES, self.name, True)
        ctx.set_attr(FastpathKimiVisionProcessor, "patch_name", self.name)
        ctx.set_attr(FastpathKimiVisionProcessor, "engine_class", original)  # answers faults
        ctx.rebind_globals(original, FastpathKimiVisionProcessor, ("vllm.",))
        if kimi.__dict__.get(CLASS_NAME) is not FastpathKimiVisionProcessor:
            raise LookupError(f"could not rebind {KIMI_K25}.{CLASS_NAME}")

