#!/usr/bin/env bash
# The device command (benchmarks/gpu/README.md): install the carried SGLang wheels, if any,
# then run every GPU check once; reports under $OUT (else benchmarks/results/gpu).
set -o pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    # SGLang 0.5.15.post1 and what its imports lack on the GPU image; a failed install only
    # turns the SGLang steps into "skipped" (with the import error), the others still run.
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || echo "check_all.sh: wheel install failed"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 benchmarks/gpu/check_all.py --device cuda --out "$OUT" "$@" 2>&1 | tee "$OUT/console.txt"
