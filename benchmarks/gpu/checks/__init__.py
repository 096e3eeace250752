"""The steps of ``benchmarks/gpu/check_all.py``: one module per CUDA-only claim (not shipped)."""
