#!/usr/bin/env bash
# bench/gpu_check.sh - the [hybrid] check on a machine with an NVIDIA GPU, in one call of at most
# 8 minutes (4 on an H200): build with CUDA, run the CUDA tests (the device's split FFN, layer
# offload and placed attention against the CPU for every weight type), the hybrid benchmark (the
# split against layer offload at 25/50/100% budgets) and the kernel profile (bench/gpu_profile.py)
# on a synthetic ~1B ReLU model, one weight type's tests under compute-sanitizer, and write the
# results under $OUT (default ./gpu-out).
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
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
echo "$(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo)"

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
# a short calibration and one candidate: the benchmark below measures the speeds itself
timeout 240 python3 convert/add_profile.py "$model" -o /tmp/relu-1b.powerinfer.gguf --recall 0.9 -q --no-plot \
    --tokens 4096 --rank 64 --down-t-type q4_0 --assume-speedup 2 --threads "$THREADS" || exit 1

step "hybrid benchmark"
timeout 120 python3 bench/hybrid.py /tmp/relu-1b.powerinfer.gguf --device cuda --budgets 25,50,100 --decode 32 \
    -t "$THREADS" --markdown "$OUT/hybrid_relu1b.md"

step "where a token's device time goes (layer offload of every layer; the split at 100%)"
timeout 120 python3 bench/gpu_profile.py /tmp/relu-1b.powerinfer.gguf -t "$THREADS" --decode 16 \
    --markdown "$OUT/gpu_profile_relu1b.md"

step "the split's device FFN under compute-sanitizer (memcheck), one weight type"
timeout 110 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
    tests/test_cuda.py -k "split and Q4_0" 2>&1 | tail -25 | tee "$OUT/sanitizer.txt"

step "done"
exit "$tests_rc"
