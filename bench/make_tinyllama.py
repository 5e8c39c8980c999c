"""Write a random-weight GGUF of a known model's dimensions, for benchmarks.

    python bench/make_tinyllama.py [--shape tinyllama] [-o bench/models/<shape>-random.gguf] [--force]

Shapes: tinyllama, TinyLlama-1.1B's (Q4_0, output.weight Q8_0, where the real TinyLlama has
Q6_K); tinyllama-q4_k_m, the same in llama.cpp's Q4_K_M mix as its quantizer chooses it for a
llama (Q4_K everywhere, Q6_K for the output and for attn_v and ffn_down of the layers
use_more_bits picks); qwen3-0.6b, Qwen3-0.6B's (head_dim 128 > n_embd / n_head, tied output,
Q8_0); qwen3moe-1b, a ~1B Qwen 3 MoE (24 layers, 8 experts of 1536 neurons, top-2, Q8_0, the
router F32); smallthinker-1b, a SmallThinker of ~1.9B weights, ~0.3B active (24 layers, n_embd 1024,
16/4 heads, 32 ReGLU experts of 768 neurons, top-4, Q8_0, the router F32, softmax gating, a
sliding window, so every fourth layer is NoPE). Norms are F32, and the vocab a 32000-token byte-level BPE one. The weights are
random, so only speed means anything here, not the text. Deterministic for a given --seed; an
existing file is kept unless --force.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic import write_llama_gguf  # noqa: E402  (shared with the test models)


def use_more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's quantizer: the layers whose attn_v and ffn_down get more bits in the _M mixes
    (the first and last eighth, and every third between)."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def q4_k_m(n_layer: int) -> dict:
    """write_llama_gguf's type arguments for llama.cpp's Q4_K_M mix"""
    more = [il for il in range(n_layer) if use_more_bits(il, n_layer)]
    return dict(weight_type="Q4_K", output_type="Q6_K",
                tensor_types={f"blk.{il}.{name}.weight": "Q6_K" for il in more for name in ("attn_v", "ffn_down")})


TINYLLAMA = dict(n_vocab=32000, n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632, n_ctx_train=2048,
                 rope_freq_base=10000.0)
QWEN3 = dict(n_vocab=32000, n_embd=1024, n_head=16, n_head_kv=8, head_dim=128, n_ctx_train=4096,
             rope_freq_base=1000000.0, weight_type="Q8_0")
SHAPES = {
    "tinyllama": dict(TINYLLAMA, weight_type="Q4_0", output_type="Q8_0"),
    "tinyllama-q4_k_m": dict(TINYLLAMA, **q4_k_m(TINYLLAMA["n_layer"])),
    "qwen3-0.6b": dict(QWEN3, arch="qwen3", n_layer=28, n_ff=3072),
    "qwen3moe-1b": dict(QWEN3, arch="qwen3moe", n_layer=24, n_ff=3072, n_expert=8, n_expert_used=2, n_ff_exp=1536),
    "smallthinker-1b": dict(n_vocab=32000, n_embd=1024, n_layer=24, n_head=16, n_head_kv=4, n_ff=768, n_ctx_train=4096,
                            rope_freq_base=1500000.0, weight_type="Q8_0", arch="smallthinker", n_expert=32,
                            n_expert_used=4, n_ff_exp=768, extra_kv={"smallthinker.attention.sliding_window": 4096}),
}
FILE_NAMES = {"tinyllama": "tinyllama-1.1b-random-q4_0.gguf", "tinyllama-q4_k_m": "tinyllama-1.1b-random-q4_k_m.gguf",
              "qwen3-0.6b": "qwen3-0.6b-random-q8_0.gguf", "qwen3moe-1b": "qwen3moe-1b-random-q8_0.gguf",
              "smallthinker-1b": "smallthinker-1b-random-q8_0.gguf"}
MODELS = Path(__file__).resolve().parent / "models"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=SHAPES, default="tinyllama")
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rewrite an existing file")
    args = ap.parse_args(argv)
    args.output = args.output or MODELS / FILE_NAMES[args.shape]

    if args.output.exists() and not args.force:
        print(f"{args.output} exists; --force to rewrite")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed, so an interrupted run never leaves a
    # truncated file that a later run would skip as done.
    partial = args.output.with_name(args.output.name + ".partial")
    start = time.perf_counter()
    shape = dict(SHAPES[args.shape])
    extra_kv = {**shape.pop("extra_kv", {}), "general.name": f"{args.shape}-random"}
    write_llama_gguf(partial, seed=args.seed, extra_kv=extra_kv, **shape)
    partial.replace(args.output)
    size_mb = args.output.stat().st_size / 1e6
    print(f"wrote {args.output} ({size_mb:.0f} MB) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
