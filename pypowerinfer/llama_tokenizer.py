"""Tokenizer objects with llama-cpp-python's interface (llama_cpp.llama_tokenizer): bytes in,
token ids out, and back. `LlamaTokenizer` is the model's own tokenizer (tokenizer.Tokenizer), taken
from a `Llama` or read from a GGUF's vocabulary alone; `LlamaHFTokenizer` wraps a Hugging Face
tokenizer, for clients that bring their own."""
from __future__ import annotations

import abc
from typing import Any, List, Optional

from .tokenizer import Tokenizer


class BaseLlamaTokenizer(abc.ABC):
    @abc.abstractmethod
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        """The token ids of UTF-8 `text`, with BOS when `add_bos`, special tokens parsed when `special`."""

    @abc.abstractmethod
    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        """The bytes of `tokens`; after `prev_tokens` when given (what the tokens add to them)."""


class LlamaTokenizer(BaseLlamaTokenizer):
    def __init__(self, llama: Any):
        """`llama`: a Llama (its `tokenizer_` is taken), or a tokenizer.Tokenizer itself."""
        self._tokenizer: Tokenizer = llama if isinstance(llama, Tokenizer) else llama.tokenizer_

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self._tokenizer.encode(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        # a token's bytes do not depend on the tokens before it here, so prev_tokens changes nothing
        return self._tokenizer.decode(tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: List[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> "LlamaTokenizer":
        from .model import NativeModel  # the native library, loaded only when a file is read

        model = NativeModel(path, vocab_only=True)
        try:
            return cls(Tokenizer.from_metadata(model.metadata()))
        finally:
            model.close()


class LlamaHFTokenizer(BaseLlamaTokenizer):
    def __init__(self, hf_tokenizer: Any):
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        def text(ids: List[int]) -> bytes:
            return self.hf_tokenizer.decode(ids, skip_special_tokens=not special).encode("utf-8", errors="ignore")

        if prev_tokens is None:
            return text(list(tokens))
        return text(list(prev_tokens) + list(tokens))[len(text(list(prev_tokens))):]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> "LlamaHFTokenizer":
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ImportError("LlamaHFTokenizer needs the `transformers` library: pip install transformers") from None
        return cls(AutoTokenizer.from_pretrained(pretrained_model_name_or_path=pretrained_model_name_or_path))
