"""save_state / load_state and the prompt cache: resuming gives the same greedy output."""
from __future__ import annotations

import numpy as np
import pytest

from pypowerinfer import Llama, LlamaRAMCache

PROMPT = "The three primary colors are"


def greedy(llm, prompt, n=16, **kw):
    return llm(prompt, max_tokens=n, temperature=0.0, **kw)["choices"][0]["text"]


@pytest.fixture
def fresh(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=256, n_threads=2, verbose=False) as llm:
        yield llm


def test_state_resumes_to_the_same_greedy_output(fresh, smollm2_path):
    tokens = fresh.tokenize(PROMPT.encode())
    fresh.eval(tokens)
    state = fresh.save_state()
    assert state.n_tokens == len(tokens) and state.llama_state_size == len(state.llama_state) > 0
    continued = [fresh.sample(temp=0.0)]
    for _ in range(7):
        fresh.eval([continued[-1]])
        continued.append(fresh.sample(temp=0.0))
    with Llama(str(smollm2_path), n_ctx=256, n_threads=2, verbose=False) as other:
        other.load_state(state)
        assert other.n_tokens == len(tokens)
        np.testing.assert_array_equal(other.scores, state.scores)
        resumed = [other.sample(temp=0.0)]
        for _ in range(7):
            other.eval([resumed[-1]])
            resumed.append(other.sample(temp=0.0))
    assert resumed == continued
    fresh.load_state(state)  # back in the first one too
    assert fresh.n_tokens == len(tokens)


def test_state_keeps_the_seed(fresh):
    fresh.set_seed(1234)
    state = fresh.save_state()
    fresh.set_seed(99)
    fresh.load_state(state)
    assert fresh._seed == 1234


def test_state_of_another_model_or_too_long_is_refused(fresh, smollm2_path, tmp_path):
    from synthetic import write_llama_gguf

    fresh.eval(fresh.tokenize(PROMPT.encode()))
    state = fresh.save_state()
    with Llama(write_llama_gguf(tmp_path / "other.gguf"), n_ctx=64, verbose=False) as other:
        with pytest.raises(ValueError, match="another model"):
            other.load_state(state)
    with Llama(str(smollm2_path), n_ctx=4, n_threads=2, verbose=False) as small:
        with pytest.raises(ValueError, match="n_ctx"):
            small.load_state(state)
    state.llama_state = state.llama_state[:-3]
    with pytest.raises(ValueError, match="bytes"):
        fresh.load_state(state)


def test_ram_cache_serves_the_longest_prefix(fresh):
    cache = LlamaRAMCache(capacity_bytes=1 << 30)
    fresh.set_cache(cache)
    first = greedy(fresh, PROMPT)
    assert len(cache.cache_state) == 1
    key = next(iter(cache.cache_state))
    assert list(key[: len(fresh.tokenize(PROMPT.encode()))]) == fresh.tokenize(PROMPT.encode())
    fresh.reset()  # the context forgets; the cache does not
    fresh.n_tokens = 0
    again = greedy(fresh, PROMPT)
    assert again == first
    assert fresh.tokenize(PROMPT.encode()) in cache
    with pytest.raises(KeyError):
        cache[[7, 7, 7]]


def test_ram_cache_evicts_least_recently_used(fresh):
    fresh.eval(fresh.tokenize(PROMPT.encode()))
    state = fresh.save_state()
    cache = LlamaRAMCache(capacity_bytes=2 * state.llama_state_size)
    cache[[1, 2]] = state
    cache[[3, 4]] = state
    cache[[1, 2, 5]]  # touch the first
    cache[[6]] = state
    assert list(cache.cache_state) == [(1, 2), (6,)]


def test_disk_cache_resumes_in_another_process_lifetime(fresh, tmp_path):
    """A state written to the folder by one cache object serves a new one on the same folder."""
    from pypowerinfer import LlamaDiskCache

    fresh.set_cache(LlamaDiskCache(cache_dir=str(tmp_path / "c"), capacity_bytes=1 << 30))
    first = greedy(fresh, PROMPT)
    fresh.reset()
    fresh.n_tokens = 0
    reopened = LlamaDiskCache(cache_dir=str(tmp_path / "c"), capacity_bytes=1 << 30)
    assert fresh.tokenize(PROMPT.encode()) in reopened and len(reopened.cache) == 1
    fresh.set_cache(reopened)
    assert greedy(fresh, PROMPT) == first
    with pytest.raises(KeyError):
        reopened[[7, 7, 7]]


def test_disk_cache_evicts_least_recently_used(fresh, tmp_path):
    from pypowerinfer import LlamaDiskCache

    fresh.eval(fresh.tokenize(PROMPT.encode()))
    state = fresh.save_state()
    cache = LlamaDiskCache(cache_dir=str(tmp_path / "c"), capacity_bytes=1 << 40)
    cache[[1, 2]] = state
    cache[[3, 4]] = state
    cache[[1, 2, 5]]  # touch the first
    cache.capacity_bytes = cache.cache_size + state.llama_state_size // 2  # room for two states, not three
    cache[[6]] = state
    assert list(cache.cache) == [(1, 2), (6,)]
    restored = cache[[6, 9]]
    assert restored.n_tokens == state.n_tokens and restored.llama_state == state.llama_state
