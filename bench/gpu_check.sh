#!/usr/bin/env bash
# bench/gpu_check.sh - the [hybrid] check on a machine with an NVIDIA GPU, in one call of at most
# 8 minutes: build with CUDA, run the CUDA tests (the device's split FFN, layer offload and placed
# attention against the CPU for every weight type) and the hybrid benchmark (the split against
# layer offload at 25/50/100% budgets) on a synthetic ~1B ReLU model, and write the results under
# $OUT (default ./gpu-out).
#
# The device image has numpy, pytest, cmake, ninja and nvcc but not cffi or gguf: fetch their
# wheels here first (bash bench/gpu_check.sh --wheels, into .whl/, which git ignores) and carry
# .whl. SmolLM2 does not travel (its package is larger than a call may carry), so only the
# synthetic model is benchmarked there.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
    mkdir -p .whl
    for spec in cffi==1.17.1 pycparser==2.22 gguf==0.19.0; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl "$spec" || exit 1
    done
    ls .whl
    exit 0
fi

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
step() { echo; echo "== $* ($(date +%T))"; }

if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/tests:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
THREADS=$(nproc)

step "device"
nvidia-smi -L || echo "nvidia-smi: none"

step "build with CUDA"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPI_CUDA=ON >/dev/null && cmake --build build-gpu || exit 1
export PI_LIBRARY=$PWD/build-gpu/libpowerinfer.so
python3 -c "from pypowerinfer.model import build_info, cuda_device_count as n; print(build_info(), n(), 'CUDA devices')"

step "CUDA and hybrid tests"
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_offload.py tests/test_hybrid.py \
    tests/test_sparse.py tests/test_device_traffic.py \
    2>&1 | tee "$OUT/tests.txt"
tests_rc=${PIPESTATUS[0]}

step "synthetic ~1B ReLU model, profiled"
model=/tmp/relu-1b.gguf
timeout 120 python3 bench/make_relu_model.py --shape 1b -o "$model" || exit 1
timeout 300 python3 convert/add_profile.py "$model" -o /tmp/relu-1b.powerinfer.gguf --recall 0.9 -q --no-plot \
    --threads "$THREADS" || exit 1

step "hybrid benchmark"
timeout 120 python3 bench/hybrid.py /tmp/relu-1b.powerinfer.gguf --device cuda --budgets 25,50,100 --decode 32 \
    -t "$THREADS" --markdown "$OUT/hybrid_relu1b.md"

step "done"
exit "$tests_rc"
