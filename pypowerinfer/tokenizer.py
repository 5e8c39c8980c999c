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
       bytes are mapped to GPT-2's printable characters and merged by lowest merge rank.

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

import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import regex

log = logging.getLogger(__name__)

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

_ESCAPED_SPACE = "\u2581".encode()  # SentencePiece's visible space
_C_SPACE = b" \t\n\v\f\r"  # C isspace() in the "C" locale: what lstrip/rstrip strip

# ---------------------------------------------------------------------------------------------
# Pre-tokenizer regexes (llama-vocab.cpp, llm_tokenizer_bpe), applied in order: each regex cuts
# every piece left by the previous one into matches and the gaps between them.

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_NEWLINE_RUNS = r"[^\n]+|[\n]+"
# Non-ASCII classes are spelled with escapes: a copy through an editor may normalize them.
_CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_DEEPSEEK3 = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
              "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_GPT4O_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-"
    "\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113"
    "\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149"
    "\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-"
    "\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_DEEPSEEK_HAN_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_YOUTU_UPPER, _YOUTU_LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_YOUTU_WORDS = (rf"[^\r\n\p{{L}}\p{{N}}]?{_YOUTU_UPPER}*{_YOUTU_LOWER}+{_CONTRACTIONS}?"
                rf"|[^\r\n\p{{L}}\p{{N}}]?{_YOUTU_UPPER}+{_YOUTU_LOWER}*{_CONTRACTIONS}?"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_YOUTU_CJK = ("[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
              "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|" + _CJK_KANA)


def _cased_words(suffix: str, letter: str = r"\p{L}") -> str:
    # Tekken / GPT-4o words: upper-case letters then lower-case ones, or the reverse, with
    # [^a-z] / [^A-Z] under a letter lookahead standing in for \p{Lu} / \p{Ll} (llama.cpp's form).
    upper, lower, lead = rf"((?=[{letter}])([^a-z]))", rf"((?=[{letter}])([^A-Z]))", r"[^\r\n\p{L}\p{N}]?"
    return f"{lead}{upper}*{lower}+{suffix}|{lead}{upper}+{lower}*{suffix}"


@dataclass(frozen=True)
class _PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is itself a token skips BPE
    add_bos: bool = False  # default of tokenizer.ggml.add_bos_token
    no_bos: bool = False  # the BOS id defaults to none
    spm_style: bool = False  # raw UTF-8 symbols, spaces as U+2581, <0xXX> byte fallback
    whole_newline_runs: bool = False  # a run of newlines that is a token stays one (Gemma 4)
    always_bos: bool = False  # BOS is added whatever tokenizer.ggml.add_bos_token says (Gemma 4)


def _pre(*regexes: str, **flags: bool) -> _PreTokenizer:
    return _PreTokenizer(tuple(regexes), **flags)


_LLAMA3_PRE = _pre(_LLAMA3, ignore_merges=True, add_bos=True)
_GPT2_PRE = _pre(_GPT2)
_STARCODER_PRE = _pre(r"\p{N}", _GPT2)
_QWEN2_PRE = _pre(_QWEN2)
_GEMMA4_PRE = _pre(_NEWLINE_RUNS, spm_style=True, whole_newline_runs=True, always_bos=True)
_GPT4O_PRE = _pre(_cased_words(_CONTRACTIONS + "?") + r"|\p{N}{1,3}" + _GPT4O_TAIL)


def _aliases(pre: _PreTokenizer, *names: str) -> dict[str, _PreTokenizer]:
    return dict.fromkeys(names, pre)


# tokenizer.ggml.pre -> pre-tokenizer, as llama_vocab::impl::load maps the names.
_PRE_TOKENIZERS: dict[str, _PreTokenizer] = {
    "default": _pre(r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    **_aliases(_LLAMA3_PRE, "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
               "midm-2.0", "lfm2", "jina-v5-nano"),
    **_aliases(_pre(_LLAMA3), "dbrx", "smaug-bpe"),
    **_aliases(_GPT2_PRE, "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
               "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt",
               "olmo", "jais", "trillion", "granite-docling", "exaone4"),
    **_aliases(_STARCODER_PRE, "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
               "minerva-7b", "mellum2"),
    **_aliases(_QWEN2_PRE, "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2",
               "hunyuan", "solar-open"),
    "qwen35": _pre(_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "jais-2": _pre(_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                   + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4, "1,2")) + r"|\s{1}"),
    "deepseek-llm": _pre("[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCT, r"\s+$", _DEEPSEEK_HAN_HANGUL, r"\p{N}+"),
    **_aliases(_pre(r"\p{N}{1,3}", _CJK_KANA, _DEEPSEEK3), "deepseek-v3", "hunyuan-dense", "hy_v4",
               "joyai-llm"),
    "spark2_5": _pre(r"\p{N}{1,3}", _CJK_KANA, _DEEPSEEK3.replace("[\r\n]*|\\s*[\r\n]+", "|[\r\n]"), r"\p{N}"),
    "youtu": _pre(_YOUTU_CJK, _YOUTU_WORDS, ignore_merges=True),
    "deepseek-coder": _pre("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_HAN_HANGUL, r"\p{N}"),
    "falcon": _pre(r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"),
    **_aliases(_pre(_BLOOM), "poro-chat", "bloom", "gpt3-finnish"),
    "viking": _pre(_BLOOM, r"\p{N}"),
    "chatglm-bpe": _pre(_LLAMA3, no_bos=True),
    **_aliases(_pre(_LLAMA3, no_bos=True, ignore_merges=True), "glm4", "glm5"),
    "tekken": _pre(_cased_words("") + r"|\p{N}" + _GPT4O_TAIL, ignore_merges=True, add_bos=True),
    "chameleon": _pre("<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
                      r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", _GPT2, add_bos=True),
    **_aliases(_GPT4O_PRE, "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"),
    "granite-embed-multi-97m": _pre(_cased_words(_CONTRACTIONS + "?", r"\p{L}\p{M}") + r"|\p{N}{1,3}" + _GPT4O_TAIL,
                                    ignore_merges=True),
    # std::regex's \d is ASCII-only; the `regex` module's is not.
    "superbpe": _pre(r"\p{N}+", "(?=([0-9]{3})+(?![0-9]))"),
    **_aliases(_pre(r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"), "bailingmoe", "bailingmoe2", "llada-moe"),
    "seed-coder": _pre(_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                       r"|\s+(?!\S)|\s+"),
    "ufakzeka": _pre(_QWEN2[len(_CONTRACTIONS) + 1:]),
    "grok-2": _QWEN2_PRE,
    "laguna": _pre(_NEWLINE_RUNS, _QWEN2),
    "exaone-moe": _pre(_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                       r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"),
    **_aliases(_GEMMA4_PRE, "gemma4", "granite-embed-multi-311m"),
    "sarvam-moe": _pre(_NEWLINE_RUNS, spm_style=True),
    "minicpm5": _pre(r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                     r"|\s*[\r\n]+|\s+(?!\S)|\s+", ignore_merges=True),
}

# Pre-tokenizers llama.cpp implements with hand-written code that has no plain-regex equivalent.
_UNSUPPORTED_PRE = {"kimi-k2", "afmoe", "tiny_aya", "cohere2moe", "whitespace"}

# tokenizer.ggml.model values llama.cpp knows but this module does not implement.
_UNSUPPORTED_MODELS = {
    "bert": "WordPiece", "t5": "Unigram", "rwkv": "RWKV", "plamo2": "PLaMo-2", "hybriddna": "HybridDNA",
    "whitespace": "whitespace", "none": "no vocab", "no_vocab": "no vocab", "test": "test",
}

# Code points assigned in Unicode 16.0/17.0 (which the `regex` module knows); llama.cpp's
# tables are Unicode 15.1 and call them unassigned, so \p{..} must not match them.
_UNICODE_16_17 = regex.compile("[" + "".join(
    f"\\U{int(lo, 16):08X}-\\U{int(hi or lo, 16):08X}"
    for lo, _, hi in (item.partition("-") for item in """
    558 58B-58C 5C8-5C9 88F 897 B53-B54 C5C CDC 1ACF-1AF0 1B4E-1B4F 1B7F 1C89-1C8A 208F 209D-209F
    20C1-20C4 2427-2429 2B96 2E60-2E63 31E4-31E5 A7CB-A7CF A7D2 A7D4 A7DA-A7DD A7E2 A7F1 AB6C-AB6D
    FBC3-FBD2 FD90-FD91 FDC8-FDCE 105C0-105F3 107BB-107BF 10940-10959 10D40-10D65 10D69-10D85
    10D8E-10D8F 10EC2-10EC7 10EC9-10EEE 10EF0-10EFC 11380-11389 1138B 1138E 11390-113B5 113B7-113C0
    113C2 113C5 113C7-113CA 113CC-113D5 113D7-113D8 113E1-113E2 116D0-116E3 11B0A 11B60-11B67
    11BC0-11BE1 11BF0-11BF9 11DB0-11DDB 11DE0-11DE9 11DF0-11DF1 11F5A 1246F 12475-1247F 12550-12686
    13460-143FA 16100-16139 16D40-16D79 16EA0-16EB8 16EBB-16ED3 16FF2-16FF6 187F8-187FF 18CD6-18CDA
    18CFF 18D09-18D20 18D80-18DF2 18E00-19191 191A0-191D2 1B123-1B128 1B168 1CC00-1CCFC 1CD00-1CEB3
    1CEBA-1CED0 1CED2-1CED4 1CEDD-1CEFD 1D127-1D128 1D1EB-1D1FF 1D250-1D281 1D6A6 1DB00-1DB1C
    1DF1F-1DF24 1DF2B-1DF81 1DF90-1DF96 1DFCD-1DFFF 1E5D0-1E5FA 1E5FF 1E6C0-1E6DE 1E6E0-1E6F5
    1E6FE-1E6FF 1F1AE 1F6D8-1F6D9 1F777-1F77A 1F7DA-1F7DB 1F7F1-1F7FF 1F8B2-1F8BB 1F8C0-1F8C1
    1F8D0-1F8D8 1FA54-1FA57 1FA89-1FA8F 1FABE 1FAC6 1FAC8 1FACC-1FACD 1FADC-1FADD 1FADF 1FAE9-1FAEB
    1FAEF 1FAF9-1FAFA 1FBCB-1FBEF 1FBFA 2B73A-2B73F 2B81E 2CEA2-2CEAD 323B0-33479 3D000-3FC3F
    """.split())) + "]")
_UNASSIGNED = "\ufdd0"  # a noncharacter: unassigned in every Unicode version
_NON_ASCII_SPACE = regex.compile(r"[^\x00-\x7f\S]")  # neither ASCII nor non-space


def _to_python_regex(expr: str) -> str:
    # llama.cpp collapses \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo} into one "letter" class.
    return regex.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", expr)


class _Splitter:
    """llama.cpp's unicode_regex_split for a list of pre-tokenizer regexes (without byte mapping).

    llama.cpp runs regexes with \\p{..} over text whose non-ASCII code points are collapsed
    to one byte per category, and others over the code points themselves; in both, non-ASCII
    whitespace first becomes \\v. Running the `regex` module over text with the same two
    substitutions (both one character for one) matches the same spans.
    """

    def __init__(self, regexes: Sequence[str]):
        self._patterns = [(regex.compile(_to_python_regex(r)), r"\p{" in r) for r in regexes]

    def split(self, text: str) -> list[str]:
        plain = _NON_ASCII_SPACE.sub("\v", text)
        categorized = _UNICODE_16_17.sub(_UNASSIGNED, plain)
        spans = [(0, len(text))] if text else []
        for pattern, uses_categories in self._patterns:
            subject = categorized if uses_categories else plain
            spans = [piece for start, end in spans for piece in self._cut(pattern, subject, start, end)]
        return [text[start:end] for start, end in spans]

    @staticmethod
    def _cut(pattern: regex.Pattern, subject: str, start: int, end: int) -> list[tuple[int, int]]:
        # Matches and the gaps between them; endpos makes lookaheads stop at the piece's end.
        pieces = []
        pos = start
        for match in pattern.finditer(subject, start, end):
            lo, hi = match.span()
            if lo > pos:
                pieces.append((pos, lo))
            if hi > lo:
                pieces.append((lo, hi))
            pos = hi
        if pos < end:
            pieces.append((pos, end))
        return pieces


# ---------------------------------------------------------------------------------------------
# UTF-8 as llama.cpp reads it (unicode_cpts_from_utf8).

def _decode_utf8(data: bytes) -> str:
    """Decode as llama.cpp does: each byte that does not start a complete sequence becomes U+FFFD.

    Unlike Python it accepts overlong forms and surrogates (kept as lone surrogates, which
    'surrogatepass' writes back as the same bytes).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(map(chr, _lenient_code_points(data)))


def _lenient_code_points(data: bytes) -> list[int]:
    out = []
    i, n = 0, len(data)
    while i < n:
        lead = data[i]
        size, cpt = (1, lead) if lead < 0x80 else (2, lead & 0x1F) if 0xC0 <= lead < 0xE0 else \
            (3, lead & 0x0F) if 0xE0 <= lead < 0xF0 else (4, lead & 0x07) if 0xF0 <= lead < 0xF8 else (0, 0)
        tail = data[i + 1:i + size]
        if size == 0 or len(tail) < size - 1 or any(b & 0xC0 != 0x80 for b in tail):
            out.append(0xFFFD)  # a stray continuation byte, a bad lead byte or a cut-off sequence
            i += 1
            continue
        for b in tail:
            cpt = cpt << 6 | b & 0x3F
        out.append(cpt if cpt <= 0x10FFFF else 0xFFFD)  # llama.cpp throws on the latter
        i += size
    return out


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _gpt2_byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256+n."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return [chars[b] for b in range(256)]


_BYTE_CHARS = _gpt2_byte_chars()
_CHAR_BYTES = {c: b for b, c in enumerate(_BYTE_CHARS)}
_BYTES_TO_CHARS = str.maketrans({chr(b): c for b, c in enumerate(_BYTE_CHARS)})  # on latin-1 text
_CHARS_TO_BYTES = str.maketrans({c: chr(b) for c, b in _CHAR_BYTES.items()})  # back to latin-1
_NOT_BYTE_CHAR = regex.compile("[^" + regex.escape("".join(_BYTE_CHARS)) + "]")


def _token_bytes(text: str) -> bytes:
    # Token strings carry undecodable GGUF bytes as surrogateescape code points.
    return text.encode("utf-8", "surrogateescape")


def _unescape_spaces(text: str) -> bytes:
    return _token_bytes(text).replace(_ESCAPED_SPACE, b" ")


def _merge_pairs(symbols: list, priority) -> list:
    """Merge adjacent symbols until no pair has a priority; smallest key first, leftmost on ties.

    This is the priority queue both llama.cpp tokenizers run: `priority(left, right)` gives the
    key of merging two neighbours (or None if they do not merge). Queue entries go stale when a
    side is merged away or grows; they are recognised by their merged text and skipped.
    """
    n = len(symbols)
    nxt = [*range(1, n), -1]
    prv = list(range(-1, n - 1))
    queue: list = []

    def push(left: int, right: int) -> None:
        key = priority(symbols[left], symbols[right])
        if key is not None:
            heapq.heappush(queue, (key, left, right, symbols[left] + symbols[right]))

    for i in range(n - 1):
        push(i, i + 1)
    while queue:
        _, left, right, merged = heapq.heappop(queue)
        if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != merged:
            continue
        symbols[left], symbols[right] = merged, symbols[right][:0]  # "" or b""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        if prv[left] >= 0:
            push(prv[left], left)
        if after >= 0:
            push(left, after)
    return [s for s in symbols if s]


_CACHE_LIMIT = 1 << 18  # words; the cache starts over when full


def _encode_words(words: list, cache: dict, encode_word) -> list[int]:
    """Concatenated ids of the words, each encoded once: real text repeats its words."""
    out: list[int] = []
    for word in words:
        ids = cache.get(word)
        if ids is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            ids = cache[word] = encode_word(word)
        out.extend(ids)
    return out


# ---------------------------------------------------------------------------------------------
# The two models. Each turns a raw-text fragment into ids and says how a NORMAL token reads.

class _BytePairEncoder:
    """Byte-level BPE (llm_tokenizer_bpe_session)."""

    def __init__(self, ids: dict[str, int], merges: Sequence[str], pre: _PreTokenizer):
        self._ids = ids
        # Keyed by the merge line "left right": the first space after the first character
        # splits it, as in llama.cpp, and symbols never hold a raw space (spaces are mapped
        # to 'Ġ' or U+2581), so "left right" is unambiguous. The first of duplicates wins.
        self._ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        self._pre = pre
        self._splitter = _Splitter(pre.regexes)
        self._byte_ids = [self._ids.get(self._byte_token_text(b)) for b in range(256)]
        self._cache: dict[str, list[int]] = {}

    def _byte_token_text(self, byte: int) -> str:
        # A symbol without a token falls back to these, byte by byte (missing ones are dropped).
        if self._pre.spm_style:
            return f"<0x{byte:02X}>"
        return bytes([byte]).decode("utf-8", "surrogateescape")

    def encode(self, fragment: bytes) -> list[int]:
        if self._pre.spm_style:
            fragment = fragment.replace(b" ", _ESCAPED_SPACE)
        return _encode_words(self._splitter.split(_decode_utf8(fragment)), self._cache, self._encode_word)

    def _encode_word(self, word: str) -> list[int]:
        raw = word.encode("utf-8", "surrogatepass")
        text = word if self._pre.spm_style else raw.decode("latin-1").translate(_BYTES_TO_CHARS)
        whole = self._ids.get(text)
        if whole is not None and (self._pre.ignore_merges or
                                  (self._pre.whole_newline_runs and not text.strip("\n"))):
            return [whole]
        ids = []
        for symbol in _merge_pairs(list(text), self._priority):
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
            return _unescape_spaces(text)
        if not _NOT_BYTE_CHAR.search(text):
            return text.translate(_CHARS_TO_BYTES).encode("latin-1")
        # llama_decode_text: a character outside the byte map is spelled out, whole token after it.
        raw = _token_bytes(text)
        return b"".join(
            bytes([_CHAR_BYTES[c]]) if c in _CHAR_BYTES
            else b"[UNK_BYTE_0x" + c.encode("utf-8", "surrogatepass").hex().encode() + raw + b"]"
            for c in _decode_utf8(raw))

    def newline_id(self) -> int | None:
        ids = self.encode(b"\n")
        return ids[0] if ids else None


class _SentencePiece:
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
        self._ids = {_token_bytes(text): i for i, text in enumerate(tokens)}
        self._scores = scores
        self._byte_ids = [self._ids.get(b"<0x%02X>" % b, self._ids.get(bytes([b]))) for b in range(256)]
        inner_space = regex.compile("[^\u2581]\u2581")
        self._words_merge_alone = not any("\u2581" in t[1:] and inner_space.search(t) for t in tokens)
        self._cache: dict[bytes, list[int]] = {}

    def encode(self, fragment: bytes) -> list[int]:
        text = fragment.replace(b" ", _ESCAPED_SPACE)
        if self._words_merge_alone and _is_utf8(text):
            return _encode_words(self._WORD.findall(text), self._cache, self._encode_symbols)
        return self._encode_symbols(text)

    def _encode_symbols(self, text: bytes) -> list[int]:
        ids = []
        for symbol in _merge_pairs(self._SYMBOL.findall(text), self._priority):
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
        return _unescape_spaces(text)

    def newline_id(self) -> int | None:
        return self._byte_ids[ord("\n")]


# ---------------------------------------------------------------------------------------------
# Vocab metadata, read as llama_vocab::impl::load reads it.

_PREFIX = "tokenizer.ggml."

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
# its hash map's order; we take the first text in its list (see the module docstring).
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


def _get(meta: Mapping[str, object], key: str, kind: type | tuple[type, ...], default=None):
    value = meta.get(key, default)
    if value is not default and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ValueError(f"GGUF key {key!r} has type {type(value).__name__}, expected {kind}")
    return value


def _read_strings(meta: Mapping[str, object], name: str, missing: str) -> list[str]:
    values = meta.get(_PREFIX + name)
    if values is None:
        raise ValueError(missing)
    if not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{_PREFIX}{name} must be a list of strings")
    return list(values)


def _read_tokens(meta: Mapping[str, object]) -> list[str]:
    tokens = _read_strings(meta, "tokens", f"GGUF has no {_PREFIX}tokens: no vocabulary")
    # llama.cpp renames empty tokens so that every text is distinct.
    return [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]


def _read_array(meta: Mapping[str, object], name: str, n_tokens: int) -> np.ndarray | None:
    values = meta.get(_PREFIX + name)
    if values is None:
        return None
    values = np.asarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iuf" or len(values) < n_tokens:
        raise ValueError(f"{_PREFIX}{name} must be a numeric array of at least {n_tokens} entries, "
                         f"got {values.dtype} with shape {values.shape}")
    return values[:n_tokens]


def _read_attrs(meta: Mapping[str, object], n_tokens: int) -> list[int]:
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
    return _read_strings(meta, "merges", f"byte-level BPE vocab without {_PREFIX}merges")


def _pre_tokenizer(name: str) -> _PreTokenizer:
    if name in _UNSUPPORTED_PRE:
        raise NotImplementedError(f"BPE pre-tokenizer {name!r} ({_PREFIX}pre) is not implemented")
    if name not in _PRE_TOKENIZERS:
        raise ValueError(f"unknown BPE pre-tokenizer {name!r} ({_PREFIX}pre)")
    return _PRE_TOKENIZERS[name]


@dataclass
class _Setup:
    """What the tokenizer model decides before the common part of loading."""
    model: _BytePairEncoder | _SentencePiece
    default_ids: dict[str, int]
    uses_space_prefix: bool  # SentencePiece: a space before text that starts or follows a special token
    add_bos: bool  # default of tokenizer.ggml.add_bos_token
    always_bos: bool = False


def _setup_model(meta: Mapping[str, object], tokens: list[str], index: dict[str, int]) -> _Setup:
    kind = _get(meta, _PREFIX + "model", str)
    if kind is None:
        raise ValueError(f"GGUF has no {_PREFIX}model: no tokenizer")
    if kind == "llama":
        model = _SentencePiece(tokens, _read_scores(meta, len(tokens)))
        return _Setup(model, {"bos": 1, "eos": 2, "unk": 0}, uses_space_prefix=True, add_bos=True)
    if kind in ("gpt2", "gemma4"):
        name = "gemma4" if kind == "gemma4" else _get(meta, _PREFIX + "pre", str) or "default"
        pre = _pre_tokenizer(name)
        if kind == "gemma4":
            defaults = {}
        else:
            defaults = {"eos": 11} if pre.no_bos else {"bos": 11, "eos": 11}
        model = _BytePairEncoder(index, _read_merges(meta), pre)
        return _Setup(model, defaults, uses_space_prefix=False, add_bos=pre.add_bos, always_bos=pre.always_bos)
    if kind in _UNSUPPORTED_MODELS:
        raise NotImplementedError(f"tokenizer model {kind!r} ({_UNSUPPORTED_MODELS[kind]}) is not implemented; "
                                  "supported: 'gpt2' (byte-level BPE), 'gemma4', 'llama' (SentencePiece)")
    raise ValueError(f"unknown tokenizer model {kind!r} ({_PREFIX}model)")


def _read_ids(meta: Mapping[str, object], defaults: dict[str, int], n_tokens: int) -> dict[str, int]:
    ids = {role: defaults.get(role, TOKEN_NULL) for role, _ in _ID_KEYS}
    ids = {role: i if i < n_tokens else TOKEN_NULL for role, i in ids.items()}
    for role, key in _ID_KEYS:
        value = _get(meta, _PREFIX + key, (int, np.integer))
        if value is None:
            continue
        if 0 <= value < n_tokens:
            ids[role] = int(value)
        else:  # llama.cpp warns and keeps the default
            log.warning("%s%s = %d is outside the vocab of %d tokens; using %d", _PREFIX, key, value, n_tokens,
                        ids[role])
    return ids


def _find_roles(ids: dict[str, int], attrs: list[int], index: dict[str, int]) -> None:
    for role, texts in _ROLE_TEXTS.items():
        if ids[role] != TOKEN_NULL:
            continue
        found = next((index[t] for t in texts if t in index), None)
        if found is not None:
            ids[role] = found
            attrs[found] |= CONTROL


def _eog_ids(ids: dict[str, int], attrs: list[int], tokens: list[str], index: dict[str, int]) -> set[int]:
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


def _add_strip_attrs(meta: Mapping[str, object], attrs: list[int], index: dict[str, int],
                     specials: list[int]) -> None:
    """Per-model lstrip/rstrip rules, keyed on names as llama.cpp keys them (GGUF has no field)."""
    name = str(meta.get("general.name", "")).encode().lower().decode()  # ASCII-only, like std::tolower
    pre = str(meta.get(_PREFIX + "pre", ""))
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
        tokens = _read_tokens(meta)
        index = {text: i for i, text in enumerate(tokens)}
        if len(index) != len(tokens):
            raise ValueError(f"{_PREFIX}tokens holds {len(tokens) - len(index)} duplicate token texts")
        setup = _setup_model(meta, tokens, index)
        self._model = setup.model
        self._texts = tokens
        self.n_vocab = len(tokens)
        newline = self._model.newline_id()  # llama.cpp's fallback, the pad id, is not read yet here
        self.nl_id = TOKEN_NULL if newline is None else newline
        ids = _read_ids(meta, setup.default_ids, len(tokens))
        self.add_bos: bool = setup.always_bos or _get(meta, _PREFIX + "add_bos_token", bool, setup.add_bos)
        self.add_eos: bool = _get(meta, _PREFIX + "add_eos_token", bool, False)
        self._space_prefix = setup.uses_space_prefix and _get(meta, _PREFIX + "add_space_prefix", bool, True)

        attrs = _read_attrs(meta, len(tokens))
        _find_roles(ids, attrs, index)
        self._eog = frozenset(_eog_ids(ids, attrs, tokens, index))
        self.bos_id, self.eos_id, self.eot_id, self.eom_id, self.unk_id, self.pad_id = (
            ids[role] for role in ("bos", "eos", "eot", "eom", "unk", "pad"))

        self._pieces = [self._piece(text, attr) for text, attr in zip(tokens, attrs)]
        hidden = UNKNOWN | CONTROL  # shown only when special=True
        self._plain_pieces = [b"" if attr & hidden else piece for piece, attr in zip(self._pieces, attrs)]
        self._control = [bool(attr & CONTROL) for attr in attrs]

        special_ids = [i for i, attr in enumerate(attrs) if attr & (CONTROL | USER_DEFINED | UNKNOWN)]
        special_ids.sort(key=lambda i: -len(_token_bytes(tokens[i])))  # longest first; ties by id
        _add_strip_attrs(meta, attrs, index, special_ids)
        self._specials = [(_token_bytes(tokens[i]), i, attrs[i]) for i in special_ids]

    @classmethod
    def from_metadata(cls, meta: Mapping[str, object]) -> Tokenizer:
        """From GGUF metadata: key -> str/int/float/bool, list[str] for string arrays, numpy arrays
        for numeric ones. ValueError for missing or inconsistent keys, NotImplementedError for a
        tokenizer model or pre-tokenizer llama.cpp has but this module does not."""
        return cls(meta)

    def _piece(self, text: str, attr: int) -> bytes:
        """A token's text as llama.cpp renders it with special=True (token_to_piece)."""
        if attr & (UNKNOWN | CONTROL | USER_DEFINED):
            return _token_bytes(text)
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
