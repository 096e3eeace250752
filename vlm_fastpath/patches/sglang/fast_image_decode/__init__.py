"""SGLang's CPU image loading decodes JPEG, PNG and WebP with libjpeg-turbo/libpng/libwebp, exactly.

Why: Pillow's decode is most of an image's CPU time in the tokenizer manager's IO workers once
preprocessing is fast (issue #30); simplejpeg and imagecodecs decode the same bytes to the same
pixels faster. (SGLang's own Rust decoder is not an option: its JPEG pixels differ from
Pillow's by 1.)
How: ``sglang.srt.utils.common._load_image`` opens the bytes with Pillow on the CPU path and
hands the undecoded image to ``_fully_load_pil_image`` (its ``load()`` with SGLang's error
mapping). The patch rebinds that module global to one that first decodes through
``vlm_fastpath.imaging.decode`` (only variants and library versions its rule table proves
identical to Pillow) and returns the decoded image; everything it declines, and any fault, gets
SGLang's own function. The GPU (nvJPEG) path never reaches it.
While a large JPEG, PNG or WebP decodes, the processor the Qwen or Kimi patch last handed out starts
on its rows (``imaging.decode.speculation``); the processor's call takes that output for equal
settings (``VLM_FASTPATH_DECODE_OVERLAP=0`` turns it off).
Upstream PR: none.
Versions: SGLang >=0.5.19 (the first release with ``_fully_load_pil_image``), open-ended: the
contract decides. Stands aside without simplejpeg/imagecodecs at a verified version
(``pip install vlm-fastpath[decode]``).
Delete when: SGLang decodes on the CPU with an exact faster decoder itself.
"""

PATCH_MODULES = ("utils_common",)
