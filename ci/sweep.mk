# The release sweep (ci/sweep/run.py): every vLLM and SGLang release in ci/sweep/expected/*.csv,
# each in its cached env, checked against its expected statuses; then every release the registry
# lists that is not recorded, run without expected statuses and printed as NEW. A line per
# release as it runs. Unchanged releases are not re-run (SWEEP_FORCE=1 re-runs them).
#   make -f ci/sweep.mk sweep SWEEP_HIDE=0.33.0   run a recorded release as if it were new
#   make -f ci/sweep.mk sweep                     everything (part of `make test`)
#   make -f ci/sweep.mk sweep SWEEP_ARGS="--engine vllm --release 0.19.1"

ENGINE_PYTHON ?= python3.11
SWEEP_ARGS ?=
SWEEP_HIDE ?=
export ENGINE_PYTHON SWEEP_HIDE

.PHONY: sweep coverage-page

sweep:
	$(ENGINE_PYTHON) ci/sweep/run.py $(SWEEP_ARGS)

coverage-page:
	$(ENGINE_PYTHON) ci/sweep/coverage_page.py
