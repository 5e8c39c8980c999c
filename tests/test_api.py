"""`Llama`'s surface against llama-cpp-python's: the same calls give dicts of the same shape."""
from __future__ import annotations

import numpy as np
import pytest

from pypowerinfer import Llama

PROMPT = "The quick brown fox"


def shape(value):
    """The structure of a response: keys and value types, recursively; lists by their first item."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return value if value is None else "bool"
    if isinstance(value, (int, float, np.floating)):  # llama-cpp-python returns numpy float32 logprobs
        return "number"
    return type(value).__name__


def same_shape(ours, theirs):
    assert shape(ours) == shape(theirs)


CASES = {
    "plain": dict(max_tokens=8),
    "greedy": dict(max_tokens=8, temperature=0.0),
    "stop": dict(max_tokens=24, temperature=0.0, stop=[" the", "."]),
    "echo": dict(max_tokens=4, echo=True, temperature=0.0),
    "logprobs": dict(max_tokens=4, logprobs=3, temperature=0.0),
    "echo_logprobs": dict(max_tokens=3, logprobs=2, echo=True, temperature=0.0),
    "max_tokens_none": dict(max_tokens=None, temperature=0.0, stop=["\n"]),
    "penalties": dict(max_tokens=8, repeat_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.5, seed=7),
    "sampling": dict(max_tokens=8, top_k=5, top_p=0.5, min_p=0.1, typical_p=0.9, temperature=1.2, seed=3),
    "logit_bias": dict(max_tokens=4, temperature=0.0, logit_bias={"13": -100.0}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_completion_shape_matches_llama_cpp(case, smollm2, smollm2_ref):
    kwargs = CASES[case]
    ours = smollm2.create_completion(PROMPT, **kwargs)
    theirs = smollm2_ref.create_completion(PROMPT, **kwargs)
    same_shape(ours, theirs)
    assert ours["object"] == "text_completion" and ours["id"].startswith("cmpl-")
    assert ours["choices"][0]["finish_reason"] in ("stop", "length")
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    if kwargs.get("temperature") == 0.0 and case != "logit_bias":
        assert ours["choices"][0]["text"] == theirs["choices"][0]["text"]
        assert ours["choices"][0]["finish_reason"] == theirs["choices"][0]["finish_reason"]
    if "logprobs" in kwargs:
        lp, lp_ref = ours["choices"][0]["logprobs"], theirs["choices"][0]["logprobs"]
        if kwargs.get("echo"):
            # llama-cpp-python drops the last token and scores token i with the logits *at* i;
            # we keep every token and score it with the logits that predicted it
            n = len(lp_ref["tokens"])
            assert lp["tokens"][:n] == lp_ref["tokens"] and len(lp["tokens"]) == n + 1
            assert lp["text_offset"][:n] == lp_ref["text_offset"]
            assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        else:
            assert lp["tokens"] == lp_ref["tokens"]
            assert lp["text_offset"] == lp_ref["text_offset"]
            np.testing.assert_allclose(lp["token_logprobs"], lp_ref["token_logprobs"], atol=0.15)
            assert list(lp["top_logprobs"][0]) == list(lp_ref["top_logprobs"][0])


def test_stream_chunks_match_llama_cpp(smollm2, smollm2_ref):
    kwargs = dict(max_tokens=16, temperature=0.0, stream=True)
    ours = list(smollm2.create_completion(PROMPT, **kwargs))
    theirs = list(smollm2_ref.create_completion(PROMPT, **kwargs))
    same_shape(ours[0], theirs[0])
    same_shape(ours[-1], theirs[-1])
    assert "".join(c["choices"][0]["text"] for c in ours) == "".join(c["choices"][0]["text"] for c in theirs)
    assert ours[-1]["choices"][0]["finish_reason"] == theirs[-1]["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in ours[:-1])


def test_stream_never_shows_a_stop_string(smollm2):
    full = smollm2.create_completion(PROMPT, max_tokens=40, temperature=0.0)["choices"][0]["text"]
    words = full.split()
    assert len(words) > 3
    stop = " " + words[3]
    streamed = "".join(c["choices"][0]["text"] for c in
                       smollm2.create_completion(PROMPT, max_tokens=40, temperature=0.0, stop=[stop], stream=True))
    assert stop not in streamed and full.startswith(streamed)
    assert streamed == full[: full.index(stop)]


def test_call_is_create_completion(smollm2):
    a = smollm2(PROMPT, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    b = smollm2.create_completion(PROMPT, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    assert a == b


def test_seed_makes_sampling_repeatable(smollm2):
    kwargs = dict(max_tokens=12, temperature=1.0, seed=1234)
    assert smollm2(PROMPT, **kwargs)["choices"][0]["text"] == smollm2(PROMPT, **kwargs)["choices"][0]["text"]


def test_max_tokens_beyond_context_stops_with_length(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=24, verbose=False) as llm:
        out = llm(PROMPT, max_tokens=1000, temperature=0.0, logit_bias={llm.token_eos(): -1e9})
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["total_tokens"] <= 24


def test_logprobs_need_logits_all(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=64, verbose=False) as llm:
        with pytest.raises(ValueError, match="logits_all"):
            llm(PROMPT, max_tokens=2, logprobs=1)


def test_low_level_eval_sample_generate(smollm2, smollm2_ref):
    tokens = smollm2.tokenize(PROMPT.encode())
    smollm2.reset()
    smollm2.eval(tokens)
    assert smollm2.n_tokens == len(tokens)
    assert list(smollm2.input_ids[: len(tokens)]) == tokens
    greedy = smollm2.sample(temp=0.0)
    assert greedy == int(np.argmax(smollm2.scores[len(tokens) - 1]))
    gen = smollm2.generate(tokens, temp=0.0)
    ours = [next(gen) for _ in range(8)]
    gen_ref = smollm2_ref.generate(tokens, temp=0.0)
    theirs = [next(gen_ref) for _ in range(8)]
    assert ours == theirs


def test_accessors_match_llama_cpp(smollm2, smollm2_ref):
    for name in ("n_ctx", "n_vocab", "n_embd", "token_bos", "token_eos", "token_nl"):
        assert getattr(smollm2, name)() == getattr(smollm2_ref, name)(), name
    assert smollm2.scores.shape == smollm2_ref.scores.shape
    assert smollm2.input_ids.shape == smollm2_ref.input_ids.shape


def test_unknown_kwargs_are_ignored(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=32, n_gpu_layers=99, use_mlock=True, rope_freq_base=0.0,
               some_future_option="x", verbose=False) as llm:
        assert llm.n_ctx() == 32


def test_n_ctx_zero_is_trained_length(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=0, verbose=False) as llm:
        assert llm.n_ctx() == 8192


def test_logits_are_a_zero_copy_view(smollm2):
    assert not smollm2.scores.flags.owndata
    assert smollm2.scores.dtype == np.float32


def test_close_twice_and_context_manager(smollm2_path):
    llm = Llama(str(smollm2_path), n_ctx=32, verbose=False)
    llm.close()
    llm.close()
    with pytest.raises(ValueError):
        llm.eval([1])
