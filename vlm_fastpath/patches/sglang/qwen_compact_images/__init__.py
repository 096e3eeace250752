"""Qwen-VL image items sent to the scheduler with each patch once; the model restores the copy.

Why: transformers tiles an image's frame ``temporal_patch_size`` (2) times, so every row of a
Qwen2/2.5/3-VL image's ``pixel_values`` carries each pixel twice. On SGLang's CPU
preprocessing path (where our image processor serves) the tokenizer process keeps those rows
in its caches, hashes them, pickles them to the scheduler, and the scheduler copies them to the
device: all twice the image's bytes.
How: ``models_qwen_vl`` wraps ``get_image_feature`` of SGLang's Qwen2-VL, Qwen2.5-VL and
Qwen3-VL model classes (Qwen3-VL-MoE inherits it): compact image items (``[patches, C*P*P]``,
``qwen_integration.compact``) go to the tower's device in one copy and are expanded there
before the release's own function runs, so the tower's input equals the full rows element for
element; full items pass untouched. ``multimodal_processors_base_processor`` makes the
tokenizer process emit compact rows: per multimodal processor, where the served model's class
expands them (applied in the same process), our processor serves and every tower runs in a
process this launch starts on this node; ``process_mm_data`` and the image-artifact cache's
``prepare_artifact_batch`` then run inside ``compact.emitting()``.
Mixed fleets: an older tokenizer process sends full rows, which the patched model takes as
before; a scheduler without the expansion only exists on another node (``nnodes > 1``) or
behind encoder disaggregation, both of which send the full form. SGLang's GPU path (the
default on CUDA: transformers' processor, CUDA-IPC transport) keeps its full rows.
Upstream PR: none in SGLang; vLLM's peer is vllm-project/vllm#44787 ("compact patches", open).
Versions: SGLang >=0.5.12 (``get_image_feature(self, items)`` on the three model classes,
``BaseMultimodalProcessor.process_mm_data``); open-ended, by contract.
Delete when: SGLang sends each Qwen image patch once itself on every release we support.
"""

PATCH_MODULES = ("models_qwen_vl", "multimodal_processors_base_processor")
