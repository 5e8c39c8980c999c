"""llama-cpp-python's defaults for a completion's arguments, in one place: `Llama`'s signatures
(create_completion, create_chat_completion, sample, generate), `SamplingParams` and the server's
request bodies all read them from here."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class CompletionDefaults:
    max_tokens: Optional[int] = 16  # None or <= 0: until the context is full
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    tfs_z: float = 1.0  # accepted, as llama-cpp-python 0.3.36 accepts it; no sampler reads it
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    penalty_last_n: int = 64  # Llama(last_n_tokens_size=...)


COMPLETION = CompletionDefaults()
CHAT = replace(COMPLETION, max_tokens=None, temperature=0.2)  # create_chat_completion's
