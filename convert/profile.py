"""Step 2, profile: run the model densely through the native runtime on calibration text and
record, per layer and token, the FFN input (the predictor's input) and which neurons are active.

Active means (DESIGN §4):
  - ReLU family (relu_glu, relu_relu_glu): the activation product is non-zero (relu(gate) > 0);
  - GLU family (silu_glu, gelu_glu): the neuron is in the token's top set, the k largest |act|
    with k = round((1 - s) * n_ff) for a sparsity target s. |act| (float16) and each token's
    k-th largest |act| for every candidate s are kept, so the later steps can train for any
    of them without a second forward pass (memory: 2 bytes * n_layer * tokens * (n_embd + n_ff),
    ~1.5 GB for SmolLM2 at the default 12288 tokens).

Also here: `chunk_nll`, the one place that turns a native forward pass into a log-likelihood,
used by the profile (dense reference), the choose step and bench/perplexity.py.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger("convert.profile")

RELU_FAMILY = ("relu_glu", "relu_relu_glu")
GLU_FAMILY = ("silu_glu", "gelu_glu")
WEIGHT_CAP = 50.0  # a neuron's weight in training and in the weighted recall: |act| / token mean, capped


@dataclass
class Profile:
    """Everything the later steps need from the forward passes.

    Tokens 0 .. n_train-1 are the training split, n_train .. n_tokens-1 the validation split
    (whole chunks, never mixed), which thresholds and the sparsity choice are measured on."""
    activation: str
    n_layer: int
    n_embd: int
    n_ff: int
    targets: list[float]       # sparsity target of each label set (ReLU: the measured sparsity)
    ffn_in: np.ndarray         # [n_layer, n_tokens, n_embd] float16: normed FFN input
    act_abs: np.ndarray        # [n_layer, n_tokens, n_ff] float16: |activation product|
    kth: np.ndarray            # [n_targets, n_layer, n_tokens] float16: |act| of the token's k-th largest
    mean_abs_act: np.ndarray   # [n_layer, n_ff] float32
    nonzero_share: np.ndarray  # [n_layer, n_ff] float32: share of tokens with act != 0
    n_train: int
    val_chunks: list[np.ndarray]
    dense_val_nll: float       # mean next-token NLL of the validation chunks, dense
    tokens_per_s: float
    seconds: float
    _freq: dict = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return self.ffn_in.shape[1]

    @property
    def relu(self) -> bool:
        return is_relu_family(self.activation)

    def layer_targets(self, target: int, layer: int, rows=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """([n, n_ff] bool active sets, [n, n_ff] float32 weights) of layer's tokens `rows`:
        a weight is |act| over the token's mean |act|, capped at WEIGHT_CAP."""
        mag = self.act_abs[layer, rows].astype(np.float32)
        if self.relu:
            labels = mag > 0
        else:
            labels = mag >= self.kth[target, layer, rows].astype(np.float32)[:, None]
        mean = mag.mean(axis=-1, keepdims=True)
        mag /= np.maximum(mean, 1e-12)
        return labels, np.minimum(mag, np.float32(WEIGHT_CAP), out=mag)

    def frequency(self, target: int) -> np.ndarray:
        """[n_layer, n_ff] float32: share of all profiled tokens in which each neuron is active."""
        if target not in self._freq:
            self._freq[target] = np.stack([
                np.count_nonzero(self.layer_targets(target, layer)[0], axis=0) / self.n_tokens
                for layer in range(self.n_layer)
            ]).astype(np.float32)
        return self._freq[target]


def is_relu_family(activation: str) -> bool:
    return activation in RELU_FAMILY


def top_counts(n_ff: int, targets: list[float]) -> list[int]:
    """k of each sparsity target: the number of neurons kept per token (at least 1)."""
    return [max(1, min(n_ff, int(round((1.0 - s) * n_ff)))) for s in targets]


def kth_largest(mag: np.ndarray, ks: list[int]) -> np.ndarray:
    """[..., n_ff] -> [len(ks), ...]: the k-th largest value along the last axis, per k (one
    sort for all of them: numpy's SIMD sort beats np.partition with several kth here)."""
    n_ff = mag.shape[-1]
    ordered = np.sort(mag, axis=-1)
    return np.stack([ordered[..., n_ff - k] for k in ks])


def log_softmax_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-row -log softmax(logits)[target], in float64 for the reduction."""
    m = logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=-1, dtype=np.float64)) + m[:, 0]
    return lse - logits[np.arange(len(targets)), targets]


def chunk_nll(ctx, tokens: np.ndarray) -> tuple[float, int]:
    """Decode one chunk from position 0 (rewinding the KV cache) in a logits_all context and
    return (sum of -log p(token[i+1] | tokens[..i]) over i, number of predictions)."""
    ctx.decode(tokens, 0)
    n = len(tokens)
    nll = log_softmax_nll(ctx.logits[:n - 1], tokens[1:])
    return float(nll.sum()), n - 1


def run_profile(model, tokens_train: list[np.ndarray], tokens_val: list[np.ndarray], *,
                targets: list[float], n_threads: int = 2, progress: bool = True, tick=None) -> Profile:
    """Dense forward passes with the capture hook on; `model` is a pypowerinfer NativeModel.
    tick(1) after each chunk, when given, instead of a bar of its own."""
    from pypowerinfer.model import NativeContext
    from tqdm import tqdm

    info = model.info
    activation = info.ffn_act
    n_layer, d, n_ff = info.n_layer, info.n_embd, info.n_ff
    relu = is_relu_family(activation)
    ks = top_counts(n_ff, targets)
    chunks = list(tokens_train) + list(tokens_val)
    n_ctx = max(len(c) for c in chunks)
    n_total = sum(len(c) for c in chunks)
    n_train = sum(len(c) for c in tokens_train)

    ffn_in = np.empty((n_layer, n_total, d), dtype=np.float16)
    act_abs = np.empty((n_layer, n_total, n_ff), dtype=np.float16)
    kth = np.zeros((0 if relu else len(ks), n_layer, n_total), dtype=np.float16)
    cap_in = np.zeros((n_layer, n_ctx, d), dtype=np.float32)
    cap_act = np.zeros((n_layer, n_ctx, n_ff), dtype=np.float32)
    abs_sum = np.zeros((n_layer, n_ff), dtype=np.float64)
    nonzero = np.zeros((n_layer, n_ff), dtype=np.int64)

    # training chunks need no logits (the output matrix is a fifth of SmolLM2's prefill), the
    # validation ones every position's, for their dense log-likelihood
    ctxs = [NativeContext(model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                          logits_all=every, sparse=0) for every in (False, True)]
    nll_sum, nll_n = 0.0, 0
    t0 = time.perf_counter()
    try:
        for ctx in ctxs:
            ctx.set_capture(cap_in, cap_act)
        at = 0
        for i, toks in enumerate(tqdm(chunks, desc="profile", unit="chunk", disable=not progress or tick is not None,
                                      leave=False)):
            n = len(toks)
            if i >= len(tokens_train):  # validation chunk: also its dense log-likelihood
                s, c = chunk_nll(ctxs[1], toks)
                nll_sum, nll_n = nll_sum + s, nll_n + c
            else:
                ctxs[0].decode(toks, 0)
            ffn_in[:, at:at + n] = cap_in[:, :n]
            mag = np.abs(cap_act[:, :n])
            abs_sum += mag.sum(axis=1)
            nonzero += np.count_nonzero(mag, axis=1)
            if not relu:
                kth[:, :, at:at + n] = kth_largest(mag, ks)
            # float16's largest finite value rather than inf
            np.minimum(mag, np.float32(65504), out=mag)
            act_abs[:, at:at + n] = mag
            at += n
            if tick:
                tick(1)
        for ctx in ctxs:
            ctx.set_capture(None, None)
    finally:
        for ctx in ctxs:
            ctx.close()
    seconds = time.perf_counter() - t0
    if relu:
        targets = [float(1.0 - nonzero.sum() / (n_total * n_layer * n_ff))]
    log.info("profiled %d tokens (%d train, %d validation) in %.1f s, %.0f tokens/s", n_total, n_train,
             n_total - n_train, seconds, n_total / seconds)
    return Profile(
        activation=activation, n_layer=n_layer, n_embd=d, n_ff=n_ff, targets=list(targets), ffn_in=ffn_in,
        act_abs=act_abs, kth=kth, mean_abs_act=(abs_sum / n_total).astype(np.float32),
        nonzero_share=(nonzero / n_total).astype(np.float32), n_train=n_train,
        val_chunks=list(tokens_val), dense_val_nll=nll_sum / max(nll_n, 1), tokens_per_s=n_total / seconds,
        seconds=seconds,
    )


def perplexity(path, chunks: list[np.ndarray], *, sparse: int = 0, shift: float = 0.0, n_threads: int = 2,
               progress: bool = False, desc: str = "perplexity", tick=None) -> dict:
    """Perplexity of `chunks` (each decoded from position 0) through the native runtime, with
    PI_SPARSE_* mode `sparse` and threshold shift `shift`; also the share of FFN rows the
    runtime actually computed (1.0 when it ran dense, e.g. on a file without predictors)."""
    from pypowerinfer.model import NativeContext, NativeModel
    from tqdm import tqdm

    model = NativeModel(path)
    n_ctx = max(len(c) for c in chunks)
    ctx = NativeContext(model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                        logits_all=True, sparse=sparse, sparse_threshold_shift=shift)
    try:
        total, count = 0.0, 0
        t0 = time.perf_counter()
        for toks in tqdm(chunks, desc=desc, unit="chunk", disable=not progress or tick is not None, leave=False):
            s, c = chunk_nll(ctx, toks)
            total, count = total + s, count + c
            if tick:
                tick(1)
        seconds = time.perf_counter() - t0
        stats = ctx.stats()
    finally:
        ctx.close()
        model.close()
    nll = total / max(count, 1)
    rows = stats["ffn_rows_done"] / stats["ffn_rows_dense"] if stats["ffn_rows_dense"] else 1.0
    return {"ppl": float(np.exp(nll)), "nll": nll, "tokens": count, "ffn_rows_share": float(rows),
            "seconds": seconds, "sparse": sparse, "shift": shift}
