#!/usr/bin/env bash
# The native-facing tests against a build with AddressSanitizer and UndefinedBehaviorSanitizer
# (CMake option PI_SANITIZE): any report fails the run. Uses .venv from scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
python -m pip install -q cmake ninja
cmake -S . -B build-asan -G Ninja -DPI_SANITIZE=ON -DPI_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-asan >/dev/null
runtime="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
# Python itself is not instrumented: its own allocations are not leak-checked
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
PI_LIBRARY="$PWD/build-asan/libpowerinfer.so" pytest -q -p no:cacheprovider \
    tests/test_loader.py tests/test_forward.py tests/test_kernels.py tests/test_sparse.py tests/test_hybrid.py \
    tests/test_state.py tests/test_embeddings.py tests/test_reliability.py tests/test_kquants.py tests/test_offload.py -k "not valgrind and not memory_flat" "$@"  # ASan keeps freed memory: RSS is not flat there
