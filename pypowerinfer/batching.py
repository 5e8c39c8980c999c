"""Many completions at once on one model: continuous batching over the sequences of one context.

`BatchEngine(llm, n_parallel)` runs up to n_parallel completions together. Its
`create_completion` and `create_chat_completion` take `Llama`'s arguments and return what
`Llama`'s return, and may be called from many threads at once: each call waits for a free slot,
joins the running batch at the next step and leaves it when done. One thread steps the batch: every
sequence's next token (and the next chunk of any prompt still being read) goes through the
weights in one native call (`NativeContext.decode_batch`), and each request then samples its own
token with its own sampler, seed, grammar, penalties and logits processors. The consumer's thread
turns tokens into chunks (stop strings, UTF-8, logprobs) as `Llama` does. A request that its
consumer stops reading (a stream closed, a client gone) frees its slot at the next step.

`n_ctx` is the total, shared among the slots as in llama.cpp's server: each sequence holds
n_ctx // n_parallel positions. A new request reuses the longest prefix of its prompt that any slot
holds (copied into its own slot when another's), so a shared system prompt is read once.

A step of several tokens runs the FFN dense, as prompts do; a step of one token (one request alone)
follows the file's sparse decision, as `Llama` does.
"""
from __future__ import annotations

import collections
import random
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .chat import ChatFormats
from .completion import CompletionAPI, CompletionRequest, run_completion
from .generator import StopRules, TokenPicker
from .sampling import Sampler
from .state import longest_token_prefix

if TYPE_CHECKING:
    from .llama import Llama


class _Request:
    """One completion in the batch: its tokens, how it picks the next one, when it ends, and the
    tokens not yet read by its consumer."""

    def __init__(self, engine: "BatchEngine", req: CompletionRequest, seed: int):
        self.prompt = list(req.prompt_tokens)
        self.picker = TokenPicker(Sampler(engine.n_vocab, seed), req.sampling, engine.tokenizer_)
        self.picker.start(seed, first=len(self.prompt))
        self.rules = StopRules(engine.tokenizer_, req.max_tokens, req.stops)
        self.tokens = np.zeros(engine.seq_ctx, dtype=np.intc)  # prompt, then what was sampled
        self.tokens[: len(self.prompt)] = self.prompt
        self.n_tokens = len(self.prompt)
        self.n_eval = 0  # positions whose keys and values are in the slot
        self.slot = -1
        self.out: collections.deque = collections.deque()  # sampled tokens the consumer has not taken
        self.done = False  # nothing more will be sampled
        self.cancelled = False  # the consumer stopped reading
        self.error: Optional[BaseException] = None
        self.rows: Optional[Dict[int, np.ndarray]] = {} if req.logprobs is not None else None

    @property
    def generated(self) -> int:
        return self.n_tokens - len(self.prompt)


class _RequestOutput:
    """What run_completion reads for one request (completion.CompletionOutput): the tokenizer, and
    as `scores` the logits rows kept of this request's positions."""

    cache = None

    def __init__(self, tokenizer, rows: Optional[Dict[int, np.ndarray]]):
        self.tokenizer_ = tokenizer
        self.scores = rows

    def save_state(self):  # run_completion calls it only with a cache, which a request has not
        raise NotImplementedError


class BatchEngine(CompletionAPI):
    """Continuous batching of completions over `n_parallel` sequences of one context, on the
    model, tokenizer, chat formats and options of `llm` (see the module's text)."""

    PREFILL_CHUNK = 128  # prompt tokens in a step beside decoding sequences (a 64 x 64 tile's multiple)

    def __init__(self, llm: "Llama", n_parallel: int = 4, *, n_ctx: Optional[int] = None, ahead: int = 8):
        if not isinstance(n_parallel, int) or n_parallel < 1:
            raise ValueError(f"n_parallel must be a positive integer, not {n_parallel!r}")
        self._ctx = llm.batch_context(n_parallel, n_ctx or llm.n_ctx())
        self._llm = llm  # its chat_format, read at each chat completion
        self.n_parallel = n_parallel
        self.n_vocab = llm.n_vocab()
        # what CompletionAPI reads
        self.tokenizer_ = llm.tokenizer_
        self.last_n_tokens_size = llm.last_n_tokens_size
        self.model_path = llm.model_path
        self._chat_formats = ChatFormats(llm.metadata, llm.tokenizer_)
        self.seq_ctx = self._ctx.seq_ctx
        self._n_ctx = self.seq_ctx  # a sequence's positions
        self._logits_all = True  # logprobs of generated tokens are kept per request (rows)
        self.n_batch = llm.n_batch
        self._ahead = max(1, ahead)
        self._rng = random.Random(llm.context_params.seed)
        # a step's batch, allocated once
        self._tok = np.zeros(self.n_batch, dtype=np.int32)
        self._pos = np.zeros(self.n_batch, dtype=np.int32)
        self._seq = np.zeros(self.n_batch, dtype=np.int32)
        self._flags = np.zeros(self.n_batch, dtype=np.int8)
        # slot s holds positions [0, ctx.seq_len(s)) of _slot_tokens[s]
        self._slot_tokens: List[np.ndarray] = [np.zeros(0, dtype=np.intc) for _ in range(n_parallel)]
        self._slots: List[Optional[_Request]] = [None] * n_parallel
        self._pending: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.steps = 0  # batch steps run, and the tokens they evaluated
        self.step_tokens = 0
        self._thread = threading.Thread(target=self._loop, name="pypowerinfer-batch", daemon=True)
        self._thread.start()

    # ---- CompletionAPI's methods, run on the batch ----
    def _require_decoder(self) -> None:
        if self._closed:
            raise RuntimeError("the BatchEngine is closed")

    def _chat_format(self):
        return self._chat_formats.get(self._llm.chat_format)

    def _run(self, req: CompletionRequest) -> Iterator[dict]:
        if req.echo and req.logprobs is not None:
            raise NotImplementedError("BatchEngine keeps the logits of generated tokens only: echo with logprobs "
                                      "needs the prompt's, use Llama(logits_all=True)")
        seed = req.seed if req.seed is not None else self._rng.randint(0, 2**32)
        request = _Request(self, req, seed)
        return run_completion(_RequestOutput(self.tokenizer_, request.rows), req, lambda: self._tokens(request))

    def create_completions(self, requests: Sequence[Dict[str, Any]]) -> Iterator[Tuple[int, dict]]:
        """Many completions at once: each of `requests` is create_completion's keyword arguments
        (stream is set); yields (index, chunk) as the chunks come, in no fixed order across requests."""
        streams = [self.create_completion(**{**r, "stream": True}) for r in requests]
        live = dict(enumerate(streams))
        try:
            while live:
                for i, stream in list(live.items()):
                    chunk = next(stream, None)
                    if chunk is None:
                        del live[i]
                    else:
                        yield i, chunk
        finally:
            for stream in live.values():
                stream.close()

    # ---- the consumer's side ----
    def _tokens(self, r: _Request) -> Iterator[int]:
        """The request's tokens as they are sampled; closing it leaves the batch."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the BatchEngine is closed")
            self._pending.append(r)
            self._cond.notify_all()
        try:
            while True:
                with self._cond:
                    while not r.out and not r.done:
                        self._cond.wait()
                    if r.out:
                        token = r.out.popleft()
                        self._cond.notify_all()  # room: the request may step again
                    elif r.error is not None:
                        raise r.error
                    else:
                        return
                yield token
        finally:
            with self._cond:
                r.cancelled = True
                self._cond.notify_all()

    # ---- the batch's thread ----
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._runnable():
                    self._cond.wait()
                if self._closed:
                    return
                self._leave_and_join()
                step = self._plan()
            if step:
                self._step(step)

    def _wants_step(self, r: _Request) -> bool:
        return not r.done and not r.cancelled and (r.n_eval < r.n_tokens - 1 or len(r.out) < self._ahead)

    def _runnable(self) -> bool:
        free = any(s is None or s.cancelled or s.done for s in self._slots)
        return (self._pending and free) or any(
            s is not None and (s.cancelled or s.done or self._wants_step(s)) for s in self._slots)

    def _leave_and_join(self) -> None:
        """Free the slots of finished and abandoned requests; give free slots to waiting ones."""
        for i, s in enumerate(self._slots):
            if s is not None and (s.cancelled or s.done):
                s.done = True
                self._slots[i] = None
        while self._pending and None in self._slots:
            r = self._pending.popleft()
            if r.cancelled:
                continue
            self._place(r)

    def _place(self, r: _Request) -> None:
        """A free slot for r, keeping the longest prefix of its prompt any slot holds (at least its
        last prompt token is evaluated again, for its logits)."""
        prompt = r.tokens[: len(r.prompt) - 1]
        shared = [longest_token_prefix(held[: self._ctx.seq_len(i)], prompt)
                  for i, held in enumerate(self._slot_tokens)]
        slot = max((i for i, s in enumerate(self._slots) if s is None), key=shared.__getitem__)
        source = max(range(self.n_parallel), key=shared.__getitem__)
        keep = shared[source]
        if keep > shared[slot]:
            self._ctx.seq_copy_prefix(source, slot, keep)
        else:
            self._ctx.seq_truncate(slot, keep)
        r.slot, r.n_eval = slot, keep
        self._slots[slot] = r
        self._slot_tokens[slot] = r.tokens

    def _plan(self) -> List[Tuple[_Request, int, int]]:
        """(request, first position, tokens) of the next step: every decoding request's token
        first, then prompt chunks in the budget left: all of n_batch when no one decodes, else
        PREFILL_CHUNK, so that a long prompt joining delays the others' next token by a step of
        that size rather than of its whole length."""
        step, budget = [], self.n_batch
        active = [s for s in self._slots if s is not None and self._wants_step(s)]
        for r in active:
            if r.n_eval == r.n_tokens - 1:
                step.append((r, r.n_eval, 1))
                budget -= 1
        if step:
            budget = min(budget, self.PREFILL_CHUNK)
        for r in active:
            if r.n_eval < r.n_tokens - 1 and budget > 0:
                n = min(r.n_tokens - r.n_eval, budget)
                step.append((r, r.n_eval, n))
                budget -= n
        return step

    def _step(self, step: List[Tuple[_Request, int, int]]) -> None:
        n = 0
        for r, first, count in step:
            self._tok[n: n + count] = r.tokens[first: first + count]
            self._pos[n: n + count] = np.arange(first, first + count)
            self._seq[n: n + count] = r.slot
            self._flags[n: n + count] = 0
            self._flags[n + count - 1] = first + count == r.n_tokens  # the prompt's end, or a sampled token
            n += count
        try:
            self._ctx.decode_batch(self._tok[:n], self._pos[:n], self._seq[:n], self._flags[:n])
        except Exception as exc:  # noqa: BLE001 - each request's consumer raises it
            with self._cond:
                for r, _, _ in step:
                    r.error, r.done = exc, True
                self._cond.notify_all()
            return
        self.steps += 1
        self.step_tokens += n
        row = 0
        sampled = []
        for r, first, count in step:
            r.n_eval = first + count
            if r.n_eval < r.n_tokens:
                continue  # a prompt's chunk before its end: no logits
            sampled.append((r, self._sample(r, self._ctx.logits[row])))
            row += 1
        with self._cond:
            for r, token in sampled:
                self._deliver(r, token)
            self._cond.notify_all()

    def _sample(self, r: _Request, logits: np.ndarray) -> Optional[int]:
        """r's next token from the logits of its last position (None: the request's stopping
        criteria ended it), or the exception raised."""
        end = r.n_tokens
        try:
            token = r.picker.next(logits, r.tokens, end)
        except Exception as exc:  # noqa: BLE001 - the request's consumer raises it
            return exc
        if r.rows is not None and token is not None:
            r.rows[end - 1] = logits.copy()
        return token

    def _deliver(self, r: _Request, token) -> None:
        if isinstance(token, BaseException):
            r.error, r.done = token, True
            return
        if token is None or r.cancelled:
            r.done = True
            return
        r.out.append(token)
        r.tokens[r.n_tokens] = token
        r.n_tokens += 1
        # max_tokens fits the sequence's positions (CompletionAPI._complete), so the slot never overflows
        r.done = r.rules.last(token, r.generated)

    # ---- the engine's state ----
    def busy_slots(self) -> int:
        with self._cond:
            return sum(s is not None and not s.done for s in self._slots)

    def waiting(self) -> int:
        with self._cond:
            return sum(not r.cancelled for r in self._pending)

    def close(self) -> None:
        """Stop the batch's thread (requests still running end with an error) and free the context."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for r in [*self._pending, *[s for s in self._slots if s is not None]]:
                if not r.done:
                    r.error, r.done = RuntimeError("the BatchEngine was closed"), True
            self._cond.notify_all()
        self._thread.join()
        self._ctx.close()

    def __enter__(self) -> "BatchEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
