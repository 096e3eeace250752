"""vLLM patches: one folder per upstream change (see each folder's ``__init__``)."""
