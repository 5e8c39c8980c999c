"""Gemma 3 270M Q4_K_M against llama-cpp-python: tokenization, teacher-forced logits, greedy text."""
from __future__ import annotations

import numpy as np
import pytest

from reference import compare_logits
from test_forward import assert_same_greedy_text, real_text, teacher_forced

N_TEACHER = 256

TEXTS = ["Hello world, the quick brown fox.", "  leading spaces\n\nand\ttabs", "Grüße aus München – 日本語 🙂",
         "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "x = [1, 2, 3]  # code", ""]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenization_matches_llama_cpp(gemma3, gemma3_ref, text):
    for special in (False, True):
        assert gemma3.tokenize(text.encode(), special=special) == gemma3_ref.tokenize(text.encode(), special=special)


def test_teacher_forced_logits_match_llama_cpp(gemma3, gemma3_ref):
    tokens = gemma3_ref.tokenize(real_text().encode())[:N_TEACHER]
    stats = compare_logits(teacher_forced(gemma3_ref, tokens), teacher_forced(gemma3, tokens))
    print(f"\nGemma 3 vs llama.cpp over {len(tokens)} tokens: top1 {stats['top1']:.2%} KL {stats['kl_mean']:.5f}")
    # as for SmolLM2 (test_forward.py): the 8-bit activations of both engines make top-1 flip on
    # near ties; KL is the bound, top-1 is held below the 99% (measured ~95-96%)
    assert stats["kl_mean"] <= 0.01
    assert stats["top1"] >= 0.93


@pytest.mark.parametrize("prompt", ["The capital of France is", "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
                                    "<start_of_turn>model\n"])
def test_greedy_continuation_matches_llama_cpp(gemma3, gemma3_ref, prompt):
    assert_same_greedy_text(gemma3, gemma3_ref, prompt, 24)


def test_a_prompt_longer_than_the_sliding_window_matches_llama_cpp(gemma3_path):
    """600 tokens: past 512 positions the local layers no longer see the start of the prompt."""
    import llama_cpp

    from pypowerinfer import Llama

    ref = llama_cpp.Llama(str(gemma3_path), n_ctx=1024, n_threads=2, verbose=False)
    try:
        with Llama(str(gemma3_path), n_ctx=1024, n_threads=2, verbose=False) as ours:
            tokens = ref.tokenize((real_text() * 2).encode())[:600]
            ours.eval(tokens)
            ref.eval(tokens)
            a = np.array(ours.scores[0], dtype=np.float64)
            # llama-cpp-python keeps only n_batch rows of scores without logits_all: read llama.cpp's
            b = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ref._ctx.ctx), shape=(ref.n_vocab(),)).astype(np.float64)
    finally:
        ref.close()
    stats = compare_logits(b[None], a[None])
    assert stats["kl_mean"] < 0.02, stats
