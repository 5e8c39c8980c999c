"""Write a random-weight 1.1B llama GGUF with TinyLlama-1.1B's dimensions, for benchmarks.

    python bench/make_tinyllama.py [-o bench/models/tinyllama-1.1b-random-q4_0.gguf] [--force]

Weights are Q4_0 (output.weight Q8_0, where the real TinyLlama has Q6_K: K-quants
are not supported yet), norms F32, and a 32000-token byte-level BPE vocab. The
weights are random, so only speed means anything here, not the text. Deterministic
for a given --seed; an existing file is kept unless --force.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic import write_llama_gguf  # noqa: E402  (shared with the test models)

TINYLLAMA = dict(n_vocab=32000, n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632,
                 n_ctx_train=2048, rope_freq_base=10000.0, weight_type="Q4_0", output_type="Q8_0")
DEFAULT_OUT = Path(__file__).resolve().parent / "models" / "tinyllama-1.1b-random-q4_0.gguf"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rewrite an existing file")
    args = ap.parse_args(argv)

    if args.output.exists() and not args.force:
        print(f"{args.output} exists; --force to rewrite")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed, so an interrupted run never leaves a
    # truncated file that a later run would skip as done.
    partial = args.output.with_name(args.output.name + ".partial")
    start = time.perf_counter()
    write_llama_gguf(partial, seed=args.seed, extra_kv={"general.name": "tinyllama-1.1b-random"}, **TINYLLAMA)
    partial.replace(args.output)
    size_mb = args.output.stat().st_size / 1e6
    print(f"wrote {args.output} ({size_mb:.0f} MB) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
