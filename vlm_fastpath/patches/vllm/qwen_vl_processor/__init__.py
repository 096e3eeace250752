"""Our Qwen-VL image processor in vLLM, for every model that holds transformers' (same bytes).

Why: vLLM preprocesses the images of Qwen2/2.5/3-VL, Qwen3.5, the Omni thinkers, dots.ocr,
OpenCUA, ColQwen3, LFM3-VL, EXAONE 4.5 and more with transformers' ``Qwen2VLImageProcessor``
(torchvision-backed) or ``Qwen2VLImageProcessorPil``, a per-image pipeline of resize, rescale,
normalize and a reshape/transpose patchify; ``FastQwen2VLImageProcessor`` gives ``torch.equal``
output with one table-driven patch kernel and threaded resizes.
How: ``multimodal_processing_context`` wraps ``InputProcessingContext.get_hf_processor`` (where
vLLM resolves any model's HF processor) and ``.call_hf_processor`` (the door every HF call goes
through): the processor is handed on as a shallow copy whose ``image_processor`` is a twin of
the original (``adapters.qwen_twin``: a subclass of its class sharing its settings, whose
``preprocess`` is ours in the original's mode), once the probes of ``check_compatible`` proved
both equal for those settings. Hooked by what the processor is, not by model class, so a model
that defines its own ``get_hf_processor`` (or ships tomorrow) is served too. Every kwarg vLLM
passes reaches the twin (size/min_pixels/max_pixels, ``do_rescale``/``do_normalize`` for device
normalization, return_tensors); settings a model changes after loading (D3 sets ``size``) are
read at call time and probed. Videos are the video patch's. Where the processor is not one we
mirror, the probes differ or vLLM preprocesses on a device, the status says so per model.
Replaces the per-model patches ``vllm-qwen2-vl-processor``, ``vllm-qwen2-5-vl-processor`` and
``vllm-qwen3-vl-processor`` (their wrappers hid behind a model's own ``get_hf_processor``).
Upstream PR: none (vLLM uses transformers' processors for Qwen-VL).
Versions: vLLM >=0.22 with no upper bound: applies where its contract holds (structure:
``InputProcessingContext.get_hf_processor(self, typ, /, **kwargs)`` and
``call_hf_processor(self, hf_processor, data, ...)``; behaviour: the probes, per processor
class and settings, before its twin serves them). Verified releases: ``verified.json``.
Delete when: transformers' Qwen2-VL image processor is as fast as ours on few cores (re-measure
with ``benchmarks``), or vLLM ships its own fused Qwen-VL processor.
"""

PATCH_MODULES = ("multimodal_processing_context",)
