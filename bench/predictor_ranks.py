"""What a predictor's rank buys: per layer, the FFN rows it picks at a recall, against its bytes.

    python bench/predictor_ranks.py PROFILE.npz MODEL.gguf [--layers 10] [--ranks 64,128,256,512]
                                    [--recall 0.98] [--epochs 4]

PROFILE.npz is a profile saved by `convert/add_profile.py MODEL.gguf --save-profile`. Each rank is
trained as the converter trains it (convert/add_profile.py's _fit_layer: its storage type and
threshold on the validation split); printed per rank: the share of FFN rows computed, the
predictor's stored bytes, and the bytes a token would read in that layer (predictor, plus gate and
up of every row picked, the down rows of the truly active ones).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gguf import GGUFReader

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from convert import saved  # noqa: E402
from convert.add_profile import _fit_layer  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("model", type=Path, help="the model the profile was taken of")
    ap.add_argument("--layers", default="10")
    ap.add_argument("--ranks", default="64,128,256,512")
    ap.add_argument("--recall", type=float, default=0.98)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args(argv)
    _, p = saved.load(args.profile, args.model)
    tensors = {t.name: t for t in GGUFReader(args.model).tensors}
    print(f"{'layer':>5} {'rank':>5} {'type':>5} {'rows':>7} {'predictor MB':>13} {'MB read':>8} {'dense MB':>9}")
    for layer in map(int, args.layers.split(",")):
        row = {n: int(tensors[f"blk.{layer}.{n}.weight"].n_bytes) / p.n_ff for n in ("ffn_gate", "ffn_up", "ffn_down")}
        active = float(p.nonzero_share[layer].mean()) if p.relu else 1.0
        for rank in map(int, args.ranks.split(",")):
            fit, sparsity = _fit_layer(p, 0, layer, rank, epochs=args.epochs, recall=args.recall, init=None)
            pred = fit.fc1.nbytes + fit.fc2.nbytes
            read = pred + (1 - sparsity) * p.n_ff * (row["ffn_gate"] + row["ffn_up"]) + active * p.n_ff * row["ffn_down"]
            print(f"{layer:>5} {rank:>5} {fit.qtype.name:>5} {1 - sparsity:>6.1%} {pred / 1e6:>13.2f} "
                  f"{read / 1e6:>8.2f} {sum(row.values()) * p.n_ff / 1e6:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
