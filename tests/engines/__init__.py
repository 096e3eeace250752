"""Engine suites: run with an engine environment's python (see ci/README.md)."""
