"""Pre-tokenizers: the regexes llama.cpp (llama-vocab.cpp, llm_tokenizer_bpe) cuts text with
before byte-level BPE, by tokenizer.ggml.pre, and `Splitter`, which applies them as llama.cpp's
unicode_regex_split does: in order, each regex cutting every piece left by the previous one into
matches and the gaps between them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import regex

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
class PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is itself a token skips BPE
    add_bos: bool = False  # default of tokenizer.ggml.add_bos_token
    no_bos: bool = False  # the BOS id defaults to none
    spm_style: bool = False  # raw UTF-8 symbols, spaces as U+2581, <0xXX> byte fallback
    whole_newline_runs: bool = False  # a run of newlines that is a token stays one (Gemma 4)
    always_bos: bool = False  # BOS is added whatever tokenizer.ggml.add_bos_token says (Gemma 4)


def _pre(*regexes: str, **flags: bool) -> PreTokenizer:
    return PreTokenizer(tuple(regexes), **flags)


_LLAMA3_PRE = _pre(_LLAMA3, ignore_merges=True, add_bos=True)
_GPT2_PRE = _pre(_GPT2)
_STARCODER_PRE = _pre(r"\p{N}", _GPT2)
_QWEN2_PRE = _pre(_QWEN2)
_GEMMA4_PRE = _pre(_NEWLINE_RUNS, spm_style=True, whole_newline_runs=True, always_bos=True)
_GPT4O_PRE = _pre(_cased_words(_CONTRACTIONS + "?") + r"|\p{N}{1,3}" + _GPT4O_TAIL)


def _aliases(pre: PreTokenizer, *names: str) -> dict[str, PreTokenizer]:
    return dict.fromkeys(names, pre)


# tokenizer.ggml.pre -> pre-tokenizer, as llama_vocab::impl::load maps the names.
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
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


def pre_tokenizer(name: str) -> PreTokenizer:
    if name in _UNSUPPORTED_PRE:
        raise NotImplementedError(f"BPE pre-tokenizer {name!r} (tokenizer.ggml.pre) is not implemented")
    if name not in PRE_TOKENIZERS:
        raise ValueError(f"unknown BPE pre-tokenizer {name!r} (tokenizer.ggml.pre)")
    return PRE_TOKENIZERS[name]


# Code points assigned in Unicode 16.0/17.0 (which the `regex` module knows); llama.cpp's
# tables are Unicode 15.1 and call them unassigned, so \p{..} must not match them.
UNICODE_16_17 = regex.compile("[" + "".join(
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


class Splitter:
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
        categorized = UNICODE_16_17.sub(_UNASSIGNED, plain)
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
