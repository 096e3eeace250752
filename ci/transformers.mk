# The transformers matrix: the Qwen-VL parity subset (tests/transformers_matrix) under every
# transformers minor the pinned engines allow, up to the newest on the registry; one pin file
# per minor in ci/transformers/ (its newest patch release), see ci/transformers/README.md.
#
#   <cache>/transformers-<ver>-<key>   transformers (+ the hub/tokenizers it checks at import)
#                                      installed --no-deps over the shared base (ci/envs.py)
#   .envs/transformers-<ver>           this checkout's overlay
#
# Each version's suite runs through ci/suite_cache.py (a pass with the same inputs is not
# re-run). What does not depend on the release (tests/qwen_integration) runs once, in the
# Qwen suite of ci/engines.mk. Run from the repository root:
#   make -f ci/transformers.mk test-transformers        (what `make test` does)
#   make -f ci/transformers.mk test-transformers-5.22.2 (one version)

ENGINE_PYTHON ?= python3.11
ENVS_PY := $(ENGINE_PYTHON) ci/envs.py
SUITE := $(ENGINE_PYTHON) ci/suite_cache.py
PYTEST_FLAGS ?= -q -p no:cacheprovider
TRANSFORMERS_VERSIONS ?= $(sort $(patsubst ci/transformers/transformers-%.txt,%,\
	$(wildcard ci/transformers/transformers-*.txt)))
export ENGINE_PYTHON

.PHONY: test-transformers transformers-envs
test-transformers: $(addprefix test-transformers-,$(TRANSFORMERS_VERSIONS))
transformers-envs:
	@$(ENVS_PY) ensure $(addprefix transformers-,$(TRANSFORMERS_VERSIONS))

test-transformers-%:
	@$(ENVS_PY) ensure transformers-$* || exit 1
	@echo "== transformers matrix: $* (.envs/transformers-$*/bin/python)"
	@$(SUITE) transformers-$* transformers-$*-matrix -- .envs/transformers-$*/bin/python \
		-m pytest $(PYTEST_FLAGS) tests/transformers_matrix
