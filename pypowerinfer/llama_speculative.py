"""Draft models for speculative decoding, as llama-cpp-python names them: the interface only.
`Llama(draft_model=...)` raises NotImplementedError until speculative decoding exists."""
from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        """The draft tokens that follow input_ids."""
