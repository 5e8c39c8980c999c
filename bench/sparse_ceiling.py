"""Sparse decode against its byte ceiling, side by side with dense in one run.

    python bench/sparse_ceiling.py MODEL.powerinfer.gguf [-t THREADS] [--decode 64] [--repeats 3]
                                   [--bandwidth GBPS] [--json OUT] [--plain PLAIN.gguf]

Decode: one-token steps after a 64-token prompt of held-out text (bench/perplexity.py's
decode_speed), dense (sparse=0) and through the predictors (sparse=1), alternating, best of
--repeats each. Bytes: what the runtime counted it read per generated token (sparse_stats():
embedding row, attention, output, predictors, the FFN rows computed), against what a dense token
reads. The ceiling is dense bytes / sparse bytes: the most the sparse FFN can speed decode up when
decode is bound by reading weights; the share of the ceiling says how close the kernels come.
--bandwidth (GB/s, default 33: this project's 2-core machines, DESIGN.md) adds the roofline
tok/s each side would reach reading its bytes at that rate. --plain PLAIN.gguf: the sides are
PLAIN (dense) and MODEL as `Llama` opens it by default (the mode its converter chose).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perplexity import PROMPT, decode_speed, heldout_chunks  # noqa: E402


def measure(sides: list[tuple[str, str, int]], tokens: np.ndarray, threads: int, repeats: int) -> dict[str, dict]:
    """Best of `repeats` decode runs of each (name, file, sparse mode), taking turns."""
    best: dict[str, dict] = {}
    for _ in range(repeats):
        for name, path, sparse in sides:
            res = decode_speed(path, tokens, sparse=sparse, threads=threads)
            if name not in best or res["decode_tok_s"] > best[name]["decode_tok_s"]:
                best[name] = res
    return best


def default_mode(path: str) -> tuple[int, str]:
    """The sparse mode `Llama(path)` runs with its defaults, and why (the file's decision)."""
    from pypowerinfer import Llama
    from pypowerinfer.model import Sparse

    with Llama(path, n_ctx=16, verbose=False) as llm:
        mode = {m.label: m for m in Sparse}[llm.sparse_mode]
        return int(mode), llm.sparse_reason


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a converted GGUF (convert/add_profile.py) or a PowerInfer file")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--decode", type=int, default=64, help="one-token steps per measurement (default 64)")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many, each side (default 3)")
    ap.add_argument("--bandwidth", type=float, default=33.0, help="GB/s for the roofline column (default 33)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--plain", help="the unconverted file: compare it (dense) with MODEL opened with Llama's defaults "
                                    "(the mode the converter chose) instead of MODEL's dense and sparse decode")
    args = ap.parse_args(argv)

    chunks = heldout_chunks(args.model, max(1, (PROMPT + args.decode + 255) // 256))
    tokens = np.concatenate(chunks)[:PROMPT + args.decode]
    if args.plain:  # the converted file as Llama opens it, against the file it was converted from
        mode, why = default_mode(args.model)
        print(f"{Path(args.model).name} with Llama's defaults: {why}")
        best = measure([("plain", args.plain, 0), ("default", args.model, mode)], tokens, args.threads, args.repeats)
        dense, sparse = best["plain"], best["default"]
    else:
        best = measure([("dense", args.model, 0), ("sparse", args.model, 1)], tokens, args.threads, args.repeats)
        dense, sparse = best["dense"], best["sparse"]
    ceiling = dense["bytes_per_token"] / sparse["bytes_per_token"]
    ratio = sparse["decode_tok_s"] / dense["decode_tok_s"]
    print(f"{Path(args.model).name}: {args.threads} threads, {args.decode} decode steps, best of {args.repeats}")
    print(f"{'':<7} {'tok/s':>8} {'FFN rows':>9} {'MB/token':>9} {'roofline tok/s':>15} {'of roofline':>12}")
    for name, res in best.items():
        roofline = args.bandwidth * 1e9 / res["bytes_per_token"]
        print(f"{name:<7} {res['decode_tok_s']:>8.1f} {100 * res['decode_rows_share']:>8.1f}% "
              f"{res['bytes_per_token'] / 1e6:>9.2f} {roofline:>15.1f} {100 * res['decode_tok_s'] / roofline:>11.1f}%")
    print(f"ceiling (dense bytes / sparse bytes) {ceiling:.2f}x; measured sparse/dense {ratio:.2f}x; "
          f"{100 * ratio / ceiling:.0f}% of the ceiling")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "threads": args.threads, "rows": best,
                                         "ceiling": ceiling, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
