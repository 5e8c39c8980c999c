"""llama_cpp.llama_tokenizer: tokenizer objects, from pypowerinfer."""
from pypowerinfer.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer, LlamaTokenizer  # noqa: F401
