"""One sequence's generation, the same for `Llama` (one sequence in its own context) and
`BatchEngine` (many sequences in one context):

- `Sampling`: what a generation samples with: SamplingParams, logits processors, stopping
  criteria and grammar, as llama-cpp-python's arguments give them.
- `TokenPicker`: a sequence's sampling state: its sampler (RNG, mirostat), the grammar's state and
  where its sampled tokens begin; `next()` turns a position's logits into the next token, in the
  order llama-cpp-python's `generate` runs the stages.
- `StopRules`: when a completion ends: an end-of-generation token, max_tokens, a stop string.
- `CompletionText`: a completion's text as its tokens come, cut at the first stop string, and the
  part of it that can be streamed (no split UTF-8 character, no possible start of a stop string).
- `Drafter`: speculative decoding's guesses and how many to ask for.

Whoever evaluates the tokens (Llama.eval, the batch's step) hands each position's logits to the
sequence's TokenPicker; completion.run_completion turns the tokens into llama-cpp-python's dicts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from .llama_speculative import LlamaDraftModel
from .sampling import LogitsProcessorList, Sampler, SamplingParams, StoppingCriteriaList
from .utf8 import utf8_complete_prefix


@dataclass
class Sampling:
    """How one generation picks its tokens."""

    params: SamplingParams
    logits_processor: Optional[LogitsProcessorList] = None
    stopping_criteria: Optional[StoppingCriteriaList] = None
    grammar: Any = None  # grammar.LlamaGrammar


class TokenPicker:
    """One sequence's sampling: `sampler` (kept by the caller: Llama's outlives a generation),
    `sampling`'s rules, and `first`, the position where the sampled tokens begin (penalties see
    only those, as in llama-cpp-python; None: none were sampled, a standalone sample())."""

    def __init__(self, sampler: Sampler, sampling: Sampling, tokenizer, first: Optional[int] = None):
        self.sampler, self.sampling, self.tokenizer, self.first = sampler, sampling, tokenizer, first

    def start(self, seed: Optional[int], first: int) -> None:
        """A new generation whose sampled tokens begin at `first`: the RNG restarts from `seed` and
        the grammar from its root, as llama-cpp-python builds its sampler afresh per generation."""
        self.sampler.reseed(seed)
        if self.sampling.grammar is not None:
            self.sampling.grammar.reset()
        self.first = first

    def next(self, logits: np.ndarray, ids: np.ndarray, end: int) -> Optional[int]:
        """The token after ids[:end], sampled from `logits` (that position's row); None when the
        stopping criteria end the generation there (checked after sampling, as the peer does)."""
        s = self.sampling
        start = end if self.first is None else min(self.first, end)
        mask = s.grammar.allowed(self.tokenizer) if s.grammar is not None else None
        token = self.sampler.sample(logits, ids[start:end], s.params, logits_processor=s.logits_processor,
                                    input_ids=ids[:end], grammar_mask=mask)
        if s.grammar is not None:
            s.grammar.accept_token(self.tokenizer, token)
        if s.stopping_criteria is not None and s.stopping_criteria(ids[:end], logits):
            return None
        return token


class StopRules:
    """When a completion of at most `max_tokens` tokens ends: at an end-of-generation token (not
    part of the completion), at its max_tokens-th token, or at the first of `stops` in its text."""

    def __init__(self, tokenizer, max_tokens: int, stops: List[bytes]):
        self.tokenizer, self.max_tokens, self.stops = tokenizer, max_tokens, stops

    def ends_before(self, token: int) -> bool:
        return self.tokenizer.is_eog(token)

    def full(self, n_generated: int) -> bool:
        return n_generated >= self.max_tokens

    def last(self, token: int, n_generated: int) -> bool:
        """Whether nothing is sampled after `token`, the n_generated-th."""
        return self.ends_before(token) or self.full(n_generated)


def stop_holdback(text: bytes, stops: List[bytes]) -> int:
    """Bytes at the end of `text` that could be the start of a stop sequence."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


def find_stop(text: bytes, stops: List[bytes]) -> Optional[int]:
    """Index of the earliest stop sequence in `text`, or None."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


class CompletionText:
    """The text of a completion's tokens (`detokenize(tokens) -> bytes`), cut at the first stop
    string; `emitted` bytes of it have been streamed."""

    def __init__(self, detokenize: Callable[[Sequence[int]], bytes], stops: List[bytes]):
        self.detokenize, self.stops = detokenize, stops
        self.tokens: List[int] = []
        self.text = b""
        self.emitted = 0

    def add(self, token: int) -> bool:
        """Append a token; True when the text now holds a stop string (cut off, with what follows)."""
        self.tokens.append(token)
        self.text = self.detokenize(self.tokens)
        stop_at = find_stop(self.text, self.stops)
        if stop_at is None:
            return False
        self.text = self.text[:stop_at]
        return True

    def streamable(self) -> int:
        """Where the text that can be streamed now ends: before a split character or what may
        begin a stop string."""
        return utf8_complete_prefix(self.text[: len(self.text) - stop_holdback(self.text, self.stops)])

    def take(self, upto: int) -> str:
        """The text from what was streamed to `upto`, now streamed."""
        piece = self.text[self.emitted: upto].decode("utf-8", errors="ignore")
        self.emitted = max(self.emitted, upto)
        return piece

    def emitted_chars(self) -> int:
        """Characters streamed so far (logprobs' text offsets count characters)."""
        return len(self.text[: self.emitted].decode("utf-8", "ignore"))


class Drafter:
    """Speculative decoding's draft side: `draft_model` guesses the tokens after a sequence; the
    next draft's length follows the guesses that held, up to `cap`."""

    def __init__(self, draft_model: LlamaDraftModel, cap: int):
        self.draft_model, self.cap = draft_model, cap
        self.length = cap

    def guesses(self, ids: np.ndarray, room: int) -> List[int]:
        """The draft model's guesses after `ids`, at most the draft length and `room`."""
        room = min(self.length, room)
        if room <= 0:
            return []
        return [int(t) for t in np.asarray(self.draft_model(ids))[:room]]

    def adapt(self, guessed: int, accepted: int) -> None:
        """The next draft's length: doubled after a draft held entirely, else one past the guesses
        that held. A step of k tokens costs more than one here (the weights are read once, but
        the k dot products are computed), so guesses that fail are not free."""
        if guessed:
            self.length = min(self.cap, 2 * self.length) if accepted == guessed else accepted + 1
