"""How well can a SwiGLU model's per-token active set be predicted? The measurement behind the
[sparse] notes: per layer, the share of the FFN output's energy lost when each token keeps only
k of its n_ff neurons, chosen by

  oracle   the true top-k of |act_i| * |down column i|          (what the labels ask for)
  static   the k neurons with the most energy on average         (no predictor at all)
  file     the top-k of the converted file's predictor logits    (what the runtime can use)
  gate     the top-k of |SiLU(gate_i)| * mean |up_i| * |down_i|  (gate computed exactly: 1/3 of the FFN)

    python bench/predictor_study.py MODEL.powerinfer.gguf [--layers 0,5,11,20,29] [--chunks 16]

Text: the held-out split of pydoc_data.topics, never the calibration text. Energy lost is
sum over dropped i of (act_i |d_i|)^2 over the sum over all i, per token, then averaged: it
treats the down columns as orthogonal, a proxy for the output error that needs no signs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from convert import profile as prof  # noqa: E402
from convert import write  # noqa: E402

KEEP = (0.9, 0.7, 0.5)


def weight(reader, name: str) -> np.ndarray:
    """A 2-D tensor as float32 in numpy order (n_out, n_in)."""
    t = write.tensor(reader, name)
    return write.decode_weight(t.data, t.tensor_type).reshape(int(t.shape[1]), int(t.shape[0]))


def energy_lost(score: np.ndarray, energy: np.ndarray, k: int) -> float:
    keep = np.argpartition(-score, k - 1, axis=1)[:, :k]
    kept = np.take_along_axis(energy, keep, 1).sum(1)
    return float(np.mean(1.0 - kept / np.maximum(energy.sum(1), 1e-30)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a converted GGUF of a SiLU-GLU model (convert/add_profile.py)")
    ap.add_argument("--layers", default="0,5,11,20,29")
    ap.add_argument("--chunks", type=int, default=16, help="held-out chunks of 256 tokens")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from bench.perplexity import heldout_chunks
    from pypowerinfer.model import NativeModel

    chunks = heldout_chunks(args.model, args.chunks)
    model = NativeModel(args.model)
    try:
        # half of the chunks fit the static ranking, the other half are scored
        half = len(chunks) // 2
        p = prof.run_profile(model, chunks[:half], chunks[half:], targets=[0.5], n_threads=args.threads,
                             progress=False)
    finally:
        model.close()
    reader = write.open_gguf(args.model)
    n_ff = p.n_ff
    print(f"{Path(args.model).name}: energy lost keeping k of {n_ff} neurons per token, "
          f"{p.n_tokens - p.n_train} scored tokens")
    print(f"{'layer':>5} {'keep':>5} {'oracle':>8} {'static':>8} {'file':>8} {'gate':>8}")
    for layer in (int(x) for x in args.layers.split(",")):
        down_norm = np.linalg.norm(weight(reader, f"blk.{layer}.ffn_down.weight"), axis=0)
        x = p.ffn_in[layer].astype(np.float32)
        energy = (p.act_abs[layer].astype(np.float32) * down_norm) ** 2
        train, test = slice(0, p.n_train), slice(p.n_train, None)
        static = np.broadcast_to(energy[train].mean(0), energy[test].shape)
        fc1, fc2 = weight(reader, f"blk.{layer}.fc1.weight"), weight(reader, f"blk.{layer}.fc2.weight")
        logits = np.maximum(x[test] @ fc1.T, 0.0) @ fc2.T
        g = x[test] @ weight(reader, f"blk.{layer}.ffn_gate.weight").T
        up_mean = np.abs(x[train] @ weight(reader, f"blk.{layer}.ffn_up.weight").T).mean(0)
        gate = np.abs(g / (1.0 + np.exp(-g))) * up_mean * down_norm
        for keep in KEEP:
            k = max(1, int(keep * n_ff))
            row = [energy_lost(s, energy[test], k) for s in (energy[test], static, logits, gate)]
            print(f"{layer:>5} {keep:>5.1f} " + " ".join(f"{v:>8.4f}" for v in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
