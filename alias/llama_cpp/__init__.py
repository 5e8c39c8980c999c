"""llama_cpp, answered by pypowerinfer: install this instead of llama-cpp-python and code that
does `from llama_cpp import Llama` (LangChain's LlamaCpp, LlamaIndex, scripts) runs on
pypowerinfer unchanged. It cannot be installed beside llama-cpp-python: both own `llama_cpp`."""
from pypowerinfer import (BaseLlamaCache, Llama, LlamaCache, LlamaDiskCache, LlamaRAMCache, LlamaState,
                          LLAMA_DEFAULT_SEED, LogitsProcessorList, StoppingCriteriaList)
from pypowerinfer.grammar import LlamaGrammar

from .llama_types import *  # noqa: F401,F403  (llama-cpp-python exports its types at the top level)

__version__ = "0.3.36"  # the llama-cpp-python API this alias follows

__all__ = ["BaseLlamaCache", "Llama", "LlamaCache", "LlamaDiskCache", "LlamaGrammar", "LlamaRAMCache", "LlamaState",
           "LLAMA_DEFAULT_SEED", "LogitsProcessorList", "StoppingCriteriaList"]
