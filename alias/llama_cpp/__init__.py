"""llama_cpp, answered by pypowerinfer: install this instead of llama-cpp-python and code that
does `from llama_cpp import Llama` (LangChain's LlamaCpp, LlamaIndex, the `llm` CLI's plugin,
scripts) runs on pypowerinfer unchanged. It cannot be installed beside llama-cpp-python: both own
`llama_cpp`. Every high-level name llama-cpp-python exports at the top level is here; the
low-level ctypes layer is not: llama_cpp.llama_cpp holds only the
constants and small functions that dependents use."""
import pypowerinfer as _pypowerinfer

_OWN = {"PowerInferError", "UnsupportedError", "default_model_path", "__version__"}  # pypowerinfer's alone
__all__ = sorted(name for name in _pypowerinfer.__all__ if name not in _OWN)
globals().update((name, getattr(_pypowerinfer, name)) for name in __all__)

from .llama_cpp import *  # noqa: E402,F401,F403  (as the peer, its constants and functions at the top level too)

__version__ = "0.3.36"  # the llama-cpp-python API this alias follows
