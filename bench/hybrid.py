"""Decode speed of the hot/cold split at several device budgets, against the all-CPU runs.

    python bench/hybrid.py MODEL.powerinfer.gguf [--budgets 25,50,100] [--device cuda|host]
                           [--decode 64] [-t THREADS] [--markdown OUT.md]

Rows: dense on the CPU; sparse on the CPU; then per budget (a share of the bytes a token reads,
pi_model_device_bytes) the split with --device computing the hot neurons, with the share of
activations the hot neurons serve, and beside it layer offload at the same budget: the last
n_gpu_layers whole layers that fit it on the CUDA device, dense, as llama.cpp offloads (with
--device cuda only; the host stand-in has no layer offload). Text: the held-out split of
pydoc_data.topics for real models; any token ids do for synthetic ones.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from bench.perplexity import PROMPT, decode_speed, heldout_chunks  # noqa: E402
from convert.write import ADDED_TENSORS  # noqa: E402

DEVICES = {"none": 0, "host": 1, "cuda": 2}


def offload_layer_bytes(path: str, n_layer: int) -> list[int]:
    """Per layer, the bytes layer offload puts on the device: every tensor of blk.N (attention,
    the dense FFN, norms, biases) but the split's own (predictors, frequencies, and ffn_down_t
    where ffn_down is there to read instead)."""
    from gguf import GGUFReader

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    out = []
    for il in range(n_layer):
        prefix = f"blk.{il}."
        split_own = {prefix + t for t in ADDED_TENSORS if t != "ffn_down_t.weight" or prefix + "ffn_down.weight" in sizes}
        out.append(sum(n for name, n in sizes.items() if name.startswith(prefix) and name not in split_own))
    return out


def layers_within(layer_bytes: list[int], budget: int) -> int:
    """How many of the last layers fit `budget` whole: llama.cpp's n_gpu_layers at that budget."""
    k, used = 0, 0
    for b in reversed(layer_bytes):
        if used + b > budget:
            break
        used, k = used + b, k + 1
    return k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--budgets", default="25,50,100", help="device budgets, percent of the model's device bytes")
    ap.add_argument("--device", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--decode", type=int, default=64, help="one-token steps per measurement")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    args = ap.parse_args(argv)

    from pypowerinfer.model import NativeModel

    model = NativeModel(args.model)
    total = model.device_bytes()
    plans = {b: model.plan(int(float(b) / 100 * total)) for b in args.budgets.split(",") if b}
    layer_bytes = offload_layer_bytes(args.model, len(model.plan(0).layers))
    model.close()
    tokens = np.concatenate(heldout_chunks(args.model, 1 + (PROMPT + args.decode) // 256))[:PROMPT + args.decode]

    rows = [("dense, CPU", "-", "-", decode_speed(args.model, tokens, sparse=0, threads=args.threads)),
            ("sparse, CPU", "-", "-", decode_speed(args.model, tokens, sparse=1, threads=args.threads))]
    offload = {}  # budget -> (n_gpu_layers, tok/s)
    for b, plan in plans.items():
        speed = decode_speed(args.model, tokens, sparse=1, threads=args.threads, device=DEVICES[args.device],
                             vram_budget=plan.budget)
        covered = sum(x.coverage for x in plan.layers) / max(len(plan.layers), 1)
        rows.append((f"hybrid ({args.device}), {b}% budget", f"{plan.budget / 2**20:.1f} MiB", f"{100 * covered:.1f}%",
                     speed))
        if args.device == "cuda":
            k = layers_within(layer_bytes, plan.budget)
            tok_s = decode_speed(args.model, tokens, sparse=0, threads=args.threads, n_gpu_layers=k)["decode_tok_s"] \
                if k else rows[0][3]["decode_tok_s"]
            offload[rows[-1][0]] = (k, tok_s)
    base = rows[0][3]["decode_tok_s"]
    lines = [f"{Path(args.model).name}: {total / 2**20:.1f} MiB a token reads, {args.threads} CPU threads, "
             f"{args.decode} decode steps",
             "", "| setting | device budget | activations on device | decode tok/s | vs dense CPU "
                 "| layer offload at that budget | hybrid vs layer offload |",
             "|---|---|---|---|---|---|---|"]
    for name, budget, covered, speed in rows:
        tok_s = speed["decode_tok_s"]
        if name in offload:
            k, off = offload[name]
            against = f"{k} layers, {off:.1f} tok/s | {tok_s / off:.2f}x"
        else:
            against = "- | -" if budget == "-" else "cuda only | -"
        lines.append(f"| {name} | {budget} | {covered} | {tok_s:.1f} | {tok_s / base:.2f}x | {against} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
