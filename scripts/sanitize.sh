#!/usr/bin/env bash
# The native-facing tests against builds with AddressSanitizer and UndefinedBehaviorSanitizer
# (CMake option PI_SANITIZE): the CPU build, then the CUDA tests on the CPU emulator (option
# PI_CUDA_EMULATOR, native/cuda_emulator), which runs the device kernels on the host, so that
# their reads and writes are checked too. Any report fails the run. Uses .venv from
# scripts/test.sh; extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
python -m pip install -q cmake ninja
runtime="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"

# build folder, CMake options, then pytest's arguments
sanitized() {
    local build=$1 options=$2
    shift 2
    # shellcheck disable=SC2086 # the options are words
    cmake -S . -B "$build" -G Ninja -DPI_SANITIZE=ON $options -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" >/dev/null
    # Python itself is not instrumented: its own allocations are not leak-checked. --capture=sys:
    # a report written just before the abort reaches the log
    LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    PI_LIBRARY="$PWD/$build/libpowerinfer.so" pytest -q -p no:cacheprovider --capture=sys "$@"
}

sanitized build-asan "-DPI_CUDA=OFF" \
    tests/test_loader.py tests/test_forward.py tests/test_kernels.py tests/test_sparse.py tests/test_hybrid.py \
    tests/test_state.py tests/test_embeddings.py tests/test_reliability.py tests/test_kquants.py tests/test_offload.py \
    tests/test_device_traffic.py tests/test_lora.py tests/test_bert.py tests/test_batch.py tests/test_groups.py \
    tests/test_attention.py tests/test_kv_cache.py tests/test_gemma3.py tests/test_qwen3.py tests/test_expert_plan.py \
    tests/test_smallthinker.py tests/test_smollm3.py tests/test_ffn_path.py \
    tests/test_expert_split.py \
    -k "not valgrind and not memory_flat" "$@"  # ASan keeps freed memory: RSS is not flat there
sanitized build-asan-emu "-DPI_CUDA_EMULATOR=ON" tests/test_cuda.py tests/test_hybrid.py tests/test_device_traffic.py \
    tests/test_smollm3.py "$@"
