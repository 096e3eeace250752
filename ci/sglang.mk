# SGLang engine suites: one cached env per pinned release (ci/envs.py; cache outside the
# checkout, keyed by the pin files' hash), an overlay at .envs/sglang-<ver> with this checkout's
# vlm-fastpath wheel (its .pth and its sglang.srt.plugins entry point are the real ones).
#
# make -f ci/sglang.mk test-sglang            all anchor releases (full suite)
# make -f ci/sglang.mk test-sglang-0.5.23     one release
# Times and disk: ci/sglang/README.md. The other releases: ci/sweep/.

ENGINE_PYTHON ?= python3.11
ENVS_PY := $(ENGINE_PYTHON) ci/envs.py
SGLANG_VERSIONS ?= 0.5.12.post1 0.5.15.post1 0.5.17 0.5.23
SGLANG_PYTEST_FLAGS ?= -q -p no:cacheprovider
SUITE := $(ENGINE_PYTHON) ci/suite_cache.py  # skips a suite that passed with these exact inputs
export ENGINE_PYTHON

.PHONY: test-sglang sglang-envs sglang-env-% test-sglang-%

test-sglang: $(addprefix test-sglang-,$(SGLANG_VERSIONS))

sglang-envs: $(addprefix sglang-env-,$(SGLANG_VERSIONS))

sglang-env-%:
	@$(ENVS_PY) ensure sglang-$* || exit 1
	@test -f .envs/sglang-$*/.imports-ok || { .envs/sglang-$*/bin/python ci/sglang/check_imports.py \
		&& touch .envs/sglang-$*/.imports-ok; }

test-sglang-%: sglang-env-%
	@echo "== engine suite: sglang $* (.envs/sglang-$*/bin/python)"
	@$(SUITE) sglang-$* sglang-$*-suite -- .envs/sglang-$*/bin/python -m pytest \
		$(SGLANG_PYTEST_FLAGS) tests/engines/sglang
	@# Our K3 recipe against the release's own K3 functions (the oracle needs sglang 0.5.18+).
	@if [ "$*" = "0.5.23" ]; then VLM_FASTPATH=0 $(SUITE) sglang-$* sglang-$*-k3-oracle -- \
		.envs/sglang-$*/bin/python -m pytest $(SGLANG_PYTEST_FLAGS) \
		tests/kimi_integration/test_deferred_k3.py; fi
