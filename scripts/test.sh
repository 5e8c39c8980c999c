#!/usr/bin/env bash
# Install pypowerinfer and its test oracles (llama-cpp-python, gguf, the default model) into
# .venv from scratch, fetch llama.cpp's tokenizer fixtures, and run the test suite, then its
# native-facing part under the sanitizers (scripts/sanitize.sh), the CUDA kernels included, run
# on the CPU emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q ".[test]"
bash scripts/fetch_fixtures.sh
# pytest (not `python -m pytest`) so the installed package is imported, not the source folder
PI_REQUIRE_FIXTURES=1 pytest -q -p no:cacheprovider "$@"
# the native-facing tests again, under AddressSanitizer and UndefinedBehaviorSanitizer, and the
# CUDA tests on the emulator
PI_REQUIRE_FIXTURES=1 bash scripts/sanitize.sh
