"""Write a random-weight 1.1B llama GGUF with TinyLlama-1.1B's dimensions, for benchmarks.

    python bench/make_tinyllama.py [--mix q4_0|q4_k_m] [-o OUT] [--force]

--mix q4_0 (the default): weights Q4_0, output.weight Q8_0. --mix q4_k_m: llama.cpp's Q4_K_M
mix, as its quantizer chooses it for a llama: Q4_K everywhere, Q6_K for the output and for
attn_v and ffn_down of the layers use_more_bits picks. Norms F32, a 32000-token byte-level BPE
vocab. The weights are random, so only speed means anything here, not the text. Deterministic
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
                 n_ctx_train=2048, rope_freq_base=10000.0)
MODELS = Path(__file__).resolve().parent / "models"
DEFAULT_OUT = MODELS / "tinyllama-1.1b-random-q4_0.gguf"


def use_more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's quantizer: the layers whose attn_v and ffn_down get more bits in the _M mixes
    (the first and last eighth, and every third between)."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def mix_types(mix: str, n_layer: int) -> dict:
    """write_llama_gguf's type arguments for a mix"""
    if mix == "q4_0":
        return dict(weight_type="Q4_0", output_type="Q8_0")
    more = [il for il in range(n_layer) if use_more_bits(il, n_layer)]
    return dict(weight_type="Q4_K", output_type="Q6_K",
                tensor_types={f"blk.{il}.{name}.weight": "Q6_K" for il in more for name in ("attn_v", "ffn_down")})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mix", choices=["q4_0", "q4_k_m"], default="q4_0", help="weight types (default q4_0)")
    ap.add_argument("-o", "--output", type=Path, help="default: bench/models/tinyllama-1.1b-random-MIX.gguf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rewrite an existing file")
    args = ap.parse_args(argv)

    args.output = args.output or MODELS / f"tinyllama-1.1b-random-{args.mix}.gguf"
    if args.output.exists() and not args.force:
        print(f"{args.output} exists; --force to rewrite")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed, so an interrupted run never leaves a
    # truncated file that a later run would skip as done.
    partial = args.output.with_name(args.output.name + ".partial")
    start = time.perf_counter()
    write_llama_gguf(partial, seed=args.seed, extra_kv={"general.name": f"tinyllama-1.1b-random-{args.mix}"},
                     **TINYLLAMA, **mix_types(args.mix, TINYLLAMA["n_layer"]))
    partial.replace(args.output)
    size_mb = args.output.stat().st_size / 1e6
    print(f"wrote {args.output} ({size_mb:.0f} MB) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
