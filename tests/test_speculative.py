"""Speculative decoding as llama-cpp-python spells it: Llama(draft_model=...) verifies a draft's
tokens in one step and truncates the cache where a guess is wrong, so the text is the plain
generation's, greedy or sampled with the same seed."""
from __future__ import annotations

import numpy as np
import pytest
from pydoc_data.topics import topics

from pypowerinfer import Llama
from pypowerinfer.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

N = 96
PROMPT = ("<|im_start|>user\nRepeat this text exactly:\n" + topics["assert"][:900] +
          "<|im_end|>\n<|im_start|>assistant\n")


class Counting(LlamaDraftModel):
    """Wraps a draft and counts the steps (one draft call per verification step)."""

    def __init__(self, draft: LlamaDraftModel):
        self.draft, self.calls, self.num_pred_tokens = draft, 0, getattr(draft, "num_pred_tokens", 10)

    def __call__(self, input_ids, /, **kwargs):
        self.calls += 1
        return self.draft(input_ids)


class Wrong(LlamaDraftModel):
    """Guesses that are never right (the next token id after the last, and so on)."""

    num_pred_tokens = 4

    def __call__(self, input_ids, /, **kwargs):
        return (np.arange(1, 5) + int(input_ids[-1])) % 1000


def generate(path, n=N, temp=0.0, seed=7, **options) -> list[int]:
    with Llama(str(path), n_ctx=1024, n_threads=2, seed=seed, verbose=False, **options) as llm:
        prompt = llm.tokenize(PROMPT.encode(), special=True)
        out = []
        for token in llm.generate(prompt, temp=temp):
            out.append(token)
            if len(out) == n:
                return out


@pytest.fixture(scope="module")
def plain(smollm2_path):
    return generate(smollm2_path)


def test_prompt_lookup_gives_the_plain_greedy_text_in_fewer_steps(smollm2_path, plain):
    draft = Counting(LlamaPromptLookupDecoding(num_pred_tokens=4))
    assert generate(smollm2_path, draft_model=draft) == plain
    print(f"\n{draft.calls} steps for {N} tokens")
    assert draft.calls < 0.7 * N  # guesses were accepted: fewer steps than tokens


def test_wrong_guesses_are_rolled_back(smollm2_path, plain):
    assert generate(smollm2_path, draft_model=Wrong()) == plain


def test_with_logits_all_too(smollm2_path, plain):
    assert generate(smollm2_path, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3), logits_all=True) == plain


def test_sampling_with_a_seed_gives_the_plain_text(smollm2_path):
    sampled = generate(smollm2_path, n=64, temp=0.8, seed=11)
    assert generate(smollm2_path, n=64, temp=0.8, seed=11,
                    draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4)) == sampled


def test_a_draft_model_must_be_one(smollm2_path):
    with pytest.raises(TypeError, match="LlamaDraftModel"):
        Llama(str(smollm2_path), n_ctx=64, draft_model=lambda ids: ids[-2:], verbose=False)


def test_logits_of_positions_the_last_step_did_not_keep(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=64, verbose=False,
               draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3)) as llm:
        llm.eval([1, 2, 3, 4, 5, 6])
        rows = [llm._last_logits(i).copy() for i in (2, 3, 4, 5)]  # the last four: num_pred_tokens + 1
        with pytest.raises(ValueError, match="logits of position 1 are not kept"):
            llm._last_logits(1)
    with Llama(str(smollm2_path), n_ctx=64, logits_all=True, verbose=False) as ref:
        ref.eval([1, 2, 3, 4, 5, 6])
        np.testing.assert_allclose(np.array(rows), ref.scores[2:6], rtol=0, atol=1e-4)


def test_the_native_tail_is_bounded_by_the_rows_kept(smollm2_path):
    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(smollm2_path)
    ctx = NativeContext(model, n_ctx=64, n_batch=64, n_threads=1, n_threads_batch=1, logits_all=False, n_logits=3)
    tokens = np.arange(1, 9, dtype=np.int32)
    ctx.decode(tokens, 0, 3)
    assert ctx.logits.shape == (3, model.info.n_vocab)
    with pytest.raises(ValueError, match="last 4 of 8 tokens.*1 to 3 rows"):
        ctx.decode(tokens, 0, 4)
    ctx.close()
    with pytest.raises(ValueError, match="n_logits 65 is outside"):
        NativeContext(model, n_ctx=64, n_batch=64, n_threads=1, n_threads_batch=1, logits_all=False, n_logits=65)


class WrappingDraft(LlamaDraftModel):
    """A draft around another model (its greedy tokens), in the LlamaDraftModel interface."""

    def __init__(self, model):
        self.model = model

    def __call__(self, input_ids, /, **kwargs):
        return np.array([], dtype=np.intc)


def test_a_draft_model_of_another_vocabulary_is_refused(smollm2_path, tmp_path):
    from synthetic import write_llama_gguf

    with Llama(write_llama_gguf(tmp_path / "small.gguf"), n_ctx=64, verbose=False) as other:
        with pytest.raises(ValueError, match="draft_model.model has another vocabulary"):
            Llama(str(smollm2_path), n_ctx=64, draft_model=WrappingDraft(other), verbose=False)
    with Llama(str(smollm2_path), n_ctx=64, verbose=False) as same:
        Llama(str(smollm2_path), n_ctx=64, draft_model=WrappingDraft(same), verbose=False).close()
