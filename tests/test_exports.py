"""pypowerinfer exports every high-level name that llama-cpp-python (the oracle, pinned) exports
at the top level: its classes, callback types and llama_types' TypedDicts. Names that come from
its low-level ctypes layer or the typing module are not part of that API."""
from __future__ import annotations

import inspect
import typing

import numpy as np
import pytest

import pypowerinfer

llama_cpp = pytest.importorskip("llama_cpp")


def _high_level_names() -> list:
    import llama_cpp.llama_cpp as low_level

    low = set(dir(low_level))
    typing_names = set(dir(typing)) | {"deque", "Path", "NotRequired"}
    return sorted(n for n in dir(llama_cpp) if not n.startswith("_") and n not in low and n not in typing_names
                  and not inspect.ismodule(getattr(llama_cpp, n)))


def test_every_high_level_name_is_exported():
    names = _high_level_names()
    assert len(names) > 70  # the oracle's list is what it should be (79 in 0.3.36)
    missing = [n for n in names if not hasattr(pypowerinfer, n)]
    assert not missing, f"pypowerinfer lacks {missing}"


def test_the_types_have_the_oracles_fields():
    from pypowerinfer import llama_types as ours

    from llama_cpp import llama_types as theirs

    for name in ours.__all__:
        mine, peer = getattr(ours, name), getattr(theirs, name, None)
        assert peer is not None, name
        assert isinstance(mine, type) == isinstance(peer, type), f"{name}: a class in one, an alias in the other"
        if isinstance(peer, type):
            assert set(mine.__annotations__) == set(peer.__annotations__), name


def test_min_tokens_processor_forbids_eos_until_enough_tokens():
    import numpy as np

    from pypowerinfer import MinTokensLogitsProcessor

    p = MinTokensLogitsProcessor(min_tokens=2, token_eos=0)
    ids = np.arange(5, dtype=np.intc)
    assert p(ids, np.zeros(4, dtype=np.single))[0] == -np.inf  # the prompt: 5 tokens
    assert p(np.arange(6, dtype=np.intc), np.zeros(4, dtype=np.single))[0] == -np.inf
    assert p(np.arange(7, dtype=np.intc), np.zeros(4, dtype=np.single))[0] == 0.0


def test_suppress_stdout_stderr_silences_file_descriptors(capfd):
    import os

    from pypowerinfer import suppress_stdout_stderr

    with suppress_stdout_stderr(disable=False):
        os.write(1, b"hidden-out")
        os.write(2, b"hidden-err")
    with suppress_stdout_stderr(disable=True):
        os.write(2, b"shown")
    out, err = capfd.readouterr()
    assert "hidden" not in out + err and "shown" in err


@pytest.mark.parametrize("option", [{"tokenizer": object()}])
def test_options_that_change_results_are_refused_not_ignored(smollm2_path, option):
    with pytest.raises(NotImplementedError, match=next(iter(option))):
        pypowerinfer.Llama(str(smollm2_path), n_ctx=64, verbose=False, **option)


def test_llama_tokenizer_round_trips(smollm2_path):
    from pypowerinfer import LlamaTokenizer

    tok = LlamaTokenizer.from_ggml_file(str(smollm2_path))
    ids = tok.encode("Hello world", add_bos=False)
    assert ids and tok.decode(ids) == "Hello world"
    assert tok.detokenize(ids[1:], prev_tokens=ids[:1]) == b" world"


def _alias_low_level():
    """alias/llama_cpp/llama_cpp.py, loaded by path: the oracle owns the name llama_cpp here."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "alias" / "llama_cpp" / "llama_cpp.py"
    spec = importlib.util.spec_from_file_location("alias_low_level", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_alias_low_level_constants_match_the_oracle():
    import llama_cpp.llama_cpp as peer

    from pypowerinfer.model import cuda_device_count

    ours = _alias_low_level()
    constants = [n for n in vars(ours) if n.isupper()]
    assert len(constants) > 60
    wrong = {n: (getattr(ours, n), getattr(peer, n)) for n in constants
             if hasattr(peer, n) and getattr(ours, n) != getattr(peer, n)}
    assert not wrong  # (the oracle lacks a few, such as GGML_TYPE_BF16)
    assert ours.llama_supports_gpu_offload() is (cuda_device_count() > 0)
    assert isinstance(ours.llama_print_system_info(), bytes)
    with pytest.raises(NotImplementedError, match="llama_decode"):
        ours.llama_decode


def test_token_to_piece_as_outlines_calls_it(smollm2_path):
    """outlines reads the vocabulary through llama_model_get_vocab(llm.model) and
    llama_token_to_piece into a ctypes buffer; a piece too long for it is refused, as llama.cpp does."""
    import ctypes

    ours = _alias_low_level()
    with pypowerinfer.Llama(str(smollm2_path), n_ctx=64, verbose=False) as llm:
        vocab = ours.llama_model_get_vocab(llm.model)
        token = llm.tokenize(b" world", add_bos=False)[0]
        buf = (ctypes.c_char * 32)()
        n = ours.llama_token_to_piece(vocab, token, buf, 32, 0, True)
        assert buf[:n] == b" world"
        n = ours.llama_token_to_piece(vocab, token, buf, 32, 1, True)
        assert buf[:n] == b"world"
        assert ours.llama_token_to_piece(vocab, token, buf, 2, 0, True) == -6
        assert llm.tokenizer().detokenize([token]) == b" world"


def test_context_params_as_llama_index_reads_them(smollm2_path):
    with pypowerinfer.Llama(str(smollm2_path), n_ctx=96, n_batch=32, n_threads=1, verbose=False) as llm:
        p = llm.context_params
        assert (p.n_ctx, p.n_batch, p.n_threads, p.embeddings) == (llm.n_ctx(), 32, 1, False)
        assert p.type_k == p.type_v == 1  # f16


def test_prompt_lookup_drafts_as_llama_cpp_python_does(llama_cpp):
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding as Theirs

    from pypowerinfer.llama_speculative import LlamaPromptLookupDecoding as Ours

    rng = np.random.default_rng(0)
    for case in range(300):
        ids = rng.integers(0, 4, int(rng.integers(0, 24))).astype(np.intc)  # few ids: many repeats
        size, count = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        expected = Theirs(max_ngram_size=size, num_pred_tokens=count)(ids)
        np.testing.assert_array_equal(Ours(max_ngram_size=size, num_pred_tokens=count)(ids), expected, str(case))
