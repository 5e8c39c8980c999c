"""pypowerinfer: GGUF models on a native C core, with llama-cpp-python's API.

    from pypowerinfer import Llama
    llm = Llama(model_path="model.gguf")
    print(llm("Q: What is the capital of France? A:", max_tokens=16)["choices"][0]["text"])

The native library is loaded on first use of a name that needs it, so the pure-Python modules
(tokenizer, sampling) import without it.
"""
from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "Llama": "llama", "LLAMA_DEFAULT_SEED": "llama",
    "LogitsProcessorList": "sampling", "StoppingCriteriaList": "sampling",
    "PowerInferError": "_ffi", "UnsupportedError": "_ffi",
    "default_model_path": "resources",
    "LlamaState": "state", "LlamaCache": "state", "LlamaRAMCache": "state", "LlamaDiskCache": "state",
    "BaseLlamaCache": "state",
    "LlamaGrammar": "grammar", "MinTokensLogitsProcessor": "sampling", "LogitsProcessor": "sampling",
    "StoppingCriteria": "sampling",
    "BaseLlamaTokenizer": "llama_tokenizer", "LlamaTokenizer": "llama_tokenizer",
    "set_verbose": "_logger", "suppress_stdout_stderr": "_logger", "LlamaDraftModel": "llama_speculative",
}
# llama-cpp-python exports its request and response types at the top level too
_EXPORTS.update((name, "llama_types") for name in import_module(".llama_types", __name__).__all__)

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'pypowerinfer' has no attribute {name!r}")
