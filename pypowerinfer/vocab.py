"""A GGUF's vocabulary, read from its tokenizer.ggml.* keys as llama_vocab::impl::load reads
them: the token texts and attributes, the special-token roles and the end-of-generation set, and
the tokenizer model (byte-level BPE or SentencePiece) the vocabulary asks for.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .bpe import BytePairEncoder
from .pretokenizers import pre_tokenizer
from .spm import SentencePiece
from .wpm import WordPiece

log = logging.getLogger("pypowerinfer.tokenizer")  # the logger these warnings had before vocab.py split off

TOKEN_NULL = -1  # llama.cpp's LLAMA_TOKEN_NULL: "no such token"

# llama_token_attr bits.
UNDEFINED = 0
UNKNOWN = 1 << 0
UNUSED = 1 << 1
NORMAL = 1 << 2
CONTROL = 1 << 3
USER_DEFINED = 1 << 4
BYTE = 1 << 5
LSTRIP = 1 << 7
RSTRIP = 1 << 8

# tokenizer.ggml.token_type values 0..6 (llama_token_type) -> attribute; other values are UNDEFINED.
_TYPE_TO_ATTR = np.array([UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE], dtype=np.int64)

# tokenizer.ggml.model values llama.cpp knows but this module does not implement.
_UNSUPPORTED_MODELS = {
    "t5": "Unigram", "rwkv": "RWKV", "plamo2": "PLaMo-2", "hybriddna": "HybridDNA",
    "whitespace": "whitespace", "none": "no vocab", "no_vocab": "no vocab", "test": "test",
}

PREFIX = "tokenizer.ggml."

# (role, key) in llama.cpp's reading order; the deprecated prefix/suffix/middle keys come last.
_ID_KEYS = (
    ("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"), ("eom", "eom_token_id"),
    ("unk", "unknown_token_id"), ("sep", "seperator_token_id"), ("pad", "padding_token_id"),
    ("mask", "mask_token_id"), ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"), ("fim_rep", "fim_rep_token_id"),
    ("fim_sep", "fim_sep_token_id"), ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"),
    ("fim_mid", "middle_token_id"),
)

# Roles llama.cpp fills in by token text when the GGUF leaves them out. It takes the first hit in
# its hash map's order; we take the first text in its list (see tokenizer.py's docstring).
_ROLE_TEXTS = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
            "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# Token texts that end generation (and are forced to CONTROL).
_EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
))

# gpt-oss: always rendered, so llama.cpp makes them USER_DEFINED.
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def get_typed(meta: Mapping[str, object], key: str, kind: type | tuple[type, ...], default=None):
    value = meta.get(key, default)
    if value is not default and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ValueError(f"GGUF key {key!r} has type {type(value).__name__}, expected {kind}")
    return value


def _read_strings(meta: Mapping[str, object], name: str, missing: str) -> list[str]:
    values = meta.get(PREFIX + name)
    if values is None:
        raise ValueError(missing)
    if not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{PREFIX}{name} must be a list of strings")
    return list(values)


def read_tokens(meta: Mapping[str, object]) -> list[str]:
    tokens = _read_strings(meta, "tokens", f"GGUF has no {PREFIX}tokens: no vocabulary")
    # llama.cpp renames empty tokens so that every text is distinct.
    return [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]


def _read_array(meta: Mapping[str, object], name: str, n_tokens: int) -> np.ndarray | None:
    values = meta.get(PREFIX + name)
    if values is None:
        return None
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iuf" or len(values) < n_tokens:
        raise ValueError(f"{PREFIX}{name} must be a numeric array of at least {n_tokens} entries, "
                         f"got {values.dtype} with shape {values.shape}")
    return values[:n_tokens]


def read_attrs(meta: Mapping[str, object], n_tokens: int) -> list[int]:
    types = _read_array(meta, "token_type", n_tokens)
    if types is None:
        return [NORMAL] * n_tokens
    types = types.astype(np.int64)
    known = (types >= 0) & (types < len(_TYPE_TO_ATTR))
    return np.where(known, _TYPE_TO_ATTR[np.where(known, types, 0)], UNDEFINED).tolist()


def _read_scores(meta: Mapping[str, object], n_tokens: int) -> list[float]:
    scores = _read_array(meta, "scores", n_tokens)
    return [0.0] * n_tokens if scores is None else scores.astype(np.float32).tolist()


def _read_merges(meta: Mapping[str, object]) -> list[str]:
    return _read_strings(meta, "merges", f"byte-level BPE vocab without {PREFIX}merges")


@dataclass
class ModelSetup:
    """What the tokenizer model decides before the common part of loading."""
    model: BytePairEncoder | SentencePiece | WordPiece
    default_ids: dict[str, int]
    uses_space_prefix: bool  # SentencePiece: a space before text that starts or follows a special token
    add_bos: bool  # default of tokenizer.ggml.add_bos_token
    always_bos: bool = False
    # WordPiece: add_special means BOS ([CLS]) first and SEP last, whatever the add_* keys say
    sep_not_eos: bool = False


def setup_model(meta: Mapping[str, object], tokens: list[str], index: dict[str, int]) -> ModelSetup:
    kind = get_typed(meta, PREFIX + "model", str)
    if kind is None:
        raise ValueError(f"GGUF has no {PREFIX}model: no tokenizer")
    if kind == "llama":
        model = SentencePiece(tokens, _read_scores(meta, len(tokens)))
        return ModelSetup(model, {"bos": 1, "eos": 2, "unk": 0}, uses_space_prefix=True, add_bos=True)
    if kind in ("gpt2", "gemma4"):
        name = "gemma4" if kind == "gemma4" else get_typed(meta, PREFIX + "pre", str) or "default"
        pre = pre_tokenizer(name)
        if kind == "gemma4":
            defaults = {}
        else:
            defaults = {"eos": 11} if pre.no_bos else {"bos": 11, "eos": 11}
        model = BytePairEncoder(index, _read_merges(meta), pre)
        return ModelSetup(model, defaults, uses_space_prefix=False, add_bos=pre.add_bos, always_bos=pre.always_bos)
    if kind == "bert":
        defaults = {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103}  # BERT's own ids
        # BertNormalizer's options, on unless the file says otherwise; accents are stripped where
        # text is lowercased unless said otherwise
        lowercase = get_typed(meta, PREFIX + "normalizer.lowercase", bool, True)
        strip_accents = get_typed(meta, PREFIX + "normalizer.strip_accents", bool, lowercase)
        ids = read_ids(meta, defaults, len(tokens))
        return ModelSetup(WordPiece(tokens, ids["unk"], ids["pad"], lowercase, strip_accents), defaults,
                          uses_space_prefix=False,
                          add_bos=True, always_bos=True, sep_not_eos=True)
    if kind in _UNSUPPORTED_MODELS:
        raise NotImplementedError(f"tokenizer model {kind!r} ({_UNSUPPORTED_MODELS[kind]}) is not implemented; "
                                  "supported: 'gpt2' (byte-level BPE), 'gemma4', 'llama' (SentencePiece), "
                                  "'bert' (WordPiece)")
    raise ValueError(f"unknown tokenizer model {kind!r} ({PREFIX}model)")


def read_ids(meta: Mapping[str, object], defaults: dict[str, int], n_tokens: int) -> dict[str, int]:
    ids = {role: defaults.get(role, TOKEN_NULL) for role, _ in _ID_KEYS}
    ids = {role: i if i < n_tokens else TOKEN_NULL for role, i in ids.items()}
    for role, key in _ID_KEYS:
        value = get_typed(meta, PREFIX + key, (int, np.integer))
        if value is None:
            continue
        if 0 <= value < n_tokens:
            ids[role] = int(value)
        else:  # llama.cpp warns and keeps the default
            log.warning("%s%s = %d is outside the vocab of %d tokens; using %d", PREFIX, key, value, n_tokens,
                        ids[role])
    return ids


def find_roles(ids: dict[str, int], attrs: list[int], index: dict[str, int]) -> None:
    for role, texts in _ROLE_TEXTS.items():
        if ids[role] != TOKEN_NULL:
            continue
        found = next((index[t] for t in texts if t in index), None)
        if found is not None:
            ids[role] = found
            attrs[found] |= CONTROL


def eog_ids(ids: dict[str, int], attrs: list[int], tokens: list[str], index: dict[str, int]) -> set[int]:
    """The end-of-generation set; also applies the attribute fixes llama.cpp makes on the way."""
    eog = {ids[role] for role in ("fim_pad", "fim_rep", "fim_sep") if ids[role] != TOKEN_NULL}
    for text in _EOG_TEXTS & index.keys():
        eog.add(index[text])
        attrs[index[text]] |= CONTROL
    for text in _ALWAYS_RENDERED:
        if text in index:
            attrs[index[text]] = USER_DEFINED
    eog |= {ids[role] for role in ("eos", "eot", "eom") if ids[role] != TOKEN_NULL}
    texts = {tokens[i]: i for i in eog}
    # o200k_harmony / solar-open: "<|end|>" ends a message, not generation.
    calls = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and calls and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(texts["<|end|>"])
        attrs[texts["<|end|>"]] = USER_DEFINED
    # Gemma 4, PLaMo-2: "</s>" is an ordinary token.
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        eog.discard(texts["</s>"])
        attrs[texts["</s>"]] = NORMAL
    return eog


def add_strip_attrs(meta: Mapping[str, object], attrs: list[int], index: dict[str, int],
                     specials: list[int]) -> None:
    """Per-model lstrip/rstrip rules, keyed on names as llama.cpp keys them (GGUF has no field)."""
    name = str(meta.get("general.name", "")).encode().lower().decode()  # ASCII-only, like std::tolower
    pre = str(meta.get(PREFIX + "pre", ""))
    arch = str(meta.get("general.architecture", ""))

    def set_attr(text: str, attr: int, on: bool = True) -> None:
        if text in index:
            attrs[index[text]] = attrs[index[text]] | attr if on else attrs[index[text]] & ~attr

    if any(p in pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or \
            any(a in arch for a in ("nomic-bert-moe", "jina-bert-v3")):
        set_attr("<mask>", LSTRIP)
    elif "phi-3" in name or "phi3" in name:
        for i in specials:
            attrs[i] |= RSTRIP
        set_attr("</s>", RSTRIP)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            set_attr(text, RSTRIP, on=False)
    elif "modern-bert" in name:
        set_attr("[MASK]", LSTRIP)
