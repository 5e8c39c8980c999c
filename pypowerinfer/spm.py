"""SentencePiece BPE by piece scores (llama.cpp's llm_tokenizer_spm_session)."""
from __future__ import annotations

from collections.abc import Sequence

import regex

from .merges import encode_words, merge_pairs
from .utf8 import ESCAPED_SPACE, is_utf8, token_bytes, unescape_spaces


class SentencePiece:
    """SentencePiece BPE by piece scores (llm_tokenizer_spm_session).

    llama.cpp merges a whole fragment at once. When no token has a U+2581 right after another
    character, no merge can cross the start of a "U+2581... word", so words merge alone, and
    are cached, with the same result.
    """

    # One symbol per UTF-8 character, sized by the lead byte alone, as llama.cpp splits it.
    _SYMBOL = regex.compile(rb"[\xc0-\xdf].?|[\xe0-\xef].{0,2}|[\xf0-\xff].{0,3}|.", regex.DOTALL)
    # In valid UTF-8: a run of U+2581 and the characters up to the next one.
    _WORD = regex.compile(rb"(?:\xe2\x96\x81)*(?:(?!\xe2\x96\x81).)+|(?:\xe2\x96\x81)+", regex.DOTALL)

    def __init__(self, tokens: Sequence[str], scores: Sequence[float]):
        self._ids = {token_bytes(text): i for i, text in enumerate(tokens)}
        self._scores = scores
        self._byte_ids = [self._ids.get(b"<0x%02X>" % b, self._ids.get(bytes([b]))) for b in range(256)]
        inner_space = regex.compile("[^\u2581]\u2581")
        self._words_merge_alone = not any("\u2581" in t[1:] and inner_space.search(t) for t in tokens)
        self._cache: dict[bytes, list[int]] = {}

    def encode(self, fragment: bytes) -> list[int]:
        text = fragment.replace(b" ", ESCAPED_SPACE)
        if self._words_merge_alone and is_utf8(text):
            return encode_words(self._WORD.findall(text), self._cache, self._encode_symbols)
        return self._encode_symbols(text)

    def _encode_symbols(self, text: bytes) -> list[int]:
        ids = []
        for symbol in merge_pairs(self._SYMBOL.findall(text), self._priority):
            token = self._ids.get(symbol)
            if token is not None:
                ids.append(token)
            else:
                ids.extend(self._byte_id(b) for b in symbol)
        return ids

    def _priority(self, left: bytes, right: bytes) -> float | None:
        # Best score first: heapq pops the smallest key.
        token = self._ids.get(left + right)
        return None if token is None else -self._scores[token]

    def _byte_id(self, byte: int) -> int:
        token = self._byte_ids[byte]
        if token is None:  # llama.cpp throws std::out_of_range here
            raise ValueError(f"vocab has no byte token for 0x{byte:02X} (<0x{byte:02X}> or the raw byte)")
        return token

    @staticmethod
    def normal_piece(text: str) -> bytes:
        return unescape_spaces(text)

    def newline_id(self) -> int | None:
        return self._byte_ids[ord("\n")]
