"""vLLM patches, one module per patched upstream module (see each module's docstring)."""
