"""Profile a GGUF model's FFN activations, train per-layer predictors, and write an extended GGUF.

    python convert/add_profile.py model.gguf [-o OUT] [--corpus FILE] [--tokens N] [--rank R]
                                  [--max-ppl-increase P] [--sparsity-target S] [--recall R]
                                  [--down-t-type auto|same|q4_0|q5_0|q8_0|f16] [--decide-speedup X]
                                  [--reuse-profile] [--force]

Steps, each a function below, under one progress bar (progress.py):
  1. tokens   calibration text (default: the calibration split of pydoc_data.topics, see
              corpus.py) -> chunks of 256 tokens; the last VAL_SHARE of them are validation
  2. profile  dense native forward passes with the capture hook: FFN inputs and |act| per layer
              (profile.py); active = act != 0 (ReLU family) or in the token's top (1 - s) share
              by |act| (GLU family, s = the sparsity target). With --save-profile saved as
              <stem>.profile.npz (saved.py); --reuse-profile starts from it instead
  3. train    per layer fc1 -> ReLU -> fc2 in numpy on the training chunks (predictor.py)
  4. choose   per-layer thresholds on the validation chunks for a target weighted recall; each
              candidate (sparsity target, recall) is written as a complete file and its
              validation perplexity measured by the native runtime with sparse=2; the
              sparsest candidate within --max-ppl-increase P% (default 3) of dense wins;
              --sparsity-target S skips the search
  5. down_t   the winner with smaller ffn_down_t types (Q4_0, Q5_0), each measured the same way;
              the smallest whose cost fits what is left of the budget is kept
  6. decide   on the winner only, on held-out text: perplexity of the decode path token by token,
              dense and sparse, and decode speed dense and sparse (decide.py); the file defaults to
              sparse decode only if it is >= --decide-speedup (1.1) x dense and within P%
  7. write    the winner with the decision's keys is renamed onto the output path (never a
              half-written file there); then the terminal table, <stem>.profile.json and
              <stem>.profile.png (report.py)

Output: every original key and tensor unchanged (same types and bytes), plus per layer
  blk.N.ffn_freq          F32 [n_ff]: share of calibration tokens in which the neuron is active
  blk.N.fc1.weight        ne {n_embd, r}: Q4_0 or Q8_0 when n_embd and r are multiples of 32, else F16
  blk.N.fc2.weight        ne {r, n_ff}: same type as fc1
  blk.N.ffn_down_t.weight ne {n_embd, n_ff}: ffn_down transposed, one row per neuron (write.down_t_type)
(an MoE model instead gets its routing profile, no predictors, and ReGLU experts the measured choice
between skipping their dead rows and computing every row: convert/experts.py)
and the powerinfer.* keys of `profile_keys`, plus powerinfer.sparse_default (BOOL) and
powerinfer.sparse_decision (STRING), which `Llama(sparse=None)` follows. The runtime computes neuron i of layer N when
(fc2 @ relu(fc1 @ x))[i] >= powerinfer.layer_thresholds[N] + its threshold shift, x being the
normed FFN input (what ffn_gate/ffn_up multiply).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Run as a script, sys.path[0] is convert/: drop it (our profile.py must not shadow the stdlib's)
# and append the repo root so `convert.*` imports, after any installed pypowerinfer.
if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == HERE:
    del sys.path[0]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType, GGUFValueType  # noqa: E402

from convert import corpus, decide, experts, predictor, progress, report, saved, write  # noqa: E402
from convert import profile as prof  # noqa: E402
from convert.write import ConvertError, NewTensor  # noqa: E402

log = logging.getLogger("convert")

FORMAT_VERSION = 1
N_CTX = 256
VAL_SHARE = 0.125                      # share of the calibration chunks held back for thresholds/ppl
GLU_TARGETS = [0.3, 0.4, 0.5, 0.6]     # candidate sparsity targets (share of neurons skipped per token)
DEFAULT_TARGET = 0.5                   # the choice when no search can run (a search starts at the densest)
DEFAULT_MAX_PPL_INCREASE = 3.0         # percent
RELU_RECALLS = [0.9, 0.95, 0.97, 0.98, 0.99]  # ReLU models: candidates differ by recall target only
DEFAULT_RECALL = 0.95
DENSER_RECALLS = [0.99, 0.98]           # GLU models: the search's last resorts, on the densest target
Q4_0 = GGMLQuantizationType.Q4_0
Q8_0 = GGMLQuantizationType.Q8_0
F16 = GGMLQuantizationType.F16


@dataclass
class LayerFit:
    """One layer's trained predictor, as stored (fc1/fc2 encoded) and as the runtime sees it."""
    rank: int
    qtype: GGMLQuantizationType
    fc1: np.ndarray       # encoded for the writer: numpy (r, n_embd), ne {n_embd, r}
    fc2: np.ndarray       # numpy (n_ff, r), ne {r, n_ff}
    val_logits: np.ndarray  # [n_val, n_ff] logits of the validation tokens with the stored (decoded) weights
    seconds: float
    trained: predictor.Predictor  # float32, before encoding (a warm start for the next target)


@dataclass
class Candidate:
    target: int            # index into profile.targets
    recall: float
    sparsity_target: float
    quality: list = field(default_factory=list)  # predictor.Quality per layer
    path: Path | None = None
    tensors: list = field(default_factory=list)  # the NewTensors added (for the log)
    eval: dict | None = None

    @property
    def predicted_sparsity(self) -> float:
        return float(np.mean([q.sparsity for q in self.quality]))

    def passes(self, dense_ppl: float, max_increase: float) -> bool:
        return self.eval is not None and self.eval["ppl"] <= dense_ppl * (1 + max_increase / 100.0)


# --- 1. tokens ---------------------------------------------------------------------------

def step_tokens(tokenizer, corpus_file, n_tokens: int) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """(corpus name, training chunks, validation chunks) of the calibration text."""
    name, entries = corpus.corpus_entries(corpus_file)
    ids = corpus.token_stream(lambda b: tokenizer.encode(b, add_bos=False, special=False), entries, n_tokens)
    bos = tokenizer.bos_id if tokenizer.add_bos and tokenizer.bos_id >= 0 else None
    chunks = corpus.chunk(ids, N_CTX, bos)
    if len(chunks) < 2:
        raise ConvertError(f"calibration text gives {len(ids)} tokens; need at least {2 * N_CTX} "
                           "(raise --tokens or give a longer --corpus)")
    n_val = max(1, int(round(len(chunks) * VAL_SHARE)))
    log.info("calibration: %s, %d tokens in %d chunks (%d for validation)", name, sum(map(len, chunks)),
             len(chunks), n_val)
    return name, chunks[:-n_val], chunks[-n_val:]


# --- 2. profile is convert/profile.py: run_profile ------------------------------------------

# --- 3. train ----------------------------------------------------------------------------

def _encode_predictor(fc1: np.ndarray, fc2: np.ndarray, qtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    e1, e2 = write.encode_weight(fc1, qtype), write.encode_weight(fc2, qtype)
    return e1, e2, write.decode_weight(e1, qtype).reshape(fc1.shape), write.decode_weight(e2, qtype).reshape(fc2.shape)


def _fit_layer(p: prof.Profile, target: int, layer: int, rank: int, *, epochs: int, recall: float,
               init: predictor.Predictor | None) -> tuple[LayerFit, float]:
    """One layer's predictor at `rank`, stored in the smallest of Q4_0 and Q8_0 (both row lengths
    (n_embd, r) multiples of 32) that costs at most 0.01 of predicted sparsity at the target
    recall on validation tokens, else F16; and that sparsity."""
    t0 = time.perf_counter()
    x = p.ffn_in[layer, :p.n_train].astype(np.float32)
    y, w = p.layer_targets(target, layer, slice(0, p.n_train))
    pred = predictor.train(x, lambda rows: (y[rows], w[rows]), p.n_ff, rank, epochs=epochs, seed=layer, init=init)
    xv = p.ffn_in[layer, p.n_train:].astype(np.float32)
    yv, wv = p.layer_targets(target, layer, slice(p.n_train, None))
    options = [F16]
    if p.n_embd % 32 == 0 and rank % 32 == 0:
        options[:0] = [Q4_0, Q8_0]
    ref_sparsity = None
    for qtype in reversed(options):  # F16 first: the reference
        e1, e2, d1, d2 = _encode_predictor(pred.fc1, pred.fc2, qtype)
        z = predictor.Predictor(d1, d2).logits(xv)
        sp = predictor.choose_threshold(z, yv, wv, recall).sparsity
        if ref_sparsity is None:
            ref_sparsity = sp
        if qtype == F16 or sp >= ref_sparsity - 0.01:
            chosen = (qtype, e1, e2, z, sp)
    qtype, e1, e2, z, sp = chosen
    fit = LayerFit(rank=rank, qtype=qtype, fc1=e1, fc2=e2, val_logits=z, seconds=time.perf_counter() - t0,
                   trained=pred)
    return fit, sp


def step_train(p: prof.Profile, target: int, ranks: list[int], *, epochs: int, recall: float,
               row_bytes: list[float] | None = None, init: list[LayerFit] | None = None,
               bar: progress.JobBar | None = None) -> list[LayerFit]:
    """A predictor per layer for label set `target` (_fit_layer); thresholds are later chosen on
    the stored (decoded) weights, so they hold for what the runtime reads. With `row_bytes`
    (per layer, the bytes of one neuron's gate and up rows), each layer's rank is chosen: up
    predictor.rank_ladder(ranks[layer]) while a larger rank lowers what a token reads, the
    predictor's bytes plus the gate and up rows of the neurons it picks at `recall`. `init`:
    another label set's fits to start from, at their ranks."""
    fits = []
    tick = (bar or progress.JobBar({}, enabled=False)).stage("train", f"train s={p.targets[target]:.2f}", p.n_layer)
    for layer in range(p.n_layer):
        if init:
            ladder = [init[layer].rank]
        else:
            ladder = predictor.rank_ladder(ranks[layer]) if row_bytes else [ranks[layer]]
        best, best_bytes, seconds = None, float("inf"), 0.0
        for rank in ladder:
            fit, sparsity = _fit_layer(p, target, layer, rank, epochs=epochs, recall=recall,
                                       init=init[layer].trained if init else None)
            seconds += fit.seconds
            read = (fit.fc1.nbytes + fit.fc2.nbytes + (1.0 - sparsity) * p.n_ff * row_bytes[layer]) if row_bytes else 0.0
            if best is not None and read >= best_bytes:
                break
            best, best_bytes = fit, read
        best.seconds = seconds  # the layer's training time, every rank tried
        fits.append(best)
        tick(1)
    return fits


# --- 4. choose ---------------------------------------------------------------------------

def thresholds(p: prof.Profile, fits: list[LayerFit], target: int, recall: float) -> list[predictor.Quality]:
    return [predictor.choose_threshold(f.val_logits, *p.layer_targets(target, layer, slice(p.n_train, None)), recall)
            for layer, f in enumerate(fits)]


def profile_keys(p: prof.Profile, cand: Candidate, corpus_name: str) -> dict:
    f32, u32, s = GGUFValueType.FLOAT32, GGUFValueType.UINT32, GGUFValueType.STRING
    return {
        "powerinfer.format_version": (FORMAT_VERSION, u32),
        "powerinfer.activation": (p.activation, s),
        # a neuron of layer N runs when its predictor logit >= layer_thresholds[N] (+ the runtime's shift)
        "powerinfer.layer_thresholds": ([float(q.threshold) for q in cand.quality], GGUFValueType.ARRAY, f32),
        "powerinfer.sparse_threshold": (0.0, f32),  # PowerInfer's global key, kept for compatibility
        "powerinfer.sparsity_target": (float(cand.sparsity_target), f32),
        "powerinfer.target_recall": (float(cand.recall), f32),
        "powerinfer.calibration_corpus": (corpus_name, s),
        "powerinfer.calibration_tokens": (int(p.n_tokens), u32),
    }


def layer_tensors(p: prof.Profile, fits: list[LayerFit], target: int, down_t: list[NewTensor]) -> list[NewTensor]:
    out = []
    freq = p.frequency(target)
    for layer, f in enumerate(fits):
        out += [
            NewTensor(f"blk.{layer}.ffn_freq", freq[layer], GGMLQuantizationType.F32),
            NewTensor(f"blk.{layer}.fc1.weight", f.fc1, f.qtype),
            NewTensor(f"blk.{layer}.fc2.weight", f.fc2, f.qtype),
            down_t[layer],
        ]
    return out


class Chooser:
    """Trains (once per label set), thresholds, writes and evaluates candidate settings."""

    def __init__(self, args, reader, p: prof.Profile, corpus_name: str, staging: write.Staging, ranks: list[int],
                 drop_profile: bool, evaluate=None, bar: progress.JobBar | None = None):
        self.args, self.reader, self.p, self.corpus_name = args, reader, p, corpus_name
        self.staging, self.ranks, self.drop_profile = staging, ranks, drop_profile
        self.bar = bar or progress.JobBar({}, enabled=False)
        self.fits: dict[int, list[LayerFit]] = {}
        # ffn_down transposed (float32) and its search type per layer; step_down_t may pick a smaller one
        self.down_t_float = [write.down_t_float(reader, layer) for layer in range(p.n_layer)]
        self.search_types = [write.down_t_type(dt, wt.shape[1], args.down_t_type) for wt, dt in self.down_t_float]
        self.down_t = self.down_t_tensors(self.search_types)
        self.dense_ppl = float(np.exp(p.dense_val_nll))
        # per layer, the bytes of one neuron's gate and up rows: what a predicted neuron costs, for
        # choosing each layer's predictor rank (None with --rank: that rank everywhere)
        by_name = {t.name: t for t in reader.tensors}
        self.row_bytes = None if args.rank is not None else [
            sum(int(by_name[n].n_bytes) for n in (f"blk.{layer}.ffn_gate.weight", f"blk.{layer}.ffn_up.weight")
                if n in by_name) / p.n_ff
            for layer in range(p.n_layer)]
        self.evaluate = evaluate or self._native_eval
        self.evaluated: list[Candidate] = []

    def down_t_tensors(self, types: list[GGMLQuantizationType]) -> list[NewTensor]:
        return [write.down_t_tensor(layer, wt, t) for layer, ((wt, _), t) in enumerate(zip(self.down_t_float, types))]

    def start_index(self, settings: list[tuple[int, float]], forced_target: float | None) -> int:
        """The first candidate: --sparsity-target, else the densest target (DEFAULT_TARGET without a
        search) at --recall (or DEFAULT_RECALL) for GLU models; --recall (or DEFAULT_RECALL) for
        ReLU models."""
        if self.p.relu:
            want = self.args.recall or DEFAULT_RECALL
            return int(np.argmin([abs(r - want) for _, r in settings]))
        if forced_target is not None:
            want = forced_target
        else:  # a search starts at the densest target: GLU models are mostly dense by nature (DESIGN)
            want = DEFAULT_TARGET if self.args.max_ppl_increase is None else min(self.p.targets)
        recall = self.args.recall or DEFAULT_RECALL
        plain = [i for i, (_, r) in enumerate(settings) if r == recall]  # not the denser recalls
        return min(plain, key=lambda i: abs(self.p.targets[settings[i][0]] - want))

    def settings(self) -> list[tuple[int, float]]:
        """(label set, recall) candidates, densest first."""
        if self.p.relu:
            recalls = [self.args.recall] if self.args.recall is not None else sorted(RELU_RECALLS, reverse=True)
            return [(0, r) for r in recalls]
        recall = self.args.recall or DEFAULT_RECALL
        # below the densest target, a higher recall on it (no retraining) when --recall is not given
        denser = [] if self.args.recall is not None else [(0, r) for r in DENSER_RECALLS if r > recall]
        return denser + [(j, recall) for j in range(len(self.p.targets))]

    def candidate(self, target: int, recall: float, down_t: list[NewTensor] | None = None) -> Candidate:
        """The file of a setting, with ffn_down_t in the search types or as `down_t`."""
        if target not in self.fits:
            # a neighbouring target's predictors are a good start: its active sets nest with these
            near = min(self.fits, key=lambda t: abs(self.p.targets[t] - self.p.targets[target]), default=None)
            epochs = self.args.epochs if near is None else max(1, self.args.epochs // 2)
            self.fits[target] = step_train(self.p, target, self.ranks, epochs=epochs, recall=recall,
                                           row_bytes=self.row_bytes,
                                           init=self.fits.get(near), bar=self.bar)
        fits = self.fits[target]
        cand = Candidate(target=target, recall=recall, sparsity_target=self.p.targets[target],
                         quality=thresholds(self.p, fits, target, recall))
        cand.tensors = layer_tensors(self.p, fits, target, down_t or self.down_t)
        cand.path = self.write_file(cand)
        return cand

    def write_file(self, cand: Candidate, extra_keys: dict | None = None) -> Path:
        keys = {**profile_keys(self.p, cand, self.corpus_name), **(extra_keys or {})}
        return self.staging.write(write.write_gguf, self.reader, cand.tensors, keys, drop_profile=self.drop_profile)

    def _native_eval(self, cand: Candidate, stage: str = "candidate") -> dict:
        label = f"ppl s={cand.sparsity_target:.2f}" if stage == "candidate" else f"ppl ffn_down_t {stage}"
        tick = self.bar.stage("candidate" if stage == "candidate" else "down_t", label, len(self.p.val_chunks))
        return prof.perplexity(cand.path, self.p.val_chunks, sparse=2, n_threads=self.args.threads, tick=tick)

    def run(self, setting: tuple[int, float]) -> Candidate:
        cand = self.candidate(*setting)
        cand.eval = self.evaluate(cand)
        cand.eval["sparse_ran"] = cand.eval["ffn_rows_share"] < 1.0
        self.evaluated.append(cand)
        log.info("candidate sparsity target %.2f, recall %.2f: predicted sparsity %.3f, validation ppl %.3f "
                 "(dense %.3f, %+.1f%%), FFN rows computed %.1f%%", cand.sparsity_target, cand.recall,
                 cand.predicted_sparsity, cand.eval["ppl"], self.dense_ppl,
                 100 * (cand.eval["ppl"] / self.dense_ppl - 1), 100 * cand.eval["ffn_rows_share"])
        return cand


def step_choose(ch: Chooser, max_increase: float | None, forced_target: float | None) -> Candidate:
    """The sparsest candidate whose validation perplexity, measured by the native sparse
    runtime, is within max_increase % of dense. Perplexity is taken to grow with sparsity, so
    the search starts at start_index and walks one way: sparser while it passes,
    denser until it passes. Without --max-ppl-increase, with --sparsity-target, or when the
    runtime does not run the predictors (it reports every FFN row computed), that first
    candidate is the result (its measured numbers are still reported)."""
    settings = ch.settings()
    start = ch.start_index(settings, forced_target)
    first = ch.run(settings[start])
    if forced_target is not None or max_increase is None:
        return first
    if not first.eval["sparse_ran"]:
        log.warning("the native runtime computed every FFN row with sparse=2 (no sparse path for these "
                    "predictors yet): perplexity cannot guide the choice; keeping sparsity target %.2f unchecked",
                    first.sparsity_target)
        return first
    ok = lambda c: c.passes(ch.dense_ppl, max_increase)  # noqa: E731
    best = first if ok(first) else None
    fallback = first          # densest failing candidate, the answer if none passes
    step = 1 if best else -1  # settings are densest first
    i = start + step
    while 0 <= i < len(settings):
        cand = ch.run(settings[i])
        if ok(cand):
            if best is not None:
                ch.staging.discard(best.path)
            best = cand
            if step < 0:
                break
        else:
            if step > 0:
                ch.staging.discard(cand.path)
                break
            ch.staging.discard(fallback.path)
            fallback = cand
        i += step
    if best is None:
        log.warning("no candidate stays within %.1f%% of dense perplexity; writing the densest (sparsity target "
                    "%.2f, %+.1f%%)", max_increase, fallback.sparsity_target,
                    100 * (fallback.eval["ppl"] / ch.dense_ppl - 1))
        return fallback
    if fallback is not best:
        ch.staging.discard(fallback.path)
    return best


# --- 5. the type of ffn_down_t ----------------------------------------------------------

def step_down_t(ch: Chooser, best: Candidate, max_increase: float | None) -> tuple[Candidate, dict]:
    """With --down-t-type auto: the winner re-measured (validation ppl, sparse=2, native) with the
    ffn_down_t types of write.down_t_trials smaller than the search type, largest first, while
    their cost (ppl over the winner's with the search type) fits in the budget the predictors
    leave (the winner's own increase over dense): a smaller type that fits replaces the winner,
    and the first that does not ends the walk (fewer bits are taken to cost more). Returns the
    file's candidate and the cost per type tried, {type: {bytes_per_weight, ppl, cost_pct, fits,
    chosen}}."""
    search = {t.name for t in ch.search_types}
    widest = max(ch.search_types, key=write.bytes_per_weight)
    name = "/".join(sorted(search))
    own = best.eval["ppl"] if ch.evaluate == ch._native_eval else None
    costs = {name: {"bytes_per_weight": write.bytes_per_weight(widest), "ppl": own, "cost_pct": 0.0,
                    "fits": True, "chosen": True}}
    trials = write.down_t_trials(widest, ch.p.n_embd)
    if ch.args.down_t_type != "auto" or max_increase is None or not best.eval.get("sparse_ran") or not trials:
        return best, costs
    base = own if own is not None else ch._native_eval(best, stage=name)["ppl"]
    costs[name]["ppl"] = base
    left = max_increase - 100.0 * (best.eval["ppl"] / ch.dense_ppl - 1.0)
    chosen, chosen_name = best, name
    for qtype in reversed(trials):
        types = [qtype if write.bytes_per_weight(qtype) < write.bytes_per_weight(t) else t for t in ch.search_types]
        trial = replace(best, tensors=layer_tensors(ch.p, ch.fits[best.target], best.target, ch.down_t_tensors(types)))
        trial.path = ch.write_file(trial)
        ev = ch._native_eval(trial, stage=qtype.name)
        cost = 100.0 * (ev["ppl"] / base - 1.0)
        fits = cost <= left
        costs[qtype.name] = {"bytes_per_weight": write.bytes_per_weight(qtype), "ppl": ev["ppl"], "cost_pct": cost,
                             "fits": fits, "chosen": False}
        log.info("ffn_down_t in %s: validation ppl %.3f, %+.2f%% over %s (budget left %.2f%%)%s", qtype.name,
                 ev["ppl"], cost, name, left, "" if fits else ": over the budget")
        if not fits:
            ch.staging.discard(trial.path)
            break
        trial.eval = {**best.eval, **ev, "sparse_ran": ev["ffn_rows_share"] < 1.0,
                      "ppl": best.eval["ppl"] * ev["ppl"] / base}
        ch.staging.discard(chosen.path)
        chosen, chosen_name = trial, qtype.name
    costs[name]["chosen"] = False
    costs[chosen_name]["chosen"] = True
    return chosen, costs


# --- 6. decide -------------------------------------------------------------------------

MAX_DECIDE_FALLBACKS = 2  # denser settings measured held-out when the winner's perplexity alone fails


def step_decide(ch: Chooser, cand: Candidate, heldout: list[np.ndarray]) -> tuple[Candidate, dict]:
    """Held-out perplexity of the decode path, dense and sparse, and decode speed (decide.py) of
    the file to be written; the default it will carry and why. A setting's batched validation
    figure can miss what the decode path costs: when the held-out perplexity alone fails, the
    next denser settings (up to MAX_DECIDE_FALLBACKS, with the winner's ffn_down_t) are measured
    the same way, against the same dense figures, and the first that passes is written; when none
    does, the densest tried is, with dense as its default. Returns (the file's candidate, the
    decision)."""
    args = ch.args
    budget = DEFAULT_MAX_PPL_INCREASE if args.max_ppl_increase is None else args.max_ppl_increase
    settings = ch.settings()
    at = settings.index((cand.target, cand.recall))
    down_t = [t for t in cand.tensors if t.name.endswith(".ffn_down_t.weight")]
    dense = None
    for fallback in range(MAX_DECIDE_FALLBACKS + 1):
        tick = ch.bar.stage("decide", "held-out decode ppl and speed", (1 if dense else 2) * len(heldout))
        m = decide.measure(cand.path, heldout, n_threads=args.threads, tick=tick, dense=dense)
        if args.assume_speedup is not None:
            m = replace(m, dense_tok_s=1.0, sparse_tok_s=float(args.assume_speedup), speed_assumed=True)
        on, reason = decide.decide(m, max_ppl_increase=budget, min_speedup=args.decide_speedup)
        log.info("decision: %s", reason)
        only_ppl = not on and m.speedup >= args.decide_speedup
        if not only_ppl or at == 0 or fallback == MAX_DECIDE_FALLBACKS:
            break
        dense, at = m, at - 1
        target, recall = settings[at]
        log.info("held-out perplexity over budget: measuring the denser setting (sparsity target %.2f, recall "
                 "%.2f)", ch.p.targets[target], recall)
        denser = ch.candidate(target, recall, down_t)
        denser.eval = next((c.eval for c in ch.evaluated if (c.target, c.recall) == (target, recall)), None)
        ch.staging.discard(cand.path)
        cand = denser
    return cand, {"sparse_default": on, "reason": reason, **m.as_dict()}


# --- 7. write ----------------------------------------------------------------------------

def step_write(ch: Chooser, best: Candidate, out: Path, decision: dict) -> None:
    """The chosen file again, with the decision's keys, renamed onto the output path."""
    tick = ch.bar.stage("write", "write", 1)
    final = ch.write_file(best, decide.decision_keys(decision["sparse_default"], decision["reason"]))
    ch.staging.discard(best.path)
    ch.staging.commit(final)
    tick(1)
    for t in best.tensors:
        log.debug("added %-28s %-5s %s", t.name, t.qtype.name, "x".join(map(str, t.data.shape)))
    log.info("wrote %s (%.1f MB)", out, out.stat().st_size / 1e6)


# --- the command ---------------------------------------------------------------------------

def default_output(src: Path) -> Path:
    return src.with_name(src.stem + ".powerinfer.gguf")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="add_profile.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path, help="input GGUF (never modified)")
    ap.add_argument("-o", "--output", type=Path, help="output GGUF (default: <stem>.powerinfer.gguf beside the input)")
    ap.add_argument("--corpus", type=Path, help="calibration text file (default: pydoc_data.topics calibration split)")
    ap.add_argument("--tokens", type=int, default=12288, help="calibration tokens (default 12288)")
    ap.add_argument("--rank", type=int, help="predictor rank for every layer (default: per layer, the rank of "
                    "64, 128, ... up to ~n_ff/24 past which a token would read more bytes)")
    ap.add_argument("--max-ppl-increase", type=float, default=DEFAULT_MAX_PPL_INCREASE, metavar="P",
                    help="pick the sparsest setting within P%% of dense validation perplexity, measured by the "
                         f"native sparse runtime (default {DEFAULT_MAX_PPL_INCREASE})")
    ap.add_argument("--sparsity-target", type=float,
                    help=f"GLU models: no search, use this target (the candidates are {GLU_TARGETS})")
    ap.add_argument("--recall", type=float, help=f"target weighted recall of the thresholds (default {DEFAULT_RECALL})")
    ap.add_argument("--down-t-type", choices=write.DOWN_T_TYPES, default="auto",
                    help="type of ffn_down_t: auto (default) = the smallest of Q4_0, Q5_0 and the search type "
                         "(Q8_0 for a 4/5-bit or K-quant ffn_down, else ffn_down's type) whose measured "
                         "perplexity cost fits the budget the predictors leave; same = ffn_down's type; or "
                         "that type")
    ap.add_argument("--decide-speedup", type=float, default=decide.DEFAULT_MIN_SPEEDUP, metavar="X",
                    help="the file defaults to sparse decode only if it measures at least X times dense decode "
                         f"speed here (and within --max-ppl-increase held-out, token by token; default "
                         f"{decide.DEFAULT_MIN_SPEEDUP})")
    ap.add_argument("--assume-speedup", type=float, help=argparse.SUPPRESS)  # tests: no timing
    ap.add_argument("--save-profile", action="store_true",
                    help="also write <stem>.profile.npz beside the output, for --reuse-profile (the profile's "
                         "arrays, ~2 bytes x layers x tokens x (n_embd + n_ff): 1.5 GB for SmolLM2)")
    ap.add_argument("--reuse-profile", action="store_true",
                    help="re-use <stem>.profile.npz beside the output (written by an earlier conversion of the "
                         "same model with --save-profile) instead of profiling again")
    ap.add_argument("--epochs", type=int, default=4, help="predictor training epochs (default 4)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="native threads")
    ap.add_argument("--force", action="store_true", help="re-profile an input that already has a profile")
    ap.add_argument("--no-plot", action="store_true", help="skip <stem>.profile.png")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    args = ap.parse_args(argv)
    if args.tokens < 2 * N_CTX:
        ap.error(f"--tokens must be at least {2 * N_CTX}")
    if args.recall is not None and not 0.0 < args.recall <= 1.0:
        ap.error("--recall must be in (0, 1]")
    if args.sparsity_target is not None and not 0.0 <= args.sparsity_target < 1.0:
        ap.error("--sparsity-target must be in [0, 1)")
    return args


def _load_native(path: Path):
    from pypowerinfer.model import NativeModel
    from pypowerinfer.tokenizer import Tokenizer

    try:
        model = NativeModel(path)
        tokenizer = Tokenizer(model.metadata())
    except Exception as e:  # the native loader's message names what it cannot run
        raise ConvertError(f"{path}: unsupported model: {e}") from e
    return model, tokenizer


def _profile(args, src: Path, out: Path, model, tokenizer, targets, bar) -> tuple[str, prof.Profile]:
    """Steps 1 and 2, or the saved profile with --reuse-profile; the profile is saved with --save-profile."""
    npz = report.side_path(out, ".profile.npz")
    if args.reuse_profile:
        corpus_name, p = saved.load(npz, src)
        log.info("re-using the profile %s (%d tokens)", npz, p.n_tokens)
        return corpus_name, p
    corpus_name, train_chunks, val_chunks = step_tokens(tokenizer, args.corpus, args.tokens)
    p = prof.run_profile(model, train_chunks, val_chunks, targets=targets, n_threads=args.threads,
                         progress=False, tick=bar.stage("profile", "profile", len(train_chunks) + len(val_chunks)))
    if args.save_profile:
        saved.save(npz, p, corpus_name, src)
    return corpus_name, p


def convert(args, evaluate=None) -> dict:
    """Run every step; returns the report dict also saved as <stem>.profile.json."""
    t_start = time.perf_counter()
    src = args.model
    out = args.output or default_output(src)
    if out.resolve() == src.resolve():
        raise ConvertError("the output path is the input path; the input is never modified")
    reader = write.open_gguf(src)
    markers = write.profiled_markers(reader)
    if markers and not args.force:
        shown = ", ".join(markers[:3]) + (", ..." if len(markers) > 3 else "")
        raise ConvertError(f"{src} is already profiled (has {shown}); use --force to re-profile it")
    write.check_writable(out)
    model, tokenizer = _load_native(src)
    info = model.info
    if info.n_expert:
        return experts.convert(args, src=src, out=out, reader=reader, markers=markers, model=model,
                               tokenizer=tokenizer, format_version=FORMAT_VERSION, n_ctx=N_CTX)
    if args.rank is not None and args.rank < 1:
        raise ConvertError("--rank must be positive")
    ranks = [args.rank or predictor.default_rank(info.n_embd, info.n_ff)] * info.n_layer
    targets = GLU_TARGETS if args.sparsity_target is None or args.sparsity_target in GLU_TARGETS \
        else sorted(set(GLU_TARGETS) | {args.sparsity_target})
    log.info("%s: %s, %d layers, n_embd %d, n_ff %d, FFN activation %s, predictor rank %s", src.name,
             reader.fields["general.architecture"].contents() if "general.architecture" in reader.fields else "?",
             info.n_layer, info.n_embd, info.n_ff, info.ffn_act,
             ranks[0] if args.rank else "/".join(map(str, predictor.rank_ladder(ranks[0]))) + " (per layer)")

    bos = tokenizer.bos_id if tokenizer.add_bos and tokenizer.bos_id >= 0 else None
    heldout = decide.heldout_chunks(lambda b: tokenizer.encode(b, add_bos=False, special=False), bos)
    plan = {k: v for k, v in progress.PLAN.items() if k != "profile" or not args.reuse_profile}
    bar = progress.JobBar(plan, enabled=not args.quiet)
    try:
        corpus_name, p = _profile(args, src, out, model, tokenizer, targets, bar)
        model.close()
        t_profile = time.perf_counter() - t_start
        with write.Staging(out) as staging:
            ch = Chooser(args, reader, p, corpus_name, staging, ranks, drop_profile=bool(markers), evaluate=evaluate,
                         bar=bar)
            best = step_choose(ch, args.max_ppl_increase, args.sparsity_target)
            best, down_t_costs = step_down_t(ch, best, args.max_ppl_increase)
            best, decision = step_decide(ch, best, heldout)
            step_write(ch, best, out, decision)
    finally:
        bar.close()
    seconds = time.perf_counter() - t_start
    rep = report.build(src=src, out=out, info=info, p=p, ch=ch, best=best, corpus_name=corpus_name,
                       seconds=seconds, profile_seconds=t_profile, args=args)
    rep["ffn_down_t"] = {"types": sorted({t.qtype.name for t in best.tensors if "ffn_down_t" in t.name}),
                         "costs": down_t_costs}
    rep["decision"] = decision
    report.print_table(rep, sys.stdout)
    report.save(rep, out, plot=not args.no_plot)
    log.info("done in %.1f s", seconds)
    return rep


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the cleanups like Ctrl-C does


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("gguf").setLevel(logging.WARNING)  # its writer announces every candidate file
    old = signal.signal(signal.SIGTERM, _sigterm)
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():  # log lines above the job's bar, not through it
            convert(args)
    except ConvertError as e:
        log.error("error: %s", e)
        return 2
    except KeyboardInterrupt:
        log.error("interrupted; nothing was written to the output path")
        return 130
    finally:
        signal.signal(signal.SIGTERM, old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
