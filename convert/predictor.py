"""Step 2, train: one small predictor per layer, in numpy (float32, no autograd framework).

    logits = fc2 @ relu(fc1 @ x)      x: the normed FFN input (n_embd), logits: one per neuron

fc1 is (r, n_embd) and fc2 (n_ff, r) in numpy order, i.e. GGUF ne {n_embd, r} and {r, n_ff}:
PowerInfer's layout, without biases (its files have none and so the runtime reads none).
Trained with binary cross-entropy on the profile's active sets, positives weighted by their
|act| (see `train`), Adam, big minibatches. A neuron is predicted active when its logit >= the
layer's threshold, chosen on validation tokens for a target *weighted* recall: the share of the
active neurons' |act| weight that the predicted set covers (`choose_threshold`). Counting every
active neuron alike would let a threshold drop the few that carry most of the output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Predictor:
    fc1: np.ndarray  # (r, n_embd) float32
    fc2: np.ndarray  # (n_ff, r) float32

    @property
    def rank(self) -> int:
        return self.fc1.shape[0]

    def logits(self, x: np.ndarray) -> np.ndarray:
        """[n, n_embd] -> [n, n_ff] float32."""
        h = np.maximum(np.asarray(x, np.float32) @ self.fc1.T, 0.0)
        return h @ self.fc2.T


@dataclass
class Quality:
    """How a predictor with a threshold does on labelled tokens."""
    threshold: float
    recall: float     # weighted recall: share of the active pairs' weight (|act|-based) predicted
    count_recall: float  # share of truly active (token, neuron) pairs predicted active
    precision: float  # share of predicted pairs truly active
    sparsity: float   # share of (token, neuron) pairs predicted inactive: FFN rows skipped
    label_sparsity: float  # share truly inactive (the oracle's sparsity)

    def as_dict(self) -> dict:
        return {k: float(v) for k, v in self.__dict__.items()}


class _Adam:
    def __init__(self, params: list[np.ndarray], lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps = params, lr, b1, b2, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads: list[np.ndarray], lr: float | None = None) -> None:
        self.t += 1
        lr = self.lr if lr is None else lr
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * (g * g)
            p -= (lr / c1) * m / (np.sqrt(v / c2) + self.eps)


def default_rank(n_embd: int, n_ff: int) -> int:
    """A multiple of 64 near n_ff / 24 (64 for SmolLM2's 1536), at least 64: fc1 + fc2 in F16
    are then ~(n_embd + n_ff) / (12 n_embd) of the FFN's F16 bytes (~5% for 7B shapes). 64, so
    fc2's rows hold an even number of 32-blocks: the SIMD dot products take blocks in pairs."""
    return max(64, 64 * int(round(n_ff / 24 / 64)))


def rank_ladder(max_rank: int) -> list[int]:
    """The ranks a layer's predictor is tried at, smallest first: 64, 128, 256, ... below
    max_rank, then max_rank itself."""
    ladder = [r for r in (64 << i for i in range(12)) if r < max_rank]
    return ladder + [max_rank]


def train(x: np.ndarray, targets, n_ff: int, rank: int, *, epochs: int = 4, batch: int = 256,
          lr: float = 1e-2, pos_weight: float | None = None, seed: int = 0, init: Predictor | None = None) -> Predictor:
    """Fit fc1/fc2 to the active sets of the rows of x [N, n_embd].

    `targets(rows)` returns ([len(rows), n_ff] bool labels, [len(rows), n_ff] float32 weights):
    a positive's loss is scaled by pos_weight * (1 + weight), so missing a neuron with a large
    |act| costs more than missing one at the edge of the top set (without this, rare massive
    activations, e.g. SmolLM2's ~3000 in layer 11, are never predicted and the layer's output
    is lost). pos_weight None: negatives / positives of the first batch, clipped to [1, 10].
    The learning rate decays linearly to 10% over the run. `init` warm-starts from another
    predictor of the same shape (e.g. one trained for a neighbouring sparsity target)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    rng = np.random.default_rng(seed)
    scale = float(np.sqrt(np.mean(x[: min(n, 4096)] ** 2))) or 1.0
    fc1 = rng.standard_normal((rank, d), dtype=np.float32) / np.float32(np.sqrt(d) * scale)
    fc2 = rng.standard_normal((n_ff, rank), dtype=np.float32) * np.float32(0.1 / np.sqrt(rank))
    if init is not None and init.fc1.shape == fc1.shape and init.fc2.shape == fc2.shape:
        fc1, fc2 = init.fc1.astype(np.float32, copy=True), init.fc2.astype(np.float32, copy=True)
    opt = _Adam([fc1, fc2], lr)
    batch = min(batch, n)
    steps_per_epoch = max(1, n // batch)
    total = epochs * steps_per_epoch
    if pos_weight is None:
        y0, _ = targets(np.arange(min(n, batch)))
        pos = max(float(y0.mean()), 1e-6)
        pos_weight = float(np.clip((1 - pos) / pos, 1.0, 10.0))
    pw = np.float32(pos_weight)
    step = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for b in range(steps_per_epoch):
            rows = np.sort(order[b * batch:(b + 1) * batch])  # sorted: cheaper gathers
            xb = x[rows]
            yb, wb = targets(rows)
            pre = xb @ fc1.T                      # [B, r]
            h = np.maximum(pre, 0.0)
            z = h @ fc2.T                         # [B, n_ff]
            # loss per (token, neuron): y * c * softplus(-z) + (1 - y) * softplus(z), c = pw * (1 + w)
            # d/dz: y: c * (sigmoid(z) - 1); not y: sigmoid(z)
            sig = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
            dz = np.where(yb, (sig - 1.0) * (pw * (1.0 + wb)), sig)
            dz *= np.float32(1.0 / (len(rows) * n_ff))
            g2 = dz.T @ h                         # [n_ff, r]
            dh = dz @ fc2                         # [B, r]
            dh *= pre > 0
            g1 = dh.T @ xb                        # [r, d]
            opt.step([g1, g2], lr * (1.0 - 0.9 * step / total))
            step += 1
    return Predictor(fc1, fc2)


def choose_threshold(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray, recall: float,
                     bins: int = 4096) -> Quality:
    """The largest threshold whose weighted recall on these labels is >= `recall`.

    A weighted quantile of the positives' logits: a weighted histogram finds the bin where the
    weight above crosses `recall`, then only that bin's logits are sorted (O(n), not a full sort)."""
    pos_logits = logits[labels]
    pos_w = weights[labels].astype(np.float64)
    total = pos_w.sum()
    if pos_logits.size == 0 or total <= 0:
        return evaluate(logits, labels, weights, float(np.inf))
    need = recall * total * (1 - 1e-9)
    lo, hi = float(pos_logits.min()), float(pos_logits.max())
    if hi > lo:
        idx = np.minimum(((pos_logits - lo) * (bins / (hi - lo))).astype(np.int64), bins - 1)
        above = np.cumsum(np.bincount(idx, weights=pos_w, minlength=bins)[::-1])[::-1]  # weight in bins >= b
        b = int(np.nonzero(above >= need)[0][-1])  # the highest bin whose weight from there up suffices
        rest = need - (above[b + 1] if b + 1 < bins else 0.0)
        sel = idx == b
        order = np.argsort(-pos_logits[sel], kind="stable")
        cum = np.cumsum(pos_w[sel][order])
        t = float(pos_logits[sel][order[min(int(np.searchsorted(cum, rest)), len(order) - 1)]])
    else:
        t = lo
    return evaluate(logits, labels, weights, t)


def evaluate(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray, threshold: float) -> Quality:
    pred = logits >= np.float32(threshold)
    hit = pred & labels
    tp = float(np.count_nonzero(hit))
    n_pred, n_pos = float(np.count_nonzero(pred)), float(np.count_nonzero(labels))
    w_pos = float(weights[labels].sum(dtype=np.float64))
    return Quality(threshold=float(threshold),
                   recall=float(weights[hit].sum(dtype=np.float64)) / w_pos if w_pos else 1.0,
                   count_recall=tp / n_pos if n_pos else 1.0,
                   precision=tp / n_pred if n_pred else 1.0, sparsity=1.0 - n_pred / pred.size,
                   label_sparsity=1.0 - n_pos / labels.size)
