"""Our Qwen2/2.5/3-VL image processor on SGLang's CPU preprocessing path (same bytes, faster).

Why: SGLang preprocesses Qwen-VL images in the tokenizer process with transformers' processor
(``BaseMultimodalProcessor.process_mm_data``; 0.5.23 also calls ``processor.image_processor``
directly for its artifact cache); on a CPU-only host (device "cpu", or no device with
``--disable-fast-image-processor``/``--image-processor-backend pil``) that is a per-image
torchvision or PIL pipeline. ``FastQwen2VLImageProcessor`` gives ``torch.equal`` output faster.
How: ``multimodal_processors_qwen_vl`` wraps ``QwenVLImageProcessor.__init__``: the processor's
``_processor`` becomes a shallow copy of the HF processor whose ``image_processor`` is an exact
twin (the vLLM folder's ``adapter``), once ``check_compatible`` proved it equal. Calls with
``device="cuda:N"`` (SGLang's GPU preprocessing) go to transformers unchanged, and so do videos
(the video processor is the engine's).
Upstream PR: none (the in-tree Rust ``sglang-mm`` is the closest peer).
Versions: sglang >=0.5.12 with no upper bound: applies where its contract holds (structure:
``QwenVLImageProcessor.__init__``; behaviour: ``check_compatible``'s probes per processor
object). Verified releases: ``verified.json``; elsewhere the status says not verified.
Delete when: SGLang's CPU Qwen-VL preprocessing is as fast as ours on few cores.
"""

PATCH_MODULES = ("multimodal_processors_base_processor",)
