"""SGLang patches, one module per patched upstream module (``<package path with _>.py``).

No module here imports SGLang at import time: each patch imports its engine module inside
``upstream_equivalent``/``apply``, which the registry calls only after the trigger module has
finished importing.
"""
