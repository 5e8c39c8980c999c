"""pypowerinfer: GGUF models on a native C core, with llama-cpp-python's API.

    from pypowerinfer import Llama
    llm = Llama(model_path="model.gguf")
    print(llm("Q: What is the capital of France? A:", max_tokens=16)["choices"][0]["text"])
"""
from ._ffi import PowerInferError, UnsupportedError
from .llama import LLAMA_DEFAULT_SEED, Llama
from .resources import default_model_path
from .sampling import LogitsProcessorList, StoppingCriteriaList

__version__ = "0.1.0"

__all__ = ["Llama", "LLAMA_DEFAULT_SEED", "LogitsProcessorList", "StoppingCriteriaList", "PowerInferError",
           "UnsupportedError", "default_model_path", "__version__"]
