"""Byte-level BPE (llama.cpp's llm_tokenizer_bpe_session): GPT-2's byte-to-character map, and
the encoder that pre-tokenizes a fragment into words and merges each by lowest merge rank.
"""
from __future__ import annotations

from collections.abc import Sequence

import regex

from .merges import encode_words, merge_pairs
from .pretokenizers import PreTokenizer, Splitter
from .utf8 import ESCAPED_SPACE, decode_utf8, token_bytes, unescape_spaces


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256+n."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return [chars[b] for b in range(256)]


BYTE_CHARS = _gpt2_byte_chars()
_CHAR_BYTES = {c: b for b, c in enumerate(BYTE_CHARS)}
_BYTES_TO_CHARS = str.maketrans({chr(b): c for b, c in enumerate(BYTE_CHARS)})  # on latin-1 text
_CHARS_TO_BYTES = str.maketrans({c: chr(b) for c, b in _CHAR_BYTES.items()})  # back to latin-1
_NOT_BYTE_CHAR = regex.compile("[^" + regex.escape("".join(BYTE_CHARS)) + "]")


class BytePairEncoder:
    """Byte-level BPE (llm_tokenizer_bpe_session)."""

    def __init__(self, ids: dict[str, int], merges: Sequence[str], pre: PreTokenizer):
        self._ids = ids
        # Keyed by the merge line "left right": the first space after the first character
        # splits it, as in llama.cpp, and symbols never hold a raw space (spaces are mapped
        # to 'Ġ' or U+2581), so "left right" is unambiguous. The first of duplicates wins.
        self._ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        self._pre = pre
        self._splitter = Splitter(pre.regexes)
        self._byte_ids = [self._ids.get(self._byte_token_text(b)) for b in range(256)]
        self._cache: dict[str, list[int]] = {}

    def _byte_token_text(self, byte: int) -> str:
        # A symbol without a token falls back to these, byte by byte (missing ones are dropped).
        if self._pre.spm_style:
            return f"<0x{byte:02X}>"
        return bytes([byte]).decode("utf-8", "surrogateescape")

    def encode(self, fragment: bytes) -> list[int]:
        if self._pre.spm_style:
            fragment = fragment.replace(b" ", ESCAPED_SPACE)
        return encode_words(self._splitter.split(decode_utf8(fragment)), self._cache, self._encode_word)

    def _encode_word(self, word: str) -> list[int]:
        raw = word.encode("utf-8", "surrogatepass")
        text = word if self._pre.spm_style else raw.decode("latin-1").translate(_BYTES_TO_CHARS)
        whole = self._ids.get(text)
        if whole is not None and (self._pre.ignore_merges or
                                  (self._pre.whole_newline_runs and not text.strip("\n"))):
            return [whole]
        ids = []
        for symbol in merge_pairs(list(text), self._priority):
            token = self._ids.get(symbol)
            if token is not None:
                ids.append(token)
            else:
                fallback = (self._byte_ids[b] for b in symbol.encode("utf-8", "surrogatepass"))
                ids.extend(t for t in fallback if t is not None)
        return ids

    def _priority(self, left: str, right: str) -> int | None:
        return self._ranks.get(left + " " + right)

    def normal_piece(self, text: str) -> bytes:
        if self._pre.spm_style:
            return unescape_spaces(text)
        if not _NOT_BYTE_CHAR.search(text):
            return text.translate(_CHARS_TO_BYTES).encode("latin-1")
        # llama_decode_text: a character outside the byte map is spelled out, whole token after it.
        raw = token_bytes(text)
        return b"".join(
            bytes([_CHAR_BYTES[c]]) if c in _CHAR_BYTES
            else b"[UNK_BYTE_0x" + c.encode("utf-8", "surrogatepass").hex().encode() + raw + b"]"
            for c in decode_utf8(raw))

    def newline_id(self) -> int | None:
        ids = self.encode(b"\n")
        return ids[0] if ids else None
