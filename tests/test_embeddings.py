"""Embeddings against llama-cpp-python: shapes, pooling, normalisation, and the vectors within
the 8-bit activation noise both engines share."""
from __future__ import annotations

import numpy as np
import pytest

from pypowerinfer import Llama

TEXTS = ["Hello world", "The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x * 2"]


@pytest.fixture(scope="module")
def pair(smollm2_path, llama_cpp):
    ours = Llama(str(smollm2_path), embedding=True, n_ctx=256, n_threads=2, verbose=False)
    ref = llama_cpp.Llama(str(smollm2_path), embedding=True, n_ctx=256, n_threads=2, verbose=False)
    yield ours, ref
    ours.close()
    ref.close()


def cosines(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_per_token_embeddings_match(pair):
    ours, ref = pair
    assert ours.pooling_type() == ref.pooling_type() == 0
    for text in TEXTS:
        a, b = ours.embed(text), ref.embed(text)
        assert np.shape(a) == np.shape(b)
        assert isinstance(a[0][0], float)
        assert cosines(a, b).min() > 0.995, text


def test_normalize_and_lists(pair):
    ours, ref = pair
    a = ours.embed(TEXTS, normalize=True)
    b = ref.embed(TEXTS, normalize=True)
    assert len(a) == len(b) == len(TEXTS)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, rtol=1e-6)
        assert np.shape(x) == np.shape(y)


def test_create_embedding_shape(pair):
    ours, ref = pair
    x, y = ours.create_embedding(TEXTS[:2]), ref.create_embedding(TEXTS[:2])
    assert x.keys() == y.keys() and x["object"] == "list"
    assert x["usage"] == y["usage"]
    assert [d.keys() for d in x["data"]] == [d.keys() for d in y["data"]]
    assert [d["index"] for d in x["data"]] == [0, 1]


def test_pooled_embeddings(smollm2_path):
    """Models that ask for pooling: mean, first or last token of the per-token rows."""
    with Llama(str(smollm2_path), embedding=True, n_ctx=128, verbose=False) as llm:
        rows = np.array(llm.embed(TEXTS[1]))
        for kind, expect in ((1, rows.mean(0)), (2, rows[0]), (3, rows[-1])):
            llm.metadata["llama.pooling_type"] = str(kind)
            np.testing.assert_allclose(llm.embed(TEXTS[1]), expect, rtol=1e-5, atol=1e-6)


def test_embed_needs_embedding_mode(smollm2):
    with pytest.raises(RuntimeError, match="embedding=True"):
        smollm2.embed("x")


def test_embed_too_long_without_truncation(smollm2_path):
    with Llama(str(smollm2_path), embedding=True, n_ctx=64, n_batch=8, verbose=False) as llm:
        with pytest.raises(ValueError, match="exceed batch size"):
            llm.embed("one two three four five six seven eight nine ten", truncate=False)
        assert len(llm.embed("one two three four five six seven eight nine ten")) == 8
