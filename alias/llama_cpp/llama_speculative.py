"""llama_cpp.llama_speculative: the draft model interface, from pypowerinfer."""
from pypowerinfer.llama_speculative import LlamaDraftModel  # noqa: F401
