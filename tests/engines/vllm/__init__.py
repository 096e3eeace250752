"""vLLM engine suite (run per pinned vLLM release by ci/engines.mk)."""
