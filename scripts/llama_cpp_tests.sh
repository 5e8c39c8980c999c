#!/usr/bin/env bash
# llama-cpp-python's own tests (from its sdist on PyPI) against pypowerinfer through the
# llama_cpp alias. Only the files that need no Hugging Face download can run here:
#   tests/test_llama_grammar.py, tests/test_llama_chat_format.py   run
#   tests/test_llama.py          imports huggingface_hub and llama_cpp._internals (llama.cpp's ctypes
#                                layer) at module level; all but two of its tests download models
#   tests/test_llama_speculative.py  run (LlamaPromptLookupDecoding; Llama(draft_model=) waits for [batch])
# Run after scripts/test.sh (it uses .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$work"
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work" llama_cpp_python-0.3.36/tests
cd "$work/llama_cpp_python-0.3.36/tests"
PYTHONPATH="$OLDPWD/alias${PYTHONPATH:+:$PYTHONPATH}" python -m pytest -q -p no:cacheprovider \
    test_llama_grammar.py test_llama_chat_format.py test_llama_speculative.py
