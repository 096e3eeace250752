"""vLLM's image loader decodes JPEG, PNG and WebP with libjpeg-turbo/libpng/libwebp, exactly.

Why: with vlm-fastpath's processors, decoding is most of an image's CPU time in vLLM's API
server (issue #30: 63-88 % from 2048² up); simplejpeg and imagecodecs decode the same bytes
to the same pixels faster than Pillow (benchmarks/results/decode.md).
How: ``ImageMediaIO.load_bytes`` (which ``load_base64`` and ``load_file`` call) opens the
image with Pillow, applies its pixel limits and budget, then hands the still undecoded image
to ``normalize_image`` (EXIF transpose, which loads it). The patch rebinds that module's
``normalize_image`` to one that first decodes through ``vlm_fastpath.imaging.decode`` (only
variants and library versions its rule table proves identical to Pillow) and then runs
vLLM's own ``normalize_image`` on the result; ``load()``, ``convert_image_mode`` (RGBA onto
the background colour), error mapping and ``MediaWithBytes`` (hashing on the encoded bytes)
stay vLLM's. Every other input, and any fault, goes to vLLM's own path unchanged.
While a large JPEG, PNG or WebP decodes, the processor the Qwen or Kimi patch last handed out starts
on its rows (``imaging.decode.speculation``); the processor's call takes that output for equal
settings (``VLM_FASTPATH_DECODE_OVERLAP=0`` turns it off).
Upstream PR: none.
Versions: vLLM >=0.24 (the first ``media/image.py`` whose ``load_bytes`` calls
``normalize_image`` on the opened image), open-ended: the contract decides. Stands aside
without simplejpeg/imagecodecs at a verified version (``pip install vlm-fastpath[decode]``).
Delete when: vLLM decodes with an exact faster decoder itself.
"""

PATCH_MODULES = ("multimodal_media_image",)
