"""An MoE model's conversion (add_profile.py hands models with experts here): the router's choices
on the calibration text, per layer, as the device placement needs them. No predictors: the
runtime refuses them for an MoE FFN, whose router already leaves most expert rows unread, so
dense MoE stays the mode and the decision says what was profiled instead.

Output: the input's keys and tensors unchanged, plus per MoE layer
  blk.N.ffn_exp_freq      F32 [n_expert]: share of calibration tokens routed to each expert
  blk.N.ffn_exp_run_freq  F32 ne {runs, n_expert}: share of tokens reading each run of PI_FFN_RUN
                          neurons' up and down rows: the expert's routing share, times the run's
                          mean live share (relu(gate) != 0) given routing for ReLU-gated experts
and powerinfer.format_version, .activation, .calibration_corpus, .calibration_tokens,
.sparse_default (false) and .sparse_decision. native/src/placement.c ranks expert runs by them.
ReGLU experts (smallthinker) also get .moe_skip_rows (BOOL) and .moe_skip_decision (STRING):
whether a one-token expert skipping its dead neurons' rows decoded the held-out text faster than
computing every row, on the machine converting it (decide.py: measure_expert_skip).
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize

from convert import corpus, decide, report, write
from convert.profile import is_relu_family
from convert.write import ConvertError, NewTensor

log = logging.getLogger("convert.experts")

FFN_RUN = 128  # native/src/placement.h's PI_FFN_RUN: an expert's neurons in runs of this many
BUDGETS = (0.25, 0.5)  # shares of the model's device bytes the report previews placement at


@dataclass
class RouteProfile:
    activation: str
    exp_freq: np.ndarray   # [n_layer, n_expert] share of tokens routed to each expert
    run_freq: np.ndarray   # [n_layer, n_expert, runs] share of tokens reading each run's up/down rows
    n_tokens: int
    seconds: float


def n_runs(n_ff_exp: int) -> int:
    return (n_ff_exp + FFN_RUN - 1) // FFN_RUN


def live_run_share(gate: np.ndarray, x: np.ndarray, n_ff_exp: int) -> np.ndarray:
    """Mean over the rows of x [m, n_embd] of each run's share of live neurons (gate row . x > 0,
    what relu leaves non-zero) for one expert's gate [n_ff_exp, n_embd]: [runs]."""
    live = (x @ gate.T > 0).astype(np.float64)  # [m, n_ff_exp]
    bounds = np.arange(0, n_ff_exp, FFN_RUN)
    sums = np.add.reduceat(live.sum(axis=0), bounds)
    return sums / (np.diff(np.append(bounds, n_ff_exp)) * max(len(x), 1))


def live_shares(reader, info, routes: np.ndarray, ffn_in: np.ndarray) -> np.ndarray:
    """[n_layer, n_expert, runs]: each run's mean live share over the tokens routed to its expert
    (1 where none was), from the FFN inputs [n_layer, tokens, n_embd] and the gate rows."""
    live = np.ones((info.n_layer, info.n_expert, n_runs(info.n_ff_exp)))
    for il in range(info.n_layer):
        gates = write.tensor(reader, f"blk.{il}.ffn_gate_exps.weight")
        gates = dequantize(gates.data, gates.tensor_type).reshape(info.n_expert, info.n_ff_exp, info.n_embd)
        for e in range(info.n_expert):
            rows = np.flatnonzero((routes[il] == e).any(axis=1))
            if len(rows):
                live[il, e] = live_run_share(gates[e], ffn_in[il, rows].astype(np.float32), info.n_ff_exp)
    return live


def run_route_profile(model, reader, chunks: list[np.ndarray], *, n_threads: int = 2, tick=None) -> RouteProfile:
    """Dense forward passes with the routing capture on; `model` is a pypowerinfer NativeModel,
    `reader` the same file's GGUFReader (ReLU-gated experts: their gate rows, dequantized)."""
    from pypowerinfer.model import NativeContext

    info = model.info
    n_layer, d, k, n_expert = info.n_layer, info.n_embd, info.n_expert_used, info.n_expert
    relu = is_relu_family(info.ffn_act)
    n_ctx = max(len(c) for c in chunks)
    n_total = sum(len(c) for c in chunks)
    cap_in = np.zeros((n_layer, n_ctx, d), dtype=np.float32)
    cap_ex = np.zeros((n_layer, n_ctx, k), dtype=np.int32)
    routes = np.empty((n_layer, n_total, k), dtype=np.int32)
    ffn_in = np.empty((n_layer, n_total, d), dtype=np.float16) if relu else None
    t0 = time.perf_counter()
    ctx = NativeContext(model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                        logits_all=False, sparse=0)
    try:
        ctx.set_capture(cap_in, None, cap_ex)
        at = 0
        for toks in chunks:
            n = len(toks)
            ctx.decode(toks, 0)
            routes[:, at:at + n] = cap_ex[:, :n]
            if relu:
                ffn_in[:, at:at + n] = cap_in[:, :n]
            at += n
            if tick:
                tick(1)
        ctx.set_capture(None, None)
    finally:
        ctx.close()
    if routes.min() < 0 or routes.max() >= n_expert:
        raise ConvertError("the routing capture holds an expert outside 0..n_expert-1")
    exp_freq = np.stack([np.bincount(routes[il].ravel(), minlength=n_expert) for il in range(n_layer)]) / n_total
    live = live_shares(reader, info, routes, ffn_in) if relu else np.ones((n_layer, n_expert, n_runs(info.n_ff_exp)))
    seconds = time.perf_counter() - t0
    log.info("profiled the routing of %d tokens in %.1f s, %.0f tokens/s", n_total, seconds, n_total / seconds)
    return RouteProfile(activation=info.ffn_act, exp_freq=exp_freq.astype(np.float32),
                        run_freq=(exp_freq[:, :, None] * live).astype(np.float32), n_tokens=n_total, seconds=seconds)


def tensors(p: RouteProfile) -> list[NewTensor]:
    f32 = GGMLQuantizationType.F32
    return [t for il in range(len(p.exp_freq)) for t in (
        NewTensor(f"blk.{il}.ffn_exp_freq", p.exp_freq[il], f32),
        NewTensor(f"blk.{il}.ffn_exp_run_freq", np.ascontiguousarray(p.run_freq[il]), f32))]


def decision(p: RouteProfile, info) -> str:
    what = "routing shares" + (" and each run's live share (ReLU experts)" if is_relu_family(p.activation) else "")
    return (f"MoE: dense MoE kept (the router reads {info.n_expert_used} of {info.n_expert} experts per token; "
            f"no predictors for MoE FFNs); profiled {what} of {p.n_tokens} tokens for the device placement")


def keys(p: RouteProfile, corpus_name: str, reason: str, format_version: int, skip: dict | None = None) -> dict:
    """The file's powerinfer.* keys; `skip`: the ReGLU experts' choice (choose_skip), if any."""
    u32, s = GGUFValueType.UINT32, GGUFValueType.STRING
    return {"powerinfer.format_version": (format_version, u32), "powerinfer.activation": (p.activation, s),
            "powerinfer.calibration_corpus": (corpus_name, s), "powerinfer.calibration_tokens": (p.n_tokens, u32),
            **decide.decision_keys(False, reason),
            **(decide.expert_skip_keys(skip["skip"], skip["reason"]) if skip else {})}


def choose_skip(args, staged, tokenizer) -> dict:
    """ReGLU experts: held-out decode speed of the file to be written (`staged`, which loads
    with the activation profiled) skipping dead expert rows and computing every row
    (decide.measure_expert_skip), and the choice."""
    bos = tokenizer.bos_id if tokenizer.add_bos and tokenizer.bos_id >= 0 else None
    heldout = decide.heldout_chunks(lambda b: tokenizer.encode(b, add_bos=False, special=False), bos)
    m = decide.measure_expert_skip(staged, heldout, n_threads=args.threads)
    if args.assume_speedup is not None:
        m = replace(m, dense_tok_s=1.0, skip_tok_s=float(args.assume_speedup), speed_assumed=True)
    skip, reason = decide.decide_expert_skip(m)
    log.info("experts: %s", reason)
    return {"skip": skip, "reason": reason, **m.as_dict()}


def placement_preview(out) -> list[dict]:
    """The written file's plan at BUDGETS: what the device would hold of its experts."""
    from pypowerinfer.model import NativeModel

    model = NativeModel(out)
    try:
        total = model.device_bytes()
        rows = []
        for share in BUDGETS:
            plan = model.plan(int(share * total))
            moe = [x for x in plan.layers if x.n_expert_runs]
            rows.append({"budget_share": share, "budget": plan.budget, "expert_bytes": plan.expert_bytes,
                         "mean_expert_coverage": float(np.mean([x.expert_coverage for x in moe])) if moe else 0.0,
                         "value": plan.value, "upper_bound_value": plan.upper_bound_value})
        return rows
    finally:
        model.close()


def convert(args, *, src, out, reader, markers, model, tokenizer, format_version: int, n_ctx: int) -> dict:
    """Profile the routing, write the extended GGUF, report; returns the report."""
    if args.reuse_profile or args.save_profile:
        raise ConvertError("--save-profile / --reuse-profile keep a dense FFN profile; an MoE model has none")
    t0 = time.perf_counter()
    info = model.info
    name, entries = corpus.corpus_entries(args.corpus)
    ids = corpus.token_stream(lambda b: tokenizer.encode(b, add_bos=False, special=False), entries, args.tokens)
    chunks = corpus.chunk(ids, n_ctx, tokenizer.bos_id if tokenizer.add_bos and tokenizer.bos_id >= 0 else None)
    if not chunks:
        raise ConvertError(f"calibration text gives {len(ids)} tokens; need at least {n_ctx}")
    p = run_route_profile(model, reader, chunks, n_threads=args.threads)
    model.close()
    reason = decision(p, info)
    log.info("decision: %s", reason)
    skip = None
    with write.Staging(out) as staging:
        staged = staging.write(write.write_gguf, reader, tensors(p), keys(p, name, reason, format_version),
                               drop_profile=bool(markers))
        if p.activation == "relu_glu":  # then written again with the choice's keys
            skip = choose_skip(args, staged, tokenizer)
            staging.discard(staged)
            staged = staging.write(write.write_gguf, reader, tensors(p), keys(p, name, reason, format_version, skip),
                                   drop_profile=bool(markers))
        staging.commit(staged)
    log.info("wrote %s (%.1f MB)", out, out.stat().st_size / 1e6)
    rep = {"input": str(src), "output": str(out), "moe": True, "n_layer": info.n_layer, "n_expert": info.n_expert,
           "n_expert_used": info.n_expert_used, "n_ff_exp": info.n_ff_exp, "activation": p.activation,
           "calibration": {"corpus": name, "tokens": p.n_tokens}, "profile_seconds": p.seconds,
           "expert_freq": p.exp_freq.tolist(), "run_freq": p.run_freq.tolist(),
           "decision": {"sparse_default": False, "reason": reason}, "expert_skip": skip,
           "placement": placement_preview(out), "seconds": time.perf_counter() - t0}
    print_table(rep, sys.stdout)
    report.save(rep, out, plot=False)
    return rep


def print_table(rep: dict, stream) -> None:
    freq = np.asarray(rep["expert_freq"])
    stream.write(f"{rep['output']}: {rep['n_layer']} layers of {rep['n_expert']} experts ({rep['n_expert_used']} "
                 f"routed per token), {rep['calibration']['tokens']} calibration tokens\n")
    stream.write(f"{'layer':>5} {'hottest':>8} {'coldest':>8} {'top quarter':>12}\n")
    quarter = max(1, freq.shape[1] // 4)
    for il, f in enumerate(freq):
        top = np.sort(f)[::-1][:quarter].sum() / max(f.sum(), 1e-12)
        stream.write(f"{il:>5} {f.max():>8.3f} {f.min():>8.3f} {top:>11.1%}\n")
    for row in rep["placement"]:
        stream.write(f"budget {row['budget_share']:.0%}: experts {row['expert_bytes'] / 2**20:.2f} MiB, mean expert "
                     f"coverage {row['mean_expert_coverage']:.1%}\n")
    stream.write(f"decision: {rep['decision']['reason']}\n")
    if rep.get("expert_skip"):
        stream.write(f"experts:  {rep['expert_skip']['reason']}\n")
