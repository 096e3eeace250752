"""Our Qwen2/2.5/3-VL image processor in vLLM, in place of transformers' (same bytes, faster).

Why: vLLM preprocesses Qwen-VL images with transformers' ``Qwen2VLImageProcessor``
(torchvision-backed) or ``Qwen2VLImageProcessorPil``, a per-image pipeline of resize, rescale,
normalize and a reshape/transpose patchify; ``FastQwen2VLImageProcessor`` gives
``torch.equal`` output with one table-driven patch kernel and threaded resizes.
How: ``models_qwen2_vl``, ``models_qwen2_5_vl`` and ``models_qwen3_vl`` wrap each model's
``ProcessingInfo.get_hf_processor``: vLLM's (cached) HF processor is returned as a shallow
copy whose ``image_processor`` is a twin of the original (``adapter``: a subclass of its class
whose ``preprocess`` is ours in the original's mode), once ``check_compatible`` proved both
equal on probe images. Every kwarg vLLM passes reaches the twin (size/min_pixels/max_pixels,
``do_rescale``/``do_normalize`` for device normalization, return_tensors). Videos keep the
engine's video processor. Where the processor is not one we mirror or the probes differ, the
original is handed out and the reason is put in the status.
Upstream PR: none (vLLM uses transformers' processors for Qwen-VL).
Versions: vLLM >=0.22 with no upper bound: applies where its contract holds (structure:
``get_hf_processor(self, **kwargs)`` on the model's processing info; behaviour: the probes of
``check_compatible`` per processor object, before its twin is handed out). The sweep's verified
releases are in ``verified.json``; elsewhere the status says the release is not verified.
Delete when: transformers' Qwen2-VL image processor is as fast as ours on few cores (re-measure
with ``benchmarks``), or vLLM ships its own fused Qwen-VL processor.
"""

PATCH_MODULES = ("models_qwen2_vl", "models_qwen2_5_vl", "models_qwen3_vl")
