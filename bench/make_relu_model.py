"""A synthetic ReLU-sparse model for the sparse-runtime benchmarks.

    python bench/make_relu_model.py [-o OUT] [--shape smollm2|1b] [--n-vocab N] [--n-embd N] [--n-ff N]
                                    [--n-layer N] [--n-head N] [--n-head-kv N] [--type Q4_0] [--fire F] [--seed S]

Architecture `bamboo` (PowerInfer's dReLU: relu(gate) * relu(up)) with random weights of --type
(default Q4_0). --shape picks a preset; each dimension option overrides it.
Natural sparsity comes from per-neuron gate biases: neuron i fires with a probability p_i that
falls off with its rank like a power law (a few hot neurons fire often, most rarely), scaled so
the mean is --fire (default 0.20). relu(up) then zeroes about half of those again, so about 10%
of the activation products are nonzero: ~90% sparsity. For a unit-RMS input the pre-activation
w_i·x has spread ~|w_i|, so a bias of -|w_i| * Phi^-1(1 - p_i) gives that probability.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
from gguf import GGUFReader

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from reference import dequantize_tensor  # noqa: E402
from synthetic import rewrite_gguf, write_llama_gguf  # noqa: E402

SHAPES = {
    # SmolLM2-135M's dimensions (vocab smaller: the synthetic tokenizer's limit)
    "smollm2": dict(n_vocab=32000, n_embd=576, n_layer=30, n_head=9, n_head_kv=3, n_ff=1536),
    # ~1B parameters, TinyLlama-like
    "1b": dict(n_vocab=32000, n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632),
}


def firing_probabilities(n_ff: int, mean: float, rng: np.random.Generator) -> np.ndarray:
    """Power-law probabilities over a random neuron order, rescaled to `mean`, capped at 0.9."""
    p = (np.arange(n_ff) + 1.0) ** -0.7
    p = np.minimum(p * (mean * n_ff / p.sum()), 0.9)
    for _ in range(20):  # re-spread what the cap cut off
        p = np.minimum(p * (mean * n_ff / p.sum()), 0.9)
    return rng.permutation(p)


def gate_biases(gate: np.ndarray, p: np.ndarray) -> np.ndarray:
    quantile = np.array([NormalDist().inv_cdf(1.0 - float(x)) for x in p], dtype=np.float32)
    return (-np.linalg.norm(gate, axis=1) * quantile).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2", help="the preset dimensions")
    for dim in SHAPES["smollm2"]:
        ap.add_argument("--" + dim.replace("_", "-"), type=int, dest=dim, help=f"{dim} (default: the shape's)")
    ap.add_argument("--type", default="Q4_0", help="weight type of the matrices (a gguf type name; output Q8_0)")
    ap.add_argument("--fire", type=float, default=0.20, help="mean share of neurons whose relu(gate) fires")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    dims = {dim: getattr(args, dim) or value for dim, value in SHAPES[args.shape].items()}
    if dims["n_head"] % dims["n_head_kv"] or dims["n_embd"] % dims["n_head"]:
        ap.error(f"n_head {dims['n_head']} must be a multiple of n_head_kv {dims['n_head_kv']} and divide "
                 f"n_embd {dims['n_embd']}")
    preset = all(dims[k] == v for k, v in SHAPES[args.shape].items())
    name = args.shape if preset else "e{n_embd}-ff{n_ff}-l{n_layer}".format(**dims)
    out = Path(args.output or HERE / "models" / f"relu-{name}-{args.type.lower()}.gguf")
    if out.exists() and not args.force:
        print(f"{out} exists (use --force to rebuild)")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    plain = out.with_suffix(".plain.tmp")
    write_llama_gguf(plain, **dims, n_ctx_train=2048, weight_type=args.type.upper(), output_type="Q8_0",
                     arch="bamboo", seed=args.seed)
    rng = np.random.default_rng(args.seed)
    tensors = {t.name: t for t in GGUFReader(plain).tensors}
    biases = {}
    for il in range(dims["n_layer"]):
        gate = dequantize_tensor(tensors[f"blk.{il}.ffn_gate.weight"])
        biases[f"blk.{il}.ffn_gate.bias"] = gate_biases(gate, firing_probabilities(dims["n_ff"], args.fire, rng))
    tmp = out.with_suffix(".tmp")
    rewrite_gguf(plain, tmp, add_tensors=biases)
    plain.unlink()
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.0f} MB), mean gate firing rate {args.fire:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
