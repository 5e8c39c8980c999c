"""Embedding pooling: a text's per-token hidden states -> what `Llama.embed` returns for it.

The pooling types are llama.cpp's LLAMA_POOLING_TYPE_*, read from the GGUF's
{arch}.pooling_type; rank (4) scores pairs and has no embedding here.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

POOLING_NONE = 0
# rows [n_tokens][n_embd] -> one text's embedding
POOLINGS = {
    POOLING_NONE: lambda rows: rows,
    1: lambda rows: rows.mean(axis=0),   # mean
    2: lambda rows: rows[0],             # cls: the first token
    3: lambda rows: rows[-1],            # last token
}


def pooling_of(metadata: Mapping[str, str]) -> int:
    """The model's {arch}.pooling_type (0 none when absent)."""
    arch = metadata.get("general.architecture", "llama")
    return int(metadata.get(f"{arch}.pooling_type", POOLING_NONE))


def check_pooling(pooling: int) -> None:
    if pooling not in POOLINGS:
        raise NotImplementedError(f"pooling type {pooling} (rank) is not supported")


def pool(rows: np.ndarray, pooling: int, normalize: bool) -> list:
    """One text's embedding as float64 lists, L2-normalised with normalize (zero rows stay zero)."""
    rows = POOLINGS[pooling](rows)
    if normalize:
        norms = np.linalg.norm(rows, axis=-1, keepdims=True)
        rows = np.divide(rows, norms, out=np.array(rows, dtype=np.float64), where=norms > 0)
    return np.asarray(rows, dtype=np.float64).tolist()
