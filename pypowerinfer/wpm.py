"""WordPiece, as llama.cpp's WPM tokenizer (tokenizer.ggml.model "bert") runs it.

A GGUF's WordPiece vocab is in the phantom-space form of llama.cpp's converter: a piece that
starts a word is stored as "\u2581piece", a continuation ("##piece") as "piece". llama.cpp
  1. cuts the text into words (llm_tokenizer_wpm_session::preprocess): at whitespace, dropping
     control characters, NUL and U+FFFD; with strip_accents every character is replaced by the
     first code point of its NFD form and combining marks are dropped; with lowercase, lower
     case (the simple mapping); punctuation, ASCII symbols and CJK ideographs are words of
     their own;
  2. matches each "\u2581word", bytewise, longest vocab entry first from the left; a word with
     any part unmatched becomes the unknown token as a whole.
Character classes come from the `regex` module's Unicode tables, except that the code points
assigned in Unicode 16 and 17 are unassigned, as in llama.cpp's Unicode 15.1 tables; NFD and
lower case come from Python's `unicodedata`.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import regex

from .pretokenizers import UNICODE_16_17
from .utf8 import ESCAPED_SPACE, decode_utf8, token_bytes, unescape_spaces

# llama.cpp's unicode_set_whitespace (Unicode's White_Space)
_WHITESPACE = frozenset(map(chr, (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000)))
_CONTROL = regex.compile(r"[\p{Cc}\p{Cf}\p{Co}\p{Cs}\x00\ufffd]")  # llama.cpp's \p{C} has no Cn
_MARK = regex.compile(r"\p{M}")
_PUNCT_OR_SYMBOL = regex.compile(r"\p{P}|(?=[\x00-\x7e])\p{S}")
# is_chinese_char's ranges, with its 0x2B920 (HF's) where Unicode's block starts at 0x2B820
_CJK = regex.compile("[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
                     "\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f]")

SPACE, DROP, MARK, ALONE, LETTER = range(5)


@lru_cache(maxsize=None)
def _kind(ch: str) -> int:
    if ch in _WHITESPACE:
        return SPACE
    if UNICODE_16_17.match(ch):  # unassigned to llama.cpp: part of a word, unless in a CJK range
        return ALONE if _CJK.match(ch) else LETTER
    if _CONTROL.match(ch):
        return DROP
    if _MARK.match(ch):
        return MARK
    if _PUNCT_OR_SYMBOL.match(ch) or _CJK.match(ch):
        return ALONE
    return LETTER


@lru_cache(maxsize=None)
def _nfd_first(ch: str) -> str:
    return unicodedata.normalize("NFD", ch)[0]


@lru_cache(maxsize=None)
def _lower(ch: str) -> str:
    # the simple mapping is the full one's first character: U+0130 alone lowers to two, "i" + U+0307
    return ch.lower()[0]


class WordPiece:
    """llama.cpp's llm_tokenizer_wpm_session over a phantom-space vocab."""

    def __init__(self, tokens: Sequence[str], unk_id: int, pad_id: int, lowercase: bool, strip_accents: bool):
        self._ids = {token_bytes(text): i for i, text in enumerate(tokens)}
        self._max_len = max(map(len, self._ids), default=0)
        self._unk_id = unk_id
        self._pad_id = pad_id
        self._lowercase = lowercase
        self._strip_accents = strip_accents
        self._cache: dict[str, list[int]] = {}

    def encode(self, fragment: bytes) -> list[int]:
        ids: list[int] = []
        for word in self.words(decode_utf8(fragment)):
            cached = self._cache.get(word)
            if cached is None:
                cached = self._cache[word] = self._encode_word(ESCAPED_SPACE + word.encode())
            ids.extend(cached)
        return ids

    def words(self, text: str) -> list[str]:
        """The text cut into words, normalized (preprocess)."""
        words: list[str] = []
        word: list[str] = []
        for ch in text:
            if self._strip_accents:
                ch = _nfd_first(ch)
            kind = _kind(ch)
            if kind == SPACE or kind == ALONE:
                if word:
                    words.append("".join(word))
                    word = []
                if kind == SPACE:
                    continue
            if kind == DROP or (kind == MARK and self._strip_accents):
                continue
            if self._lowercase:
                ch = _lower(ch)
            if kind == ALONE:
                words.append(ch)
            else:
                word.append(ch)
        if word:
            words.append("".join(word))
        return words

    def _encode_word(self, word: bytes) -> list[int]:
        ids = []
        i, n = 0, len(word)
        while i < n:
            for j in range(min(n, i + self._max_len), i, -1):  # longest first
                token = self._ids.get(word[i:j])
                if token is not None:
                    ids.append(token)
                    i = j
                    break
            else:
                return [self._unknown()]
        return ids

    def _unknown(self) -> int:
        if self._unk_id < 0:
            raise ValueError("a word has no WordPiece tokens and the vocab has no unknown token")
        return self._unk_id

    @staticmethod
    def normal_piece(text: str) -> bytes:
        return unescape_spaces(text)

    def newline_id(self) -> int | None:
        return self._pad_id if self._pad_id >= 0 else None  # llama.cpp's choice for WPM
