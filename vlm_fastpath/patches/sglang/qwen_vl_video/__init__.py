"""Our Qwen2/2.5/3-VL video processors on SGLang's CPU preprocessing path (same bytes, faster).

Why: SGLang preprocesses a Qwen-VL video request in the tokenizer process: ``preprocess_video``
samples frames and resizes them with torchvision bilinear (its own pixels, left alone here),
then ``process_mm_data`` calls transformers' processor, whose ``Qwen2VLVideoProcessor`` /
``Qwen3VLVideoProcessor`` copies, resizes again (to the same size, normally), rescales,
normalizes, pads and patchifies every frame. Our twins give ``torch.equal`` output faster.
How: ``multimodal_processors_qwen_vl`` wraps ``QwenVLImageProcessor.__init__`` (stacked on the
image patch's wrapper, which it requires): the processor's ``_processor`` view gets a
``video_processor`` twin (``patches.adapters.qwen_video_twin``) once ``check_video_compatible``
proved it equal. SGLang's own frame sampling and bilinear resize run unchanged, so the pixels
are the release's; calls with a ``device`` other than the CPU (``video_preprocessing_device``,
GPU preprocessing) go to transformers unchanged.
Upstream PR: none (SGLang#12240 made its resize bilinear, which changed the pixels).
Versions: sglang >=0.5.12 (every release of the sweep) with no upper bound where the contract
holds (structure: ``QwenVLImageProcessor.__init__``; behaviour: the probes, per video
processor object). Releases before 0.5.23 pin transformers 5.6-5.12, whose video processors
size frames without the per-frame cap (Qwen3-VL by its older ``smart_resize``): the twin
follows the installed rule (``video_sizing.installed_rule``), proved by the transformers
matrix's video subset and the sweep's behaviour test on each release.
Delete when: SGLang's CPU Qwen-VL video preprocessing is within ~2x of ours on few cores.
"""

PATCH_MODULES = ("multimodal_processors_base_processor",)
