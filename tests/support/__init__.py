"""Test-only helpers shared by the suites and the repository benchmarks (never shipped)."""
