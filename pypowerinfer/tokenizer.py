"""Text <-> token ids, exactly as llama.cpp (the one in llama-cpp-python 0.3.36) computes them.

`Tokenizer.from_metadata(meta)` builds one from a GGUF's `tokenizer.ggml.*` keys; the
public methods are the llama-cpp-python calls a drop-in needs:

    encode(text, add_bos, special)  == Llama.tokenize   (llama_tokenize: add_special, parse_special)
    token_to_piece(token, special)  == llama_token_to_piece(..., lstrip=0, special)
    decode(tokens, special)         == Llama.detokenize (pieces joined; one leading space dropped after BOS)

Pipeline of `encode`, as in llama-vocab.cpp:
  1. the raw bytes are cut at special-token texts (longest first; control tokens only when
     `special`, user-defined ones always), honouring the tokens' lstrip/rstrip attributes;
  2. every remaining fragment goes to the vocab's model:
     - SentencePiece (`llama`): spaces become U+2581, then the fragment is merged by
       best-scoring adjacent pair; pieces missing from the vocab fall back to <0xXX> bytes;
     - byte-level BPE (`gpt2`): the pre-tokenizer regexes cut it into words, each word's UTF-8
       bytes are mapped to GPT-2's printable characters and merged by lowest merge rank;
     - WordPiece (`bert`): words cut and normalized as BERT does, each matched longest piece
       first (wpm.py); add_bos puts [CLS] before and [SEP] after.

The parts: vocab.py reads the vocabulary and picks the model, pretokenizers.py holds the
pre-tokenizer regexes and their splitter, bpe.py, spm.py and wpm.py the models, merges.py the merge
queue and word cache they share, utf8.py UTF-8 as llama.cpp reads it; this module partitions
text at special tokens and renders pieces.

Why our own plain-Python BPE rather than HF `tokenizers`: the target is llama.cpp's ids, not
HF's, and llama.cpp has its own semantics that a general library does not share: invalid
UTF-8 becomes U+FFFD per byte before BPE, character classes come from its Unicode 15.1 tables,
merges pop from a (rank, position) priority queue, unknown merge results are emitted as
single-byte tokens or dropped, special tokens are partitioned with its own strip rules. Owning
~one page of BPE keeps every such rule visible and testable, and costs no dependency. Speed
comes from the `regex` module doing the splitting in C and a per-word cache of merge results
(real text repeats its words), so ~100k tokens encode in well under a few seconds.

Where this differs from llama.cpp / llama-cpp-python on purpose or by necessity:
  - `decode` keeps pieces longer than 32 bytes; Llama.detokenize drops them (its piece buffer
    is 32 bytes), e.g. SmolLM2's long whitespace and "----" tokens.
  - llama.cpp picks eot/fim ids among several look-alike tokens in hash-map order (its C++
    library's, so it varies by platform); here the first in llama.cpp's candidate list wins.
    `is_eog` is unaffected: every EOG-looking token is in the set either way.
  - special tokens of equal length keep id order (llama.cpp's std::sort is not stable).
  - in byte-level BPE, 4-byte sequences above U+10FFFF make llama.cpp throw (and abort the
    process); here they become U+FFFD.
  - code points assigned after Unicode 17.0 (the `regex` module's tables) are classified by
    whatever `regex` knows, not as unassigned.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .utf8 import token_bytes
from .vocab import (BYTE, CONTROL, LSTRIP, NORMAL, PREFIX, RSTRIP, TOKEN_NULL, UNKNOWN, USER_DEFINED,
                    add_strip_attrs, eog_ids, find_roles, get_typed, read_attrs, read_ids, read_tokens, setup_model)

_C_SPACE = b" \t\n\v\f\r"  # C isspace() in the "C" locale: what lstrip/rstrip strip


def _split_at(fragment: bytes, text: bytes, token: int, attr: int) -> list[bytes | int]:
    """Cut a raw fragment at every occurrence of a special token's text."""
    pieces: list[bytes | int] = []
    pos = 0
    while (hit := fragment.find(text, pos)) >= 0:
        left = fragment[pos:hit]
        if attr & LSTRIP:
            left = left.rstrip(_C_SPACE)
        if left:
            pieces.append(left)
        pieces.append(token)
        pos = hit + len(text)
        if attr & RSTRIP:
            pos = len(fragment) - len(fragment[pos:].lstrip(_C_SPACE))
    if pos < len(fragment):
        pieces.append(fragment[pos:])
    return pieces


class Tokenizer:
    """A GGUF vocab's tokenizer, with llama.cpp's token ids, pieces and special-token rules.

    Build it with `from_metadata`. Token strings in the metadata that were not valid UTF-8 in
    the file must come decoded with errors="surrogateescape", so that their bytes survive.
    Missing ids are TOKEN_NULL (-1), as llama.cpp reports them.
    """

    def __init__(self, meta: Mapping[str, object]):
        tokens = read_tokens(meta)
        index = {text: i for i, text in enumerate(tokens)}
        if len(index) != len(tokens):
            raise ValueError(f"{PREFIX}tokens holds {len(tokens) - len(index)} duplicate token texts")
        setup = setup_model(meta, tokens, index)
        self._model = setup.model
        self._texts = tokens
        self.n_vocab = len(tokens)
        newline = self._model.newline_id()  # llama.cpp's fallback, the pad id, is not read yet here
        self.nl_id = TOKEN_NULL if newline is None else newline
        ids = read_ids(meta, setup.default_ids, len(tokens))
        self.add_bos: bool = setup.always_bos or get_typed(meta, PREFIX + "add_bos_token", bool, setup.add_bos)
        self.add_eos: bool = not setup.sep_not_eos and get_typed(meta, PREFIX + "add_eos_token", bool, False)
        self.add_sep = setup.sep_not_eos
        self._space_prefix = setup.uses_space_prefix and get_typed(meta, PREFIX + "add_space_prefix", bool, True)

        attrs = read_attrs(meta, len(tokens))
        find_roles(ids, attrs, index)
        self._eog = frozenset(eog_ids(ids, attrs, tokens, index))
        self.bos_id, self.eos_id, self.eot_id, self.eom_id, self.unk_id, self.pad_id, self.sep_id = (
            ids[role] for role in ("bos", "eos", "eot", "eom", "unk", "pad", "sep"))

        self._pieces = [self._piece(text, attr) for text, attr in zip(tokens, attrs)]
        hidden = UNKNOWN | CONTROL  # shown only when special=True
        self._plain_pieces = [b"" if attr & hidden else piece for piece, attr in zip(self._pieces, attrs)]
        self._control = [bool(attr & CONTROL) for attr in attrs]

        special_ids = [i for i, attr in enumerate(attrs) if attr & (CONTROL | USER_DEFINED | UNKNOWN)]
        special_ids.sort(key=lambda i: -len(token_bytes(tokens[i])))  # longest first; ties by id
        add_strip_attrs(meta, attrs, index, special_ids)
        self._specials = [(token_bytes(tokens[i]), i, attrs[i]) for i in special_ids]

    @classmethod
    def from_metadata(cls, meta: Mapping[str, object]) -> Tokenizer:
        """From GGUF metadata: key -> str/int/float/bool, list[str] for string arrays, numpy arrays
        for numeric ones. ValueError for missing or inconsistent keys, NotImplementedError for a
        tokenizer model or pre-tokenizer llama.cpp has but this module does not."""
        return cls(meta)

    def _piece(self, text: str, attr: int) -> bytes:
        """A token's text as llama.cpp renders it with special=True (token_to_piece)."""
        if attr & (UNKNOWN | CONTROL | USER_DEFINED):
            return token_bytes(text)
        if attr & NORMAL:
            return self._model.normal_piece(text)
        if attr & BYTE:
            return bytes([int(text[3:5], 16)])  # "<0xXX>"
        return b""

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text`, as Llama.tokenize(text, add_bos, special).

        `add_bos` is llama.cpp's add_special: it adds BOS (and EOS) only where the vocab says
        to (`self.add_bos`, `self.add_eos`). `special` lets control-token texts in `text` become
        those tokens; user-defined tokens always do.
        """
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out = [self._required(self.bos_id, "BOS")] if add_bos and self.add_bos else []
        after_special = True  # SentencePiece puts a space before the first fragment too
        for fragment in self._partition(data, special):
            if isinstance(fragment, int):
                out.append(fragment)
                after_special = True
                continue
            if self._space_prefix and after_special:
                fragment = b" " + fragment
            out.extend(self._model.encode(fragment))
            after_special = False
        if add_bos and self.add_eos:
            out.append(self._required(self.eos_id, "EOS"))
        if add_bos and self.add_sep:
            out.append(self._required(self.sep_id, "SEP"))
        return out

    @staticmethod
    def _required(token: int, name: str) -> int:
        if token == TOKEN_NULL:
            raise ValueError(f"the vocab asks for a {name} token but has none")
        return token

    def _partition(self, data: bytes, special: bool) -> list[bytes | int]:
        """Raw fragments and special-token ids, in order (tokenizer_st_partition)."""
        fragments: list[bytes | int] = [data] if data else []
        for text, token, attr in self._specials:
            if (not special and attr & (CONTROL | UNKNOWN)) or text not in data:  # fragments are parts of data
                continue
            fragments = [piece for f in fragments
                         for piece in (_split_at(f, text, token, attr) if isinstance(f, bytes) else (f,))]
        return fragments

    # -- decoding ---------------------------------------------------------------------------

    def token_text(self, token: int) -> str:
        """The token's text as the vocabulary stores it (llama.cpp's llama_token_get_text)."""
        self._check(token)
        return self._texts[token]

    def same_vocabulary(self, other: "Tokenizer") -> bool:
        """Whether ids mean the same tokens in both."""
        return self._texts == other._texts

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token, as llama_token_to_piece(..., lstrip=0, special)."""
        self._check(token)
        return (self._pieces if special else self._plain_pieces)[token]

    def decode(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """As Llama.detokenize: the pieces joined, minus one leading space if the first token is BOS.

        Unlike Llama.detokenize, pieces longer than 32 bytes are kept (its buffer drops them).
        """
        text = b"".join(self.token_to_piece(t, special) for t in tokens)
        if len(tokens) and tokens[0] == self.bos_id and text.startswith(b" "):
            text = text[1:]
        return text

    # -- token classes ----------------------------------------------------------------------

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation (eos, eot, eom and the end-looking tokens)."""
        return token in self._eog

    def is_control(self, token: int) -> bool:
        self._check(token)
        return self._control[token]

    def _check(self, token: int) -> None:
        if not 0 <= token < self.n_vocab:
            raise IndexError(f"token id {token} is outside the vocab of {self.n_vocab} tokens")
