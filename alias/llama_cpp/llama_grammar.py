"""llama_cpp.llama_grammar, from pypowerinfer."""
from pypowerinfer.grammar import JSON_GBNF, LlamaGrammar  # noqa: F401
