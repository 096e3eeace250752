# Engine test environments: built once into a cache outside the checkout (ci/envs.py), keyed by
# a hash of their pin files, shared by every clone on the machine; each checkout gets a thin
# overlay at .envs/<name> holding its own vlm-fastpath wheel (see ci/README.md).
#
#   <cache>/base-<key>          torch 2.14.1 + torchvision 0.29.1 + what engine imports need
#                               (ci/engines/base-requirements.txt, fully pinned)
#   <cache>/vllm-<ver>-<key>    the vLLM wheel installed --no-deps (ci/engines/vllm-<ver>.txt)
#                               over the base (through a .pth)
#   .envs/vllm-<ver>            overlay: sees the cached env, has this checkout's wheel
#
# <cache> is $VLM_FASTPATH_ENV_CACHE (default ~/.cache/vlm-fastpath/envs). `ensure` is a
# no-op (~0.1 s) when nothing changed; a package source change rebuilds the wheel and
# reinstalls it in the overlays (seconds). Run from the repository root:
#   make -f ci/engines.mk test-engines      (what `make test` does)

ENGINE_PYTHON ?= python3.11
ENVS_PY := $(ENGINE_PYTHON) ci/envs.py
# Anchor releases: the full engine suite runs here. ci/sweep/ covers the other releases.
VLLM_VERSIONS ?= 0.22.1 0.24.0 0.33.0 0.34.0
PYTEST_FLAGS ?= -q -p no:cacheprovider
# Runs a suite unless it already passed with exactly these inputs (env, checkout files,
# command, settings): ci/suite_cache.py. SUITE_FORCE=1 runs it regardless.
SUITE := $(ENGINE_PYTHON) ci/suite_cache.py
export ENGINE_PYTHON

# The Qwen-VL processor against the transformers processors the engines hand out (torchvision
# and PIL backends): the vLLM 0.33.0 env has both (the core env has no torchvision).
QWEN_ENV := .envs/vllm-0.33.0

.PHONY: test-engines test-vllm test-qwen envs base-env vllm-envs vllm-env-% test-vllm-% \
	clean-engine-envs

# Other engine suites plug in with a ci/engines/<engine>.mk that appends its test target:
#   ENGINE_SUITES += test-sglang
ENGINE_SUITES := test-vllm test-qwen
-include $(wildcard ci/engines/*.mk)

test-engines: $(ENGINE_SUITES)

test-vllm: $(addprefix test-vllm-,$(VLLM_VERSIONS))

envs: base-env vllm-envs
base-env:
	@$(ENVS_PY) build base
vllm-envs: $(addprefix vllm-env-,$(VLLM_VERSIONS))

vllm-env-%:
	@$(ENVS_PY) ensure vllm-$* || exit 1
	@test -f .envs/vllm-$*/.imports-ok || { .envs/vllm-$*/bin/python ci/engines/check_imports.py vllm \
		&& touch .envs/vllm-$*/.imports-ok; }

test-vllm-%: vllm-env-%
	@echo "== engine suite: vllm $* (.envs/vllm-$*/bin/python)"
	@$(SUITE) vllm-$* vllm-$*-suite -- .envs/vllm-$*/bin/python -m pytest $(PYTEST_FLAGS) tests/engines/vllm

# tests/imaging runs here too: its decode tests need the verified codec libraries, which only
# the engine envs hold (the [decode] extra is in their shared package layer, not in .venv).
test-qwen: vllm-env-0.33.0
	@echo "== qwen-vl parity and decode suite ($(QWEN_ENV)/bin/python, transformers processors)"
	@$(SUITE) vllm-0.33.0 qwen-suite -- $(QWEN_ENV)/bin/python -m pytest $(PYTEST_FLAGS) tests/qwen_integration tests/imaging

# The checkout's overlays only; `python3.11 ci/envs.py gc --delete` removes stale cached envs.
clean-engine-envs:
	rm -rf .envs
