"""llama_cpp.llama_cache, from pypowerinfer."""
from pypowerinfer.state import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache  # noqa: F401
