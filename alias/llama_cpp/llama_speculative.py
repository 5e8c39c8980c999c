"""llama_cpp.llama_speculative: the draft model interface and prompt lookup, from pypowerinfer."""
from pypowerinfer.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding  # noqa: F401
