"""pypowerinfer.tokenizer against llama.cpp: its own test vectors and llama-cpp-python itself.

Oracles:
  1. tests/fixtures/vocab/ggml-vocab-*.gguf{,.inp,.out}: llama.cpp's tokenizer test vectors
     (scripts/fetch_fixtures.sh fetches them); tokenized without BOS, without special parsing.
  2. llama-cpp-python 0.3.36 on the same vocab: tokenize, token_to_piece, detokenize, EOG.
Small synthetic vocabs cover the rules that need no fixture.
"""
from __future__ import annotations

import ctypes
import importlib.util
import mmap
import os
import random
import struct
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType


def _load_tokenizer_modules():
    # This checkout's sources, whichever pypowerinfer is installed, under a name of their own; the
    # tokenizer's modules need no native library (the package opens it only for names that do).
    root = Path(__file__).resolve().parents[1] / "pypowerinfer"
    spec = importlib.util.spec_from_file_location("pypowerinfer_under_test", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return [importlib.import_module(f"{spec.name}.{name}") for name in ("tokenizer", "bpe", "pretokenizers")]


tokenizer, bpe, pretokenizers = _load_tokenizer_modules()
Tokenizer = tokenizer.Tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vocab"
REQUIRED_FIXTURES = ("gpt-2", "llama-bpe", "llama-spm", "qwen2", "phi-3")
# Fixture vocabs whose tokenizer model this module does not implement.
KNOWN_UNSUPPORTED = {
    "nomic-bert-moe": "tokenizer model 't5' (Unigram) is not implemented",
}
CASE_SEPARATOR = b"\n__ggml_vocab_test__\n"


# --- GGUF metadata ---------------------------------------------------------------------------

_STRUCT = {GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H",
           GGUFValueType.INT16: "h", GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
           GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "Q",
           GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d"}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # what Tokenizer expects for undecodable tokens


def reader_meta(path: Path) -> dict[str, object]:
    """The `meta` mapping Tokenizer.from_metadata takes, from gguf.GGUFReader's fields."""
    meta: dict[str, object] = {}
    for key, field in GGUFReader(path).fields.items():
        parts = [field.parts[i] for i in field.data]
        if field.types[0] == GGUFValueType.ARRAY and field.types[-1] == GGUFValueType.STRING:
            meta[key] = [_text(p.tobytes()) for p in parts]
        elif field.types[0] == GGUFValueType.ARRAY:
            meta[key] = np.concatenate(parts) if parts else np.array([])
        elif field.types[0] == GGUFValueType.STRING:
            meta[key] = _text(parts[0].tobytes())
        else:
            meta[key] = parts[0][0].item()
    return {k: v for k, v in meta.items() if not k.startswith("GGUF.")}


@lru_cache(maxsize=None)
def fast_meta(path: Path) -> dict[str, object]:
    """The same mapping from the GGUF key/value section directly.

    GGUFReader maps every array element separately, 10-20 s for the big fixture vocabs; this
    reads only the header, in well under a second. test_fast_meta_matches_gguf_reader keeps
    it honest.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        _, _, _, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
        pos = 24

        def take(fmt: str):
            nonlocal pos
            values = struct.unpack_from("<" + fmt, buf, pos)
            pos += struct.calcsize("<" + fmt)
            return values[0] if len(values) == 1 else values

        def string() -> str:
            nonlocal pos
            n = take("Q")
            pos += n
            return _text(buf[pos - n:pos])

        def value(kind: int):
            return string() if kind == GGUFValueType.STRING else take(_STRUCT[GGUFValueType(kind)])

        meta: dict[str, object] = {}
        for _ in range(n_kv):
            key, kind = string(), take("I")
            if kind != GGUFValueType.ARRAY:
                meta[key] = value(kind)
                continue
            item, n = take("IQ")
            if item == GGUFValueType.STRING:
                meta[key] = [string() for _ in range(n)]
            else:
                dtype = np.dtype("<" + _STRUCT[GGUFValueType(item)])
                meta[key] = np.frombuffer(buf, dtype, n, pos).copy()
                pos += dtype.itemsize * n
    return meta


def _same_meta(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a)


# --- fixtures --------------------------------------------------------------------------------

def _vocab_names() -> list[str]:
    return sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in FIXTURES.glob("ggml-vocab-*.gguf"))


def _fixture_names() -> list[str]:
    """The vocabs that come with test vectors."""
    return [n for n in _vocab_names()
            if all(_vocab_path(n).with_suffix(".gguf" + ext).exists() for ext in (".inp", ".out"))]


def _missing_fixtures(what: str) -> None:
    if os.environ.get("PI_REQUIRE_FIXTURES") == "1":
        pytest.fail(f"{what} missing from {FIXTURES}: run scripts/fetch_fixtures.sh")
    pytest.skip(f"{what} not in {FIXTURES} (run scripts/fetch_fixtures.sh)")


def _vocab_path(name: str) -> Path:
    return FIXTURES / f"ggml-vocab-{name}.gguf"


@lru_cache(maxsize=None)
def fixture_tokenizer(name: str) -> Tokenizer:
    if name in KNOWN_UNSUPPORTED:
        with pytest.raises(NotImplementedError):  # still unsupported, so the skip is still right
            Tokenizer.from_metadata(fast_meta(_vocab_path(name)))
        pytest.skip(f"{name}: {KNOWN_UNSUPPORTED[name]}")
    return Tokenizer.from_metadata(fast_meta(_vocab_path(name)))


def read_cases(name: str) -> list[tuple[bytes, list[int]]]:
    """The (text, ids) pairs, split as llama.cpp's test-tokenizer-0 splits them."""
    raw = _vocab_path(name).with_suffix(".gguf.inp").read_bytes()
    texts = raw.split(CASE_SEPARATOR)
    if raw.endswith(CASE_SEPARATOR):
        texts.pop()
    lines = _vocab_path(name).with_suffix(".gguf.out").read_text().split("\n")
    if lines[-1] == "":
        lines.pop()
    assert len(texts) == len(lines), f"{name}: {len(texts)} inputs, {len(lines)} outputs"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines)]


def test_fixtures_present():
    missing = [n for n in REQUIRED_FIXTURES if n not in _fixture_names()]
    if missing:
        _missing_fixtures(f"vocab fixtures {missing}")


@pytest.mark.parametrize("name", _fixture_names() or [pytest.param(None, id="no-fixtures")])
def test_llama_cpp_vocab_fixture(name):
    if name is None:
        _missing_fixtures("vocab fixtures")
    tok = fixture_tokenizer(name)
    cases = read_cases(name)
    wrong = [(text, got, ids) for text, ids in cases if (got := tok.encode(text, add_bos=False)) != ids]
    assert not wrong, f"{len(wrong)}/{len(cases)} cases differ; first: {wrong[0]}"


def test_fast_meta_matches_gguf_reader():
    if not _vocab_path("phi-3").exists():
        _missing_fixtures("ggml-vocab-phi-3.gguf")
    assert _same_meta(fast_meta(_vocab_path("phi-3")), reader_meta(_vocab_path("phi-3")))


# --- llama-cpp-python as the oracle ----------------------------------------------------------

# Varied text; every entry also runs with special parsing on and off, BOS on and off.
CORPUS = [
    b"", b" ", b"  ", b"\t", b"\n", b"\n\n\n", b"\r\n", b" \n \t\r\n  x", b"Hello world", b" Hello world",
    b"Hello  world", b"   leading and trailing   ", b" " * 100, b"\n" * 40, b"-" * 80, b"=" * 70 + b"\n",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see\u2014won't we? "
    "I'M SURE they'd've. 'quoted' \"double\"".encode(),
    b'def f(x):\n\treturn x**2  # square\n\nif __name__ == "__main__":\n    print(f(3))\n',
    b"    indented\n        more\n\t\tTabs\t\tand  spaces  \n\n\n   \n",
    "1 12 123 1234 12345 3.14159 -42 1e10 0x1F 1,000,000 \u0661\u0662\u0663 \u00bd \u00b2 \u2167".encode(),
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade \u00c5ngstr\u00f6m Stra\u00dfe e\u0301 a\u0308 n\u0303".encode(),
    "你好，世界！这是一个测试。日本語のテキスト、カタカナ。한국어 텍스트입니다.".encode(),
    "\U0001F600\U0001F44D\U0001F3FD\U0001F1EB\U0001F1F7\u2764\ufe0f\u200d\U0001F525 "
    "\U0001F468\u200d\U0001F469\u200d\U0001F467".encode(),
    "שלום עולם مرحبا بالعالم Привет мир Ελληνικά हिन्दी ไทย".encode(),
    "a\u00a0b\u2003c\u3000d\u2028e\u0085f\u200bg\ufeffh\u1680i".encode(), "  \u3000".encode(),
    # Unicode 16/17 letters and digits, which llama.cpp's Unicode 15.1 tables call unassigned.
    "Unicode 16/17: \U0001FAE9 \u1c89 \U0003D000 \u0558x".encode(), "\u0558's".encode(), "  \U00010D43".encode(),
    b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", b"<|endoftext|>", b"text<|endoftext|>more",
    b"<|im_start|><|im_end|>", b"  <|im_end|>  ", b"<|im_start", b"<reponame>x<filename>y", b"<s> </s> <unk>",
    b"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", b"<|user|>\n hi <|end|>\n",
    # Invalid UTF-8: llama.cpp reads each bad byte as U+FFFD before BPE. (Not above U+10FFFF:
    # llama.cpp throws there and takes the process down.)
    b"\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xf0\x9f\x98 x", b"\xed\xa0\x80", b"\xc0\x80",
    b"caf\xe9 cr\xe8me", b"\xf0\x80\x80\x80", b"ok \xfe\xfe\xfe ok",
]


def _fuzz_texts(seed: int, n: int) -> list[bytes]:
    """Random mixes of the pieces tokenizers treat specially, invalid bytes included."""
    pieces = [*"abcxyzABCXYZ019", *" " * 8, *"\t\n\r\v\f", *"'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`", "'s", "'S",
              "'ll", "'RE", *"éàçñüß", "e\u0301", "\u0301", *"你好世界カナ한국", "\U0001F600", "\U0001F3FD",
              "\U0001FAE9", "\u1c89", "\u0558", "\U00010D43", *"שمП", "\u00a0", "\u3000", "\u2028", "\u0085",
              "\u200b", *"١४½²",
              "    ", "\r\n", " \n ", "123456", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>",
              "<|eot_id|>", "<|end|>", "<mask>", "  <|im_end|> "]
    invalid = [b"\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f", b"\xff", b"\xc0\x80", b"\xed\xa0\x80"]
    rng = random.Random(seed)
    return [b"".join(rng.choice(invalid) if rng.random() < 0.05 else rng.choice(pieces).encode()
                     for _ in range(rng.randint(0, 24))) for _ in range(n)]


@pytest.fixture(scope="session")
def smollm2_vocab(smollm2_path, llama_cpp):
    """(our Tokenizer, llama-cpp-python's vocab-only Llama) for the default model."""
    return Tokenizer.from_metadata(reader_meta(smollm2_path)), llama_cpp.Llama(
        str(smollm2_path), vocab_only=True, verbose=False)


def llama_cpp_piece(llama_cpp, vocab, token: int, special: bool) -> bytes:
    buf = ctypes.create_string_buffer(1 << 12)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    return buf.raw[:n]


def reference_detokenize(llama_cpp, llm, tokens, special: bool) -> bytes:
    """Llama.detokenize without its 32-byte piece buffer, which drops longer pieces."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    text = b"".join(llama_cpp_piece(llama_cpp, vocab, t, special) for t in tokens)
    return text[1:] if tokens and tokens[0] == llm.token_bos() and text[:1] == b" " else text


def assert_same_as_llama_cpp(llama_cpp, tok, llm, texts):
    """encode (4 modes) and decode (2 modes) agree with llama-cpp-python on every text."""
    wrong = []
    for text in texts:
        for special in (False, True):
            for add_bos in (False, True):
                ids = llm.tokenize(text, add_bos=add_bos, special=special)
                if tok.encode(text, add_bos=add_bos, special=special) != ids:
                    wrong.append(("encode", text, special, add_bos))
                if tok.decode(ids, special=special) != reference_detokenize(llama_cpp, llm, ids, special):
                    wrong.append(("decode", text, special, add_bos))
    assert not wrong, f"{len(wrong)} differences; first: {wrong[:3]}"


def assert_vocab_as_llama_cpp(llama_cpp, tok, llm):
    """Every token's pieces, EOG and control flags, and the vocab's ids and BOS/EOS defaults."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    for special in (False, True):
        pieces = [llama_cpp_piece(llama_cpp, vocab, t, special) for t in range(tok.n_vocab)]
        assert pieces == [tok.token_to_piece(t, special) for t in range(tok.n_vocab)]
    assert [t for t in range(tok.n_vocab) if tok.is_eog(t)] == \
        [t for t in range(tok.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    assert [t for t in range(tok.n_vocab) if tok.is_control(t)] == \
        [t for t in range(tok.n_vocab) if llama_cpp.llama_vocab_is_control(vocab, t)]
    assert (tok.n_vocab, tok.bos_id, tok.eos_id, tok.nl_id, tok.pad_id, tok.add_bos, tok.add_eos) == (
        llama_cpp.llama_vocab_n_tokens(vocab), llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab),
        llama_cpp.llama_vocab_nl(vocab), llama_cpp.llama_vocab_pad(vocab),
        llama_cpp.llama_vocab_get_add_bos(vocab), llama_cpp.llama_vocab_get_add_eos(vocab))


def test_smollm2_corpus_matches_llama_cpp(llama_cpp, smollm2_vocab):
    tok, llm = smollm2_vocab
    assert_same_as_llama_cpp(llama_cpp, tok, llm, CORPUS)


def test_smollm2_random_text_matches_llama_cpp(llama_cpp, smollm2_vocab):
    tok, llm = smollm2_vocab
    assert_same_as_llama_cpp(llama_cpp, tok, llm, _fuzz_texts(seed=2, n=400))


def test_smollm2_vocab_matches_llama_cpp(llama_cpp, smollm2_vocab):
    tok, llm = smollm2_vocab
    assert_vocab_as_llama_cpp(llama_cpp, tok, llm)
    # llama.cpp takes the first EOT look-alike in its hash map's order (<|endoftext|>, 0, with
    # libstdc++); we take the first in its candidate list, <|im_end|>. Both end generation.
    assert tok.eot_id == 2
    assert tok.is_eog(llama_cpp.llama_vocab_eot(llama_cpp.llama_model_get_vocab(llm.model)))


def test_smollm2_detokenize_equals_llama_cpp_but_keeps_long_pieces(smollm2_vocab):
    tok, llm = smollm2_vocab
    text = "x = 1\n" + " " * 40 + "y\n" + "-" * 64 + "\n"
    ids = llm.tokenize(text.encode(), add_bos=False)
    long_ids = [t for t in ids if len(tok.token_to_piece(t)) > 32]
    assert long_ids, "the text should use a token longer than llama-cpp-python's 32-byte piece buffer"
    short = [t for t in ids if t not in long_ids]
    assert tok.decode(short) == llm.detokenize(short)
    assert tok.decode(ids) == text.encode()  # llama-cpp-python drops the long pieces
    assert llm.detokenize(ids) == b"".join(tok.token_to_piece(t) for t in short)


def test_smollm2_pydoc_topics_match_llama_cpp_and_round_trip(smollm2_vocab):
    from pydoc_data.topics import topics

    tok, llm = smollm2_vocab
    for name, text in topics.items():
        data = text.encode()
        ids = tok.encode(data)
        assert ids == llm.tokenize(data), name
        assert tok.decode(ids) == data, name


def test_round_trip(smollm2_vocab):
    tok, _ = smollm2_vocab
    for text in CORPUS:
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            continue  # invalid bytes become U+FFFD, as in llama.cpp
        for special in (False, True):
            assert tok.decode(tok.encode(text, special=special), special=special) == text


def test_encoding_pydoc_topics_is_fast(smollm2_path):
    from pydoc_data.topics import topics

    tok = Tokenizer.from_metadata(fast_meta(smollm2_path))  # cold word cache
    text = "\n\n".join(topics.values())
    start = time.perf_counter()
    ids = tok.encode(text)
    elapsed = time.perf_counter() - start
    print(f"encoded {len(text)} chars into {len(ids)} tokens in {elapsed:.2f} s")
    assert len(ids) > 100_000 and elapsed < 10


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _vocab_names() if n not in KNOWN_UNSUPPORTED]
                         or [pytest.param(None, id="no-fixtures")])
def test_fixture_vocab_matches_llama_cpp(llama_cpp, name):
    if name is None:
        _missing_fixtures("vocab fixtures")
    tok = fixture_tokenizer(name)
    llm = llama_cpp.Llama(str(_vocab_path(name)), vocab_only=True, verbose=False)
    assert_vocab_as_llama_cpp(llama_cpp, tok, llm)
    assert_same_as_llama_cpp(llama_cpp, tok, llm, CORPUS + _fuzz_texts(seed=1, n=60))


# --- rules on small synthetic vocabs ---------------------------------------------------------

BYTE_CHARS = bpe.BYTE_CHARS


def bpe_meta(extra_tokens=(), merges=(), types=None, **keys) -> dict[str, object]:
    """A byte-level BPE vocab: the 256 byte characters, then `extra_tokens`."""
    tokens = [*BYTE_CHARS, *extra_tokens]
    token_types = [1] * 256 + list(types or [1] * len(extra_tokens))
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.merges": list(merges), "tokenizer.ggml.token_type": np.array(token_types, np.int32),
            **{"tokenizer.ggml." + k: v for k, v in keys.items()}}


def spm_meta(pieces: dict[str, float], **keys) -> dict[str, object]:
    """A SentencePiece vocab: <unk> <s> </s>, the 256 byte tokens, then `pieces` with their scores."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.array([0.0] * 259 + list(pieces.values()), np.float32),
            "tokenizer.ggml.token_type": np.array(types, np.int32),
            **{"tokenizer.ggml." + k: v for k, v in keys.items()}}


def test_bpe_merges_lowest_rank_first_and_unknown_symbols_fall_back_to_bytes():
    g = BYTE_CHARS[ord(" ")]
    tok = Tokenizer.from_metadata(bpe_meta(["ab", "bc", g + "ab"], merges=["b c", "a b", g + " ab"]))
    ab, bc, gab = 256, 257, 258
    assert tok.encode(b"abc") == [ord("a"), bc]  # "b c" outranks "a b"
    assert tok.encode(b"ab ab") == [ab, gab]
    assert tok.decode([ab, gab]) == b"ab ab"
    # A merge result missing from the vocab is emitted as its single-byte tokens.
    tok = Tokenizer.from_metadata(bpe_meta(merges=["a b"]))
    assert tok.encode(b"ab") == [ord("a"), ord("b")]


def test_special_tokens_partition_control_only_when_special_user_defined_always():
    tok = Tokenizer.from_metadata(bpe_meta(["<ctl>", "<usr>"], types=[3, 4]))
    ctl, usr = 256, 257
    assert tok.encode(b"a<ctl>b<usr>c", special=False) == [*tok.encode(b"a<ctl>b"), usr, ord("c")]
    assert tok.encode(b"a<ctl>b<usr>c", special=True) == [ord("a"), ctl, ord("b"), usr, ord("c")]
    assert tok.decode([ctl, usr]) == b"<usr>" and tok.decode([ctl, usr], special=True) == b"<ctl><usr>"
    assert tok.is_control(ctl) and not tok.is_control(usr)


def test_phi3_specials_strip_the_whitespace_after_them():
    meta = spm_meta({"\u2581": -3.0, "hi": -2.0, "\u2581hi": -1.0, "<|user|>": 0.0})
    meta["tokenizer.ggml.token_type"][-1] = 3  # <|user|> is a control token
    space, space_hi, user = 259, 261, 262
    meta["general.name"] = "Phi3"  # llama.cpp keys the rule on the model name
    assert Tokenizer.from_metadata(meta).encode(b"<|user|>   hi", add_bos=False, special=True) == [user, space_hi]
    meta["general.name"] = "other"
    assert Tokenizer.from_metadata(meta).encode(b"<|user|>   hi", add_bos=False, special=True) == \
        [user, space, space, space, space_hi]


def test_spm_space_prefix_scores_and_byte_fallback():
    tok = Tokenizer.from_metadata(spm_meta({"\u2581": -5.0, "a": -1.0, "b": -1.0, "\u2581a": -2.0, "ab": -3.0,
                                            "\u2581ab": -4.0}))
    space, a, b, space_a, ab, space_ab = range(259, 265)
    assert tok.add_bos and tok.bos_id == 1
    # Best score first: "▁a" (-2) before "ab" (-3); "▁ab" is then reachable from "▁a" + "b".
    assert tok.encode(b"ab") == [1, space_ab]
    assert tok.encode(b"ab", add_bos=False) == [space_ab]
    assert tok.encode(b"b\xc3\xa9", add_bos=False) == [space, b, 3 + 0xC3, 3 + 0xA9]
    assert tok.decode([1, space_ab]) == b"ab"  # the prefix space goes again after BOS
    assert tok.encode(b"a<s>a", special=True) == [1, space_a, 1, space_a]  # a space after specials too


def test_eog_tokens_are_found_by_text():
    tok = Tokenizer.from_metadata(bpe_meta(["<|im_end|>", "<|endoftext|>", "<|fim_pad|>"], types=[1, 3, 3],
                                           eos_token_id=257))
    assert (tok.eos_id, tok.eot_id) == (257, 256)
    assert [t for t in range(tok.n_vocab) if tok.is_eog(t)] == [256, 257, 258]
    assert tok.is_control(256)  # llama.cpp forces end-looking tokens to CONTROL


@pytest.mark.parametrize("name", sorted(pretokenizers.PRE_TOKENIZERS))
def test_every_pre_tokenizer_cuts_text_into_pieces_that_cover_it(name):
    # Most have no fixture; this at least compiles each and checks that splitting loses nothing.
    text = "Hello, World! It's 12345 \u00e9t\u00e9 \u4f60\u597d \u3053\u3093 \uac00\ub098\n\n  \tx\u00a0y \U0001F600"
    words = pretokenizers.Splitter(pretokenizers.PRE_TOKENIZERS[name].regexes).split(text)
    assert "".join(words) == text and all(words)


@pytest.mark.parametrize("change, error", [
    ({"tokenizer.ggml.tokens": None}, ValueError),
    ({"tokenizer.ggml.model": "t5"}, NotImplementedError),
    ({"tokenizer.ggml.model": "nonsense"}, ValueError),
    ({"tokenizer.ggml.pre": "kimi-k2"}, NotImplementedError),
    ({"tokenizer.ggml.pre": "nonsense"}, ValueError),
    ({"tokenizer.ggml.merges": None}, ValueError),
    ({"tokenizer.ggml.token_type": np.ones(3, np.int32)}, ValueError),
    ({"tokenizer.ggml.tokens": ["a", "a"]}, ValueError),
    ({"tokenizer.ggml.add_bos_token": "yes"}, ValueError),
])
def test_bad_metadata_raises(change, error):
    meta = {k: v for k, v in {**bpe_meta(), **change}.items() if v is not None}
    with pytest.raises(error):
        Tokenizer.from_metadata(meta)


def test_token_ids_outside_the_vocab_raise():
    tok = Tokenizer.from_metadata(bpe_meta())
    for token in (-1, 256):
        with pytest.raises(IndexError):
            tok.token_to_piece(token)
    assert not tok.is_eog(-1)
