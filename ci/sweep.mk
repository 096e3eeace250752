# The release sweep (ci/sweep/run.py): every vLLM 0.15-0.33 and SGLang 0.5.12-0.5.23 release in
# ci/sweep/expected/*.csv, each in its cached env, checked against its expected statuses; a line
# per release as it runs. Unchanged releases are not re-run (SWEEP_FORCE=1 re-runs them).
#   make -f ci/sweep.mk sweep                     everything (part of `make test`)
#   make -f ci/sweep.mk sweep SWEEP_ARGS="--engine vllm --release 0.19.1"

ENGINE_PYTHON ?= python3.11
SWEEP_ARGS ?=
export ENGINE_PYTHON

.PHONY: sweep coverage-page

sweep:
	$(ENGINE_PYTHON) ci/sweep/run.py $(SWEEP_ARGS)

coverage-page:
	$(ENGINE_PYTHON) ci/sweep/coverage_page.py
