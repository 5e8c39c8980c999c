#!/usr/bin/env bash
# The CUDA tests on the CPU: a build whose CUDA sources are compiled as C++ against the emulator
# (CMake option PI_CUDA_EMULATOR, native/cuda_emulator), so the device kernels run and are held
# to the CPU and the numpy reference on machines with no GPU. Uses .venv from scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
python -m pip install -q cmake ninja
cmake -S . -B build-emu -G Ninja -DPI_CUDA_EMULATOR=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-emu >/dev/null
PI_LIBRARY="$PWD/build-emu/libpowerinfer.so" pytest -q -p no:cacheprovider \
    tests/test_cuda.py tests/test_hybrid.py tests/test_offload.py "$@"
