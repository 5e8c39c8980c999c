"""The default a converted file carries: does sparse decode pay, on the machine converting it?

Measured on the chosen setting only (every candidate is ranked by its batched validation
perplexity before this):

    heldout_chunks(tokenizer)      text the converter never calibrated on: the held-out topics of
                                   pydoc_data.topics (corpus.heldout_entries), HELDOUT_CHUNKS chunks
                                   of HELDOUT_PREDICTIONS next-token predictions each
    measure(path, chunks, ...)     perplexity of the decode path, dense and sparse: one decode([t])
                                   at a time, each chunk from position 0, the path generation runs;
                                   and the decode speed of each: the SPEED_STEPS one-token steps
                                   after a SPEED_PROMPT-token prompt, best of SPEED_REPEATS chunks,
                                   the two modes taking turns chunk by chunk
    decide(...)                    (sparse by default?, the one-line reason written to the file)

The keys written: powerinfer.sparse_default (BOOL) and powerinfer.sparse_decision (STRING);
`Llama(sparse=None)` follows them (pypowerinfer/model.py: sparse_policy).

ReGLU experts (smallthinker) have no predictors, but a one-token expert can skip its dead
neurons' up rows and down blocks, which gives the same logits and pays only where enough
neurons are dead:

    measure_expert_skip(path, chunks, ...)  the same held-out decode, with the model loaded
                                            skipping and dense (pi_model_params.moe_skip_rows)
    decide_expert_skip(...)                 (skip by default?, the one-line reason)

written as powerinfer.moe_skip_rows (BOOL) and powerinfer.moe_skip_decision (STRING), which
the loader follows (pypowerinfer/model.py: moe_skip_policy).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from convert import corpus
from convert.profile import log_softmax_nll

HELDOUT_CHUNKS = 4
HELDOUT_PREDICTIONS = 256       # per chunk: 4 x 256 = 1,024 held-out tokens predicted
SPEED_PROMPT = 8
SPEED_STEPS = 64
SPEED_REPEATS = 3
DEFAULT_MIN_SPEEDUP = 1.1       # sparse must decode at least this much faster than dense


@dataclass
class Measured:
    """What the decision rests on."""
    dense_ppl: float            # token by token, sparse off
    sparse_ppl: float           # token by token, sparse decode on
    rows_share: float           # share of FFN rows the sparse decode computed
    dense_tok_s: float
    sparse_tok_s: float
    speed_assumed: bool = False  # --assume-speedup: no timing (tests)
    tokens: int = 0

    @property
    def ppl_increase_pct(self) -> float:
        return 100.0 * (self.sparse_ppl / self.dense_ppl - 1.0)

    @property
    def speedup(self) -> float:
        return self.sparse_tok_s / self.dense_tok_s if self.dense_tok_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "ppl_increase_pct": self.ppl_increase_pct, "speedup": self.speedup}


def heldout_chunks(encode: Callable[[bytes], list[int]], bos: int | None) -> list[np.ndarray]:
    """HELDOUT_CHUNKS chunks of held-out text, each HELDOUT_PREDICTIONS + 1 tokens (with BOS when
    the model adds one)."""
    n_ctx = HELDOUT_PREDICTIONS + 1
    step = n_ctx - (bos is not None)
    ids = corpus.token_stream(encode, corpus.heldout_entries(), step * HELDOUT_CHUNKS)
    chunks = [c for c in corpus.chunk(ids, n_ctx, bos) if len(c) == n_ctx][:HELDOUT_CHUNKS]
    if len(chunks) < HELDOUT_CHUNKS:
        raise ValueError(f"the held-out text gives only {len(ids)} tokens")
    return chunks


@dataclass
class ExpertsMeasured:
    """What a ReGLU MoE model's choice rests on: held-out decode with dead expert rows skipped
    and with every row computed."""
    dense_ppl: float
    skip_ppl: float
    rows_share: float           # share of expert rows the skipping decode computed
    dense_tok_s: float
    skip_tok_s: float
    speed_assumed: bool = False  # --assume-speedup: no timing (tests)
    tokens: int = 0

    @property
    def speedup(self) -> float:
        return self.skip_tok_s / self.dense_tok_s if self.dense_tok_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "speedup": self.speedup}


def _context(path, n_ctx: int, sparse: int, n_threads: int, moe_skip_rows: bool | None = None):
    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(path, moe_skip_rows=moe_skip_rows)
    ctx = NativeContext(model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                        logits_all=False, sparse=sparse)
    return model, ctx


def _decode_chunk(ctx, toks: np.ndarray, timed: range) -> tuple[float, float]:
    """Decode `toks` one token per step from position 0; (sum of next-token NLLs, seconds the
    steps at the positions in `timed` took, the decode calls only)."""
    one = np.zeros(1, np.int32)
    nll, seconds = 0.0, 0.0
    for i in range(len(toks) - 1):
        one[0] = toks[i]
        t0 = time.perf_counter()
        ctx.decode(one, i)
        if i in timed:
            seconds += time.perf_counter() - t0
        nll += float(log_softmax_nll(ctx.logits[:1], toks[i + 1:i + 2])[0])
    return nll, seconds


def measure(path, chunks: list[np.ndarray], *, n_threads: int, tick: Callable[[int], None] | None = None,
            dense: Measured | None = None) -> Measured:
    """Token-by-token perplexity of `chunks`, dense (sparse off) and sparse (sparse decode), from
    two contexts of the same file, threads and size, taking turns chunk by chunk; the decode
    speed of each is the best of its first SPEED_REPEATS chunks' SPEED_STEPS steps after the
    first SPEED_PROMPT tokens (the tokens are fed, not sampled, so only decode is timed).
    `dense`: an earlier measurement of the same model and chunks whose dense figures are kept
    (dense decode does not read the predictors), so only the sparse side runs."""
    modes = [dict(sparse=1)] if dense else [dict(sparse=0), dict(sparse=1)]
    ppl, tok_s, rows, count = _race(path, chunks, modes, n_threads=n_threads, tick=tick)
    return Measured(dense_ppl=dense.dense_ppl if dense else ppl[0], sparse_ppl=ppl[-1], rows_share=rows,
                    dense_tok_s=dense.dense_tok_s if dense else tok_s[0], sparse_tok_s=tok_s[-1], tokens=count)


def measure_expert_skip(path, chunks: list[np.ndarray], *, n_threads: int,
                        tick: Callable[[int], None] | None = None) -> ExpertsMeasured:
    """`measure` for a model with ReGLU experts: the model loaded computing every expert row and
    loaded skipping the dead ones (each with its own up_exps layout), taking turns chunk by chunk."""
    modes = [dict(sparse=0, moe_skip_rows=False), dict(sparse=0, moe_skip_rows=True)]
    ppl, tok_s, rows, count = _race(path, chunks, modes, n_threads=n_threads, tick=tick)
    return ExpertsMeasured(dense_ppl=ppl[0], skip_ppl=ppl[1], rows_share=rows, dense_tok_s=tok_s[0],
                           skip_tok_s=tok_s[1], tokens=count)


def _race(path, chunks: list[np.ndarray], modes: list[dict], *, n_threads: int,
          tick: Callable[[int], None] | None) -> tuple[list[float], list[float], float, int]:
    """One context per mode (_context's keywords), taking turns chunk by chunk: (token-by-token
    perplexity of each, decode tok/s of each (the best of the first SPEED_REPEATS chunks), the
    share of FFN rows the last mode computed, the predictions made per mode)."""
    if len(chunks) < SPEED_REPEATS or len(chunks[0]) <= SPEED_PROMPT + SPEED_STEPS:
        raise ValueError(f"measure needs {SPEED_REPEATS} chunks of over {SPEED_PROMPT + SPEED_STEPS} tokens")
    runs = [_context(path, max(len(c) for c in chunks), n_threads=n_threads, **mode) for mode in modes]
    timed = range(SPEED_PROMPT, SPEED_PROMPT + SPEED_STEPS)
    nll, best, count = [0.0] * len(runs), [np.inf] * len(runs), 0
    try:
        for j, toks in enumerate(chunks):
            for k, (_, ctx) in enumerate(runs):
                s, seconds = _decode_chunk(ctx, toks, timed if j < SPEED_REPEATS else range(0))
                nll[k] += s
                if j < SPEED_REPEATS:
                    best[k] = min(best[k], seconds)
                if tick:
                    tick(1)
            count += len(toks) - 1
        stats = runs[-1][1].stats()
    finally:
        for model, ctx in runs:
            ctx.close()
            model.close()
    rows = stats["ffn_rows_done"] / stats["ffn_rows_dense"] if stats["ffn_rows_dense"] else 1.0
    return [float(np.exp(x / count)) for x in nll], [SPEED_STEPS / b for b in best], float(rows), count


def decide(m: Measured, *, max_ppl_increase: float, min_speedup: float = DEFAULT_MIN_SPEEDUP) -> tuple[bool, str]:
    """Sparse by default only when it decodes at least min_speedup x dense and its token-by-token
    held-out perplexity is within max_ppl_increase % of dense; the reason in one line."""
    speed = f"{m.speedup:.2f}x dense decode" + (" (assumed)" if m.speed_assumed else "")
    ppl = f"{m.ppl_increase_pct:+.1f}% held-out ppl"
    faster, within = m.speedup >= min_speedup, m.ppl_increase_pct <= max_ppl_increase
    if faster and within:
        return True, f"sparse: {speed} at {ppl}, {m.rows_share:.0%} of FFN rows computed"
    why = ([] if faster else [f"decode under {min_speedup:g}x"]) + \
          ([] if within else [f"ppl over +{max_ppl_increase:g}%"])
    return False, (f"sparse would compute {m.rows_share:.0%} of rows at {ppl} ({speed}): dense chosen "
                   f"({', '.join(why)})")


def decision_keys(sparse_default: bool, reason: str) -> dict:
    """The metadata of the decision, named where the runtime reads them."""
    from gguf import GGUFValueType
    from pypowerinfer.model import DECISION_KEY, DEFAULT_KEY

    return {DEFAULT_KEY: (bool(sparse_default), GGUFValueType.BOOL), DECISION_KEY: (reason, GGUFValueType.STRING)}


def decide_expert_skip(m: ExpertsMeasured) -> tuple[bool, str]:
    """Skip dead expert rows by default only when that decodes faster than dense experts here:
    the logits are the same either way (the same products and sums), so speed alone decides."""
    speed = (f"{m.skip_tok_s:.1f} tok/s vs dense experts {m.dense_tok_s:.1f} tok/s"
             + (" (assumed)" if m.speed_assumed else " on this machine"))
    on = m.skip_tok_s > m.dense_tok_s
    return on, (f"skipping dead expert rows ({m.rows_share:.0%} of expert rows computed): {speed}: "
                f"{'skipping' if on else 'dense'} chosen")


def expert_skip_keys(skip: bool, reason: str) -> dict:
    """The metadata of the experts' choice, named where the runtime reads them."""
    from gguf import GGUFValueType
    from pypowerinfer.model import SKIP_DECISION_KEY, SKIP_KEY

    return {SKIP_KEY: (bool(skip), GGUFValueType.BOOL), SKIP_DECISION_KEY: (reason, GGUFValueType.STRING)}
