"""Model-neutral, exact pixels: the kernels every model's processor shares.

Input checks and errors, Pillow's exact resampler (coefficients, tap windows, numba passes,
the fused band kernel), torch's exact antialiased resize, pixel access, worker and output
pools, and the numba runtime. Nothing here knows Kimi or Qwen; their folders hold policy
(how big, which table, which patch order) and call into this one.
"""
