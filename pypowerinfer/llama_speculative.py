"""Draft models for speculative decoding, as llama-cpp-python names them. The drafts are here;
`Llama(draft_model=...)` raises NotImplementedError until speculative decoding exists ([batch])."""
from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        """The draft tokens that follow input_ids."""


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Prompt lookup: the tokens that followed the earliest earlier occurrence of the sequence's
    last n-gram, longest n-gram first (Saxena's prompt-lookup decoding, as llama-cpp-python)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    @staticmethod
    def find_candidate_pred_tokens(input_ids: npt.NDArray[np.intc], max_ngram_size: int,
                                   num_pred_tokens: int) -> npt.NDArray[np.intc]:
        ids = np.asarray(input_ids)
        n = len(ids)
        for size in range(min(max_ngram_size, n - 1), 0, -1):
            windows = np.lib.stride_tricks.sliding_window_view(ids, size)
            starts = np.flatnonzero((windows == ids[-size:]).all(axis=1)) + size
            starts = starts[starts < n]  # the last n-gram itself has nothing after it
            if len(starts):
                return ids[starts[0]: starts[0] + num_pred_tokens]
        return np.array([], dtype=np.intc)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        return self.find_candidate_pred_tokens(input_ids, self.max_ngram_size, self.num_pred_tokens)
