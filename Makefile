# Two commands on a fresh machine: `make bench` (the main job) and `make test` (all tests).
# Everything is created on first use and reused: .venv/ (core, package installed editable) and
# one cached environment per pinned engine release, built by ci/envs.py into a cache outside the
# checkout (~/.cache/vlm-fastpath/envs) and reached through thin overlays in .envs/ (ci/README.md).

PYTHON ?= python3.11
# The envs are installed without byte-compiling (pip --no-compile, ci/envs.py): each module is
# compiled when first imported and its .pyc kept. A shell that sets PYTHONDONTWRITEBYTECODE
# (this machine's does) would make every test process compile torch, transformers and the
# engine from source again: the suites' processes write their .pyc.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.vlm-fastpath-installed
CORE_PINS := ci/core-requirements.txt

# ci/envs.py owns the envs; bench only adds its extras to one overlay.
.PHONY: all venv bench e2e test test-core test-engines lint doctor clean clean-numba

all: test

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py $(CORE_PINS) vlm_fastpath.pth
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q --no-compile -r $(CORE_PINS)
	$(PIP) install -q --no-deps -e .
	$(PY) ci/install_pth.py
	touch $(STAMP)

# The benchmark runs in the vLLM 0.33.0 env so vLLM's own fused Kimi processor is a contender;
# then the processor vLLM itself hands out is timed with and without the plugin; then Qwen-VL
# (ours vs the transformers torchvision and PIL processors, then vLLM's own Qwen2.5-VL
# processor with and without the plugin), what one image request costs vLLM's API server stage
# by stage (Kimi and Qwen), Qwen-VL video, both beside a thread running Python,
# decoding; last, bytes to Qwen
# pixel_values against SGLang 0.5.23's native pipeline, in that release's env.
# Its chart and JSON go to benchmarks/results/local/ (ignored by git: a run leaves the tree
# clean); `VLM_FASTPATH_BENCH_RECORD=1 make bench` replaces the tracked benchmarks/results/ chart.
BENCH_ENV := .envs/vllm-0.33.0
BENCH_STAMP := $(BENCH_ENV)/.bench-stamp

bench: venv
	@$(MAKE) --no-print-directory -f ci/engines.mk vllm-env-0.33.0
	@$(MAKE) --no-print-directory $(BENCH_STAMP)
	$(BENCH_ENV)/bin/python -m benchmarks.preprocess
	$(BENCH_ENV)/bin/python -m benchmarks.vllm_processor
	$(BENCH_ENV)/bin/python -m benchmarks.qwen_preprocess
	$(BENCH_ENV)/bin/python -m benchmarks.vllm_qwen_processor
	$(BENCH_ENV)/bin/python -m benchmarks.frontend
	$(BENCH_ENV)/bin/python -m benchmarks.qwen_video
	$(BENCH_ENV)/bin/python -m benchmarks.beside_busy
	$(BENCH_ENV)/bin/python -m benchmarks.decode
	@$(MAKE) --no-print-directory -f ci/sglang.mk sglang-env-0.5.23
	.envs/sglang-0.5.23/bin/python -m benchmarks.sglang_native

$(BENCH_STAMP): ci/bench-requirements.txt
	$(BENCH_ENV)/bin/pip install -q -r ci/bench-requirements.txt
	touch $@

# The engine envs build in the background from the start (ci/envs.py prefetch: pip's downloads
# and unpacking overlap the CPU-bound suites; a suite needing an env still being built waits on
# its lock). PREFETCH=0 builds each env only when its suite needs it.
PREFETCH ?= 1
test:
	@if [ "$(PREFETCH)" != 0 ]; then $(PYTHON) ci/envs.py prefetch --background; fi
	@$(MAKE) --no-print-directory test-core test-engines; rc=$$?; \
		$(PYTHON) ci/envs.py prefetch --stop; exit $$rc

test-core: venv
	$(VENV)/bin/ruff check vlm_fastpath tests fixtures benchmarks ci
	$(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/engines

# One suite per pinned engine release, each in its cached env (matrix: ci/README.md).
# Each suite keeps about one core busy (imports, one pytest process), so SUITE_JOBS of them run
# at once, each suite's output printed whole when it ends (-Otarget), in two lanes of about
# equal length (measured on a cold clone, 2 cores: ~22 min each):
#   - the vLLM suites, then the transformers matrix (the Qwen parity subset under every
#     transformers minor), then the serving smoke;
#   - the SGLang suites, then the Qwen parity and decode suite (vLLM 0.33.0 env).
# Then the sweep, whose releases run as many at once as there are cores.
SUITE_JOBS ?= 2
test-engines: venv
	$(MAKE) --no-print-directory -j$(SUITE_JOBS) -Otarget engine-suites
	$(MAKE) --no-print-directory -f ci/sweep.mk sweep

.PHONY: engine-suites suites-vllm suites-sglang suite-qwen suite-smoke suite-transformers
engine-suites: suites-vllm suites-sglang suite-qwen suite-smoke suite-transformers
suites-vllm:
	@$(MAKE) --no-print-directory -f ci/engines.mk test-vllm
suite-transformers: suites-vllm
	@$(MAKE) --no-print-directory -f ci/transformers.mk test-transformers
suite-smoke: suite-transformers
	@$(MAKE) --no-print-directory -f ci/serving.mk test-e2e-smoke
suites-sglang:
	@$(MAKE) --no-print-directory -f ci/sglang.mk test-sglang
suite-qwen: suites-sglang
	@$(MAKE) --no-print-directory -f ci/engines.mk test-qwen

# End-to-end serving A/B (vLLM on CPU with and without the plugin): see ci/serving/README.md.
e2e: venv
	$(MAKE) --no-print-directory -f ci/serving.mk e2e

lint: venv
	$(VENV)/bin/ruff check vlm_fastpath tests fixtures benchmarks ci

doctor: venv
	$(VENV)/bin/vlm-fastpath doctor

clean:
	rm -rf $(VENV) .envs build *.egg-info

# numba keys each cached kernel by its own module's source file only: after editing a module
# other kernels inline (imaging/_numba_resample.py, _numba_int16_taps.py, _numba_bytes.py...),
# their callers' caches still hold the old code. Clear them before measuring or injecting bugs.
# (Installed wheels are not affected: an upgrade writes new files, so every stamp changes.)
clean-numba:
	find vlm_fastpath -name '*.nbi' -delete -o -name '*.nbc' -delete
# (the shared env cache stays: `python3.11 ci/envs.py gc --delete` removes stale cached envs)
