"""Bad input gives a clear Python exception, never a crash; good files expose their metadata."""
from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGUFReader

from synthetic import corrupt_variants, rewrite_gguf, write_llama_gguf

from pypowerinfer import Llama, UnsupportedError
from pypowerinfer.model import NativeModel

# the words each kind of failure must mention, so the message tells the user what is wrong
EXPECTED_WORDS = {
    "wrong_magic": "magic",
    "missing_tensor": "blk.0.ffn_up.weight",
    "missing_key": "llama.block_count",
    "arch_mamba": "mamba",
    "type_iq4_nl": "iq4_nl",
    "wrong_shape_ffn_up": "ffn_up",
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    out = tmp_path_factory.mktemp("corrupt")
    good = write_llama_gguf(out / "good.gguf")
    return good, corrupt_variants(good, out / "bad")


def test_good_synthetic_file_loads(variants):
    good, _ = variants
    with Llama(str(good), n_ctx=32, verbose=False) as llm:
        assert llm.n_vocab() == 288
        assert llm.create_completion("ab", max_tokens=4)["usage"]["prompt_tokens"] > 0


def test_every_corrupt_variant_raises_a_clear_error(variants):
    _, bad = variants
    assert len(bad) >= 20
    for name, path in bad:
        with pytest.raises((ValueError, OSError, NotImplementedError)) as info:
            Llama(path, n_ctx=32, verbose=False)
        message = str(info.value).lower()
        assert message, name
        if name in EXPECTED_WORDS:
            assert EXPECTED_WORDS[name].lower() in message, (name, message)


def test_unsupported_type_is_named(variants):
    _, bad = variants
    path = dict(bad)["type_iq4_nl"]
    with pytest.raises(UnsupportedError, match="(?i)iq4_nl"):
        Llama(path, verbose=False)


def test_truncations_at_every_kilobyte_raise(tmp_path, variants):
    good, _ = variants
    data = open(good, "rb").read()
    for cut in list(range(0, min(len(data), 16384), 997)) + [len(data) - 1]:
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises((ValueError, OSError)):
            Llama(str(path), verbose=False)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        Llama(str(tmp_path / "nope.gguf"), verbose=False)
    with pytest.raises(OSError):
        NativeModel(tmp_path)


def test_metadata_matches_gguf_reader(smollm2_path):
    meta = NativeModel(smollm2_path, vocab_only=True).metadata()
    reader = GGUFReader(smollm2_path)
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        if isinstance(value, list) and value and not isinstance(value[0], str):
            np.testing.assert_array_equal(meta[key], np.array(value))
        elif isinstance(value, float):
            assert meta[key] == pytest.approx(value), key
        else:
            assert meta[key] == value, key


def test_metadata_strings_match_llama_cpp(smollm2, smollm2_ref):
    assert smollm2.metadata == smollm2_ref.metadata


def test_describe_lists_every_layer(smollm2_path):
    text = NativeModel(smollm2_path).describe()
    assert "arch llama: 30 layers" in text
    assert text.count("ffn_down") == 30 and "tied" in text


def test_context_overflow_message(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=32, verbose=False) as llm:
        with pytest.raises(ValueError, match=r"Requested tokens \(\d+\) exceed context window of 32"):
            llm.create_completion("word " * 64, max_tokens=4)
        with pytest.raises(ValueError, match="exceed context window of 32"):
            llm.eval(list(range(40)))


def test_out_of_vocab_token_is_refused(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=32, verbose=False) as llm:
        with pytest.raises(ValueError, match="outside the vocabulary"):
            llm.eval([1, 49152])


def test_huge_context_fails_before_allocating(smollm2_path):
    with pytest.raises(MemoryError, match="MiB"):
        Llama(str(smollm2_path), n_ctx=1 << 24, verbose=False)


def test_vocab_only_has_no_context(smollm2_path):
    llm = Llama(str(smollm2_path), vocab_only=True, verbose=False)
    assert llm.tokenize(b"hello") == llm.tokenize(b"hello")
    with pytest.raises(ValueError, match="vocab_only"):
        llm.eval([1])


def test_input_file_is_not_modified(tmp_path, variants):
    good, _ = variants
    before = os.stat(good).st_mtime_ns, open(good, "rb").read()
    with Llama(str(good), n_ctx=32, verbose=False) as llm:
        llm.create_completion("abc", max_tokens=3)
    assert (os.stat(good).st_mtime_ns, open(good, "rb").read()) == before


def _replaced(tmp_path, name: str, rows: int, **write_kwargs) -> str:
    """A good file of write_kwargs with tensor `name` swapped for one of `rows` rows."""
    good = write_llama_gguf(tmp_path / "good.gguf", weight_type="F32", **write_kwargs)
    cols = GGUFReader(good).get_tensor(0).shape[0]  # token_embd: n_embd columns
    return rewrite_gguf(good, tmp_path / "bad.gguf", {name: np.zeros((rows, cols), np.float32)}, drop={name})


@pytest.mark.parametrize("arch, name, rows", [("phi3", "blk.1.attn_qkv.weight", 64 + 32),   # v missing
                                              ("phi3", "blk.0.ffn_up.weight", 96),          # up half missing
                                              ("falcon", "blk.0.attn_qkv.weight", 64 + 64 + 32),
                                              ("opt", "position_embd.weight", 2)])          # no position left
def test_wrong_fused_shape_is_refused(tmp_path, arch, name, rows):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        Llama(_replaced(tmp_path, name, rows, arch=arch), verbose=False)


@pytest.mark.parametrize("arch, name", [("phi3", "blk.1.attn_qkv.weight"), ("falcon", "blk.1.attn_qkv.weight"),
                                        ("falcon", "blk.0.attn_norm.bias"), ("opt", "position_embd.weight"),
                                        ("opt", "output_norm.bias"), ("opt", "blk.1.ffn_norm.weight")])
def test_missing_tensor_of_an_arch_is_named(tmp_path, arch, name):
    path = write_llama_gguf(tmp_path / "m.gguf", arch=arch, omit_tensor=name)
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        Llama(str(path), verbose=False)


def test_long_rope_is_refused(tmp_path):
    good = write_llama_gguf(tmp_path / "good.gguf", arch="phi3")
    path = rewrite_gguf(good, tmp_path / "long.gguf", {"rope_factors_long.weight": np.ones(8, np.float32)})
    with pytest.raises(UnsupportedError, match="rope_factors_long"):
        Llama(path, verbose=False)


@pytest.mark.parametrize("key", ["llama.attn_logit_softcapping", "llama.final_logit_softcapping"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_implausible_soft_capping_is_refused(tmp_path, key, value):
    path = write_llama_gguf(tmp_path / "m.gguf", extra_kv={key: value})
    with pytest.raises(ValueError, match="soft-capping"):
        NativeModel(str(path))
