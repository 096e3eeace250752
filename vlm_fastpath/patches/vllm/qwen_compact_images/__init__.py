"""Qwen-VL images sent to the engine core with each patch once; the tower restores the copy.

Why: transformers tiles an image's frame ``temporal_patch_size`` (2) times, so every row of a
Qwen2/2.5/3-VL image's ``pixel_values`` carries each pixel twice: 69.8 MiB of uint8 for one
12 MP photo, which the API server writes, keeps in its processor cache, serializes and sends
to the engine core (16 ms of CPU on the send alone), and the engine core copies to the device.
How: ``models_qwen_vision`` wraps the ``forward`` of the three vLLM Qwen vision towers so that
compact rows (``[patches, C*P*P]``, ``qwen_integration.compact``) are expanded on the tower's
device right before the release's own forward (its input norm and patch embedding): the
expansion equals the full rows element for element, so the embeddings are bit-identical; full
rows pass untouched. ``v1_engine_input_processor`` makes the API server send compact rows:
around ``InputProcessingContext.call_hf_processor`` our processor writes one temporal copy (a
full answer from transformers is cut to its first copy, after checking the copies are equal),
only where the engine is sure to expand them: the served architecture's tower is one of the
three and its expansion patch is applied in this process, and the API server's
``InputProcessor`` saw a topology in which every engine process is started from this node, so
from this installation (one node, no remote data-parallel engines, no Ray), without encoder
CUDA graphs (their captured input buffer is full width). ``multimodal_inputs`` guards vLLM's
batching: a batch mixing compact and full rows (cached items from before a ``revert()``
meeting new ones) would be zero-padded to full width; its compact items are expanded first.
Anywhere else the full form is sent, and the status says per model why. Mixed fleets: an engine
process without the expansion only exists on another node or from another installation, which
the topology clause excludes; an engine with the expansion takes both forms, so an older API
server is served too.
Upstream PR: vllm-project/vllm#44787 ("compact patches", open; changes the layout itself).
Versions: vLLM >=0.22 (``InputProcessor(vllm_config, ...)``, the towers' ``forward(x, ...)``
feeding ``self.patch_embed``, whose view is ``[C, T, P, P]``); open-ended, by contract.
Delete when: vLLM sends each image patch once itself (#44787 or its successor) on every
release we support.
"""

PATCH_MODULES = ("models_qwen_vision", "multimodal_inputs", "v1_engine_input_processor")
