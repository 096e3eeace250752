# Engine test environments, created on first use and reused (see ci/README.md).
#
#   .envs/base            torch 2.14.1 + torchvision 0.29.1 + what engine imports need
#                         (ci/engines/base-requirements.txt, fully pinned)
#   .envs/vllm-<ver>      a venv that sees .envs/base through a .pth, with the vLLM wheel
#                         installed --no-deps (ci/engines/vllm-<ver>.txt) and vlm-fastpath
#                         installed from a wheel as a user would (its .pth + entry points)
#
# Stamps make the second run seconds: an env is rebuilt only when its pin file changes; the
# vlm-fastpath wheel is rebuilt and reinstalled only when the package sources change.
# Run from the repository root: make -f ci/engines.mk test-engines (what `make test` does).

ENGINE_PYTHON ?= python3.11
ENVS := .envs
BASE := $(ENVS)/base
BASE_PINS := ci/engines/base-requirements.txt
VLLM_VERSIONS ?= 0.22.1 0.24.0 0.33.0
LOGS := $(ENVS)/logs
WHEELS := $(ENVS)/wheels
PKG_SOURCES := pyproject.toml setup.py vlm_fastpath.pth $(shell find vlm_fastpath -name '*.py')
PKG_STAMP := $(WHEELS)/.built
PYTEST_FLAGS ?= -q -p no:cacheprovider
SITE := lib/python3.11/site-packages

# The Qwen-VL processor against the transformers processors the engines hand out (torchvision
# and PIL backends): the vLLM 0.33.0 env has both (the core env has no torchvision).
QWEN_ENV := $(ENVS)/vllm-0.33.0

.PHONY: test-engines test-vllm test-qwen envs base-env vllm-envs $(addprefix test-vllm-,$(VLLM_VERSIONS)) \
	$(addprefix vllm-env-,$(VLLM_VERSIONS)) clean-engine-envs
.SECONDARY:

# Other engine suites plug in with a ci/engines/<engine>.mk that appends its test target:
#   ENGINE_SUITES += test-sglang
ENGINE_SUITES := test-vllm test-qwen
-include $(wildcard ci/engines/*.mk)

test-engines: $(ENGINE_SUITES)

test-vllm: $(addprefix test-vllm-,$(VLLM_VERSIONS))

envs: base-env vllm-envs
base-env: $(BASE)/.stamp
vllm-envs: $(addprefix vllm-env-,$(VLLM_VERSIONS))
$(addprefix vllm-env-,$(VLLM_VERSIONS)): vllm-env-%: $(ENVS)/vllm-%/.pkg-stamp

# -- shared base --------------------------------------------------------------------------
$(BASE)/.stamp: $(BASE_PINS)
	@mkdir -p $(LOGS)
	@echo "engine envs: building $(BASE) (first run only; ~1.5 min, ~6 GB)"
	@start=$$(date +%s); rm -rf $(BASE) && $(ENGINE_PYTHON) -m venv $(BASE) \
	&& $(BASE)/bin/pip install -q -r $(BASE_PINS) > $(LOGS)/base.log 2>&1 \
	|| { tail -40 $(LOGS)/base.log; exit 1; }; \
	echo "engine envs: $(BASE) ready in $$(( $$(date +%s) - start )) s, $$(du -sh $(BASE) | cut -f1)"
	@touch $@

# -- vlm-fastpath wheel (one build, installed into every engine env) -----------------------
$(PKG_STAMP): $(PKG_SOURCES) | $(BASE)/.stamp
	@mkdir -p $(WHEELS) $(LOGS)
	@rm -f $(WHEELS)/vlm_fastpath-*.whl
	@$(BASE)/bin/pip wheel -q --no-deps -w $(WHEELS) . > $(LOGS)/wheel.log 2>&1 \
	|| { tail -40 $(LOGS)/wheel.log; exit 1; }
	@touch $@

# -- one env per vLLM release -------------------------------------------------------------
$(ENVS)/vllm-%/.stamp: ci/engines/vllm-%.txt $(BASE)/.stamp
	@mkdir -p $(LOGS)
	@echo "engine envs: building $(ENVS)/vllm-$* (first run only)"
	@start=$$(date +%s); rm -rf $(ENVS)/vllm-$* && $(ENGINE_PYTHON) -m venv $(ENVS)/vllm-$* \
	&& echo "import site; site.addsitedir('$(abspath $(BASE))/$(SITE)')" \
		> $(ENVS)/vllm-$*/$(SITE)/00-vlm-fastpath-base.pth \
	&& $(ENVS)/vllm-$*/bin/pip install -q --no-deps -r ci/engines/vllm-$*.txt \
		> $(LOGS)/vllm-$*.log 2>&1 \
	|| { tail -40 $(LOGS)/vllm-$*.log; exit 1; }; \
	echo "engine envs: $(ENVS)/vllm-$* ready in $$(( $$(date +%s) - start )) s," \
		"$$(du -sh $(ENVS)/vllm-$* | cut -f1) (+ base)"
	@$(ENVS)/vllm-$*/bin/python ci/engines/check_imports.py vllm
	@touch $@

$(ENVS)/vllm-%/.pkg-stamp: $(ENVS)/vllm-%/.stamp $(PKG_STAMP)
	@$(ENVS)/vllm-$*/bin/pip install -q --no-deps --force-reinstall $(WHEELS)/vlm_fastpath-*.whl \
		> $(LOGS)/vllm-$*-pkg.log 2>&1 || { tail -40 $(LOGS)/vllm-$*-pkg.log; exit 1; }
	@touch $@

$(addprefix test-vllm-,$(VLLM_VERSIONS)): test-vllm-%: $(ENVS)/vllm-%/.pkg-stamp
	@echo "== engine suite: vllm $* ($(ENVS)/vllm-$*/bin/python)"
	$(ENVS)/vllm-$*/bin/python -m pytest $(PYTEST_FLAGS) tests/engines/vllm

test-qwen: $(QWEN_ENV)/.pkg-stamp
	@echo "== qwen-vl parity suite ($(QWEN_ENV)/bin/python, transformers processors)"
	$(QWEN_ENV)/bin/python -m pytest $(PYTEST_FLAGS) tests/qwen_integration

clean-engine-envs:
	rm -rf $(ENVS)
