# SGLang engine suites: one cached env per pinned release, created on first use and reused.
#
#   .envs/sglang-<ver>   a venv that sees .envs/base (built by ci/engines.mk, never modified
#                        here) through a .pth, with the SGLang wheel and what its multimodal
#                        imports need installed --no-deps (ci/sglang/sglang-<ver>.txt), and
#                        vlm-fastpath installed from the same wheel as the vLLM envs (its .pth
#                        and its sglang.srt.plugins entry point are the real ones).
#
# make -f ci/sglang.mk test-sglang            all pinned releases
# make -f ci/sglang.mk test-sglang-0.5.23     one release
# Times and disk: ci/sglang/README.md.

ENGINE_PYTHON ?= python3.11
SGLANG_ENVS := .envs
SGLANG_BASE := $(SGLANG_ENVS)/base
SGLANG_LOGS := $(SGLANG_ENVS)/logs
SGLANG_WHEEL_STAMP := $(SGLANG_ENVS)/wheels/.built
SGLANG_SITE := lib/python3.11/site-packages
SGLANG_VERSIONS ?= 0.5.12.post1 0.5.15.post1 0.5.17 0.5.23
SGLANG_PYTEST_FLAGS ?= -q -p no:cacheprovider

.PHONY: test-sglang sglang-envs sglang-prereqs $(addprefix test-sglang-,$(SGLANG_VERSIONS))
.SECONDARY:

test-sglang: $(addprefix test-sglang-,$(SGLANG_VERSIONS))

sglang-envs: $(foreach v,$(SGLANG_VERSIONS),$(SGLANG_ENVS)/sglang-$(v)/.pkg-stamp)

# The shared base env and the vlm-fastpath wheel come from ci/engines.mk (no-ops when fresh).
sglang-prereqs:
	@$(MAKE) --no-print-directory -f ci/engines.mk base-env $(SGLANG_WHEEL_STAMP)

$(SGLANG_ENVS)/sglang-%/.stamp: ci/sglang/sglang-%.txt ci/sglang/common.txt | sglang-prereqs
	@mkdir -p $(SGLANG_LOGS)
	@echo "sglang envs: building $(SGLANG_ENVS)/sglang-$* (first run only)"
	@start=$$(date +%s); rm -rf $(SGLANG_ENVS)/sglang-$* \
	&& $(ENGINE_PYTHON) -m venv $(SGLANG_ENVS)/sglang-$* \
	&& echo "import site; site.addsitedir('$(abspath $(SGLANG_BASE))/$(SGLANG_SITE)')" \
		> $(SGLANG_ENVS)/sglang-$*/$(SGLANG_SITE)/00-vlm-fastpath-base.pth \
	&& $(SGLANG_ENVS)/sglang-$*/bin/pip install -q --no-deps -r ci/sglang/sglang-$*.txt \
		> $(SGLANG_LOGS)/sglang-$*.log 2>&1 \
	|| { tail -40 $(SGLANG_LOGS)/sglang-$*.log; exit 1; }; \
	echo "sglang envs: $(SGLANG_ENVS)/sglang-$* ready in $$(( $$(date +%s) - start )) s," \
		"$$(du -sh $(SGLANG_ENVS)/sglang-$* | cut -f1) (+ base)"
	@$(SGLANG_ENVS)/sglang-$*/bin/python ci/sglang/check_imports.py
	@touch $@

$(SGLANG_ENVS)/sglang-%/.pkg-stamp: $(SGLANG_ENVS)/sglang-%/.stamp $(SGLANG_WHEEL_STAMP)
	@$(SGLANG_ENVS)/sglang-$*/bin/pip install -q --no-deps --force-reinstall \
		$(SGLANG_ENVS)/wheels/vlm_fastpath-*.whl > $(SGLANG_LOGS)/sglang-$*-pkg.log 2>&1 \
	|| { tail -40 $(SGLANG_LOGS)/sglang-$*-pkg.log; exit 1; }
	@touch $@

$(SGLANG_WHEEL_STAMP): sglang-prereqs

$(addprefix test-sglang-,$(SGLANG_VERSIONS)): test-sglang-%: $(SGLANG_ENVS)/sglang-%/.pkg-stamp
	@echo "== engine suite: sglang $* ($(SGLANG_ENVS)/sglang-$*/bin/python)"
	$(SGLANG_ENVS)/sglang-$*/bin/python -m pytest $(SGLANG_PYTEST_FLAGS) tests/engines/sglang
	@# Our K3 recipe against the release's own K3 functions (the oracle needs sglang 0.5.18+).
	@if [ "$*" = "0.5.23" ]; then VLM_FASTPATH=0 $(SGLANG_ENVS)/sglang-$*/bin/python -m pytest \
		$(SGLANG_PYTEST_FLAGS) tests/kimi_integration/test_deferred_k3.py; fi
