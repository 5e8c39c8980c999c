"""What the converter measured: the terminal table, <stem>.profile.json and <stem>.profile.png.

The PNG needs matplotlib (the `convert` extra); without it the PNG is skipped with a warning.
"""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np

from convert import write

log = logging.getLogger("convert.report")


def side_path(out: Path, suffix: str) -> Path:
    """<stem>.profile.json beside the output, <stem> being the output name less .powerinfer.gguf."""
    name = out.name
    for ext in (".powerinfer.gguf", ".gguf"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return out.with_name(name + suffix)


def _candidate(c, dense_ppl: float) -> dict:
    ev = dict(c.eval or {})
    if ev:
        ev["ppl_increase_pct"] = 100.0 * (ev["ppl"] / dense_ppl - 1.0)
    return {"sparsity_target": c.sparsity_target, "target_recall": c.recall,
            "predicted_sparsity": c.predicted_sparsity, "eval": ev}


def build(*, src, out, info, p, ch, best, corpus_name, seconds, profile_seconds, args) -> dict:
    fits = ch.fits[best.target]
    layers = []
    for layer, (f, q) in enumerate(zip(fits, best.quality)):
        layers.append({"layer": layer, "rank": f.rank, "predictor_type": f.qtype.name, "train_seconds": f.seconds,
                       **q.as_dict()})
    return {
        "input": str(src), "output": str(out),
        "model": {"n_layer": info.n_layer, "n_embd": info.n_embd, "n_ff": info.n_ff, "ffn_act": info.ffn_act},
        "calibration": {"corpus": corpus_name, "tokens": p.n_tokens, "train_tokens": p.n_train,
                        "validation_tokens": p.n_tokens - p.n_train, "chunk_tokens": len(p.val_chunks[0]),
                        "profile_tokens_per_s": p.tokens_per_s},
        "seconds": {"total": seconds, "profile": p.seconds, "until_training": profile_seconds,
                    "train": {f"{p.targets[t]:.2f}": float(sum(f.seconds for f in fs)) for t, fs in ch.fits.items()}},
        "settings": {"max_ppl_increase": args.max_ppl_increase, "sparsity_target": args.sparsity_target,
                     "recall": args.recall, "epochs": args.epochs, "rank": args.rank},
        "dense_validation_ppl": ch.dense_ppl,
        "chosen": _candidate(best, ch.dense_ppl),
        "candidates": [_candidate(c, ch.dense_ppl) for c in ch.evaluated],
        "ppl_measured_sparse": bool(best.eval and best.eval.get("sparse_ran")),
        "layers": layers,
        "oracle_sparsity_targets": list(p.targets),
        "neuron_freq": p.frequency(best.target).tolist(),           # [n_layer][n_ff], what blk.N.ffn_freq holds
        "neuron_mean_abs_act": p.mean_abs_act.tolist(),         # [n_layer][n_ff]
        "neuron_nonzero_share": p.nonzero_share.mean(axis=1).tolist(),  # per layer
    }


def print_table(rep: dict, stream) -> None:
    ch = rep["chosen"]
    print(f"\nsparsity target {ch['sparsity_target']:.2f}, weighted-recall target {ch['target_recall']:.2f}"
          f" (validation: {rep['calibration']['validation_tokens']} tokens)", file=stream)
    print(f"{'layer':>5} {'rank':>4} {'type':>5} {'recall':>7} {'count_r':>7} {'precis':>7} {'sparsity':>8} "
          f"{'oracle':>7}", file=stream)
    for r in rep["layers"]:
        print(f"{r['layer']:>5} {r['rank']:>4} {r['predictor_type']:>5} {r['recall']:>7.3f} {r['count_recall']:>7.3f} "
              f"{r['precision']:>7.3f} {r['sparsity']:>8.3f} {r['label_sparsity']:>7.3f}", file=stream)
    mean = lambda k: float(np.mean([r[k] for r in rep["layers"]]))  # noqa: E731
    print(f"{'mean':>5} {'':>4} {'':>5} {mean('recall'):>7.3f} {mean('count_recall'):>7.3f} {mean('precision'):>7.3f} "
          f"{mean('sparsity'):>8.3f} {mean('label_sparsity'):>7.3f}", file=stream)
    ev = ch["eval"]
    if ev:
        measured = "sparse runtime" if ev.get("sparse_ran") else "runtime ran dense: sparse ppl NOT measured"
        print(f"validation ppl dense {rep['dense_validation_ppl']:.3f}, this setting {ev['ppl']:.3f} "
              f"({ev['ppl_increase_pct']:+.1f}%, {measured}), FFN rows computed {100 * ev['ffn_rows_share']:.1f}%",
              file=stream)
    costs = rep.get("ffn_down_t", {}).get("costs", {})
    if costs:
        print("ffn_down_t type  bytes/weight  validation ppl  cost over the search type", file=stream)
        for name, c in costs.items():
            ppl = "-" if c["ppl"] is None else f"{c['ppl']:.3f}"
            mark = "  <- chosen" if c["chosen"] else ("" if c["fits"] else "  (over the budget)")
            print(f"{name:>16} {c['bytes_per_weight']:>13.4f} {ppl:>15} {c['cost_pct']:>+9.2f}%{mark}", file=stream)
    d = rep.get("decision")
    if d:
        print(f"held-out decode, token by token ({d['tokens']} tokens): ppl dense {d['dense_ppl']:.3f}, sparse "
              f"{d['sparse_ppl']:.3f} ({d['ppl_increase_pct']:+.1f}%), {100 * d['rows_share']:.1f}% of FFN rows; "
              f"decode {d['dense_tok_s']:.1f} -> {d['sparse_tok_s']:.1f} tok/s"
              + (" (assumed)" if d["speed_assumed"] else ""), file=stream)
        print(f"decision: {d['reason']}", file=stream)
    print(f"total {rep['seconds']['total']:.1f} s -> {rep['output']}", file=stream)


def plot_png(rep: dict) -> bytes | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'pypowerinfer[convert]'): skipping the PNG")
        return None
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    freq = np.asarray(rep["neuron_freq"])
    cmap = plt.get_cmap("viridis")
    for layer, f in enumerate(freq):
        ax[0].plot(np.sort(f)[::-1], color=cmap(layer / max(len(freq) - 1, 1)), lw=0.8)
    ax[0].set(title="neuron activation frequency (sorted, colour = layer)", xlabel="neuron rank",
              ylabel="share of tokens active")
    layers = rep["layers"]
    x = [r["layer"] for r in layers]
    for key, label in (("recall", "weighted recall"), ("count_recall", "count recall"), ("precision", "precision"),
                       ("sparsity", "predicted sparsity"), ("label_sparsity", "oracle sparsity")):
        ax[1].plot(x, [r[key] for r in layers], marker=".", label=label)
    ax[1].set(title="predictor per layer (validation tokens)", xlabel="layer", ylim=(0, 1.02))
    ax[1].legend(fontsize=8)
    pts = sorted((c["predicted_sparsity"], c["eval"]["ppl"]) for c in rep["candidates"] if c["eval"])
    if pts:
        ax[2].plot([a for a, _ in pts], [b for _, b in pts], marker="o", label="candidates")
        ax[2].axhline(rep["dense_validation_ppl"], color="grey", ls="--", label="dense")
        ch = rep["chosen"]
        if "ppl" in ch["eval"]:  # a denser setting the decision fell back to may not have been measured batched
            ax[2].plot([ch["predicted_sparsity"]], [ch["eval"]["ppl"]], "r*", ms=12, label="chosen")
        ax[2].legend(fontsize=8)
    note = "" if rep["ppl_measured_sparse"] else " (runtime ran dense)"
    ax[2].set(title="validation ppl" + note, xlabel="predicted sparsity", ylabel="perplexity")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def save(rep: dict, out: Path, plot: bool = True) -> None:
    path = side_path(out, ".profile.json")
    write.write_small(path, json.dumps(rep, indent=1).encode())
    log.info("wrote %s", path)
    if plot:
        png = plot_png(rep)
        if png is not None:
            path = side_path(out, ".profile.png")
            write.write_small(path, png)
            log.info("wrote %s", path)
