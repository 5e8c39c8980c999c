"""Where a batch's time goes, without the server: native steps of B sequences, then the BatchEngine.

    python bench/batch_decode.py [MODEL] [-t THREADS] [--batch 1,2,4,8,16] [-n 48] [--repeats 3]

1. Native: one `decode_batch` step of B sequences, one token each (after a 16-token prompt per
   sequence), timed over -n steps; prints ms per step, tokens/s and the step's cost relative to a
   one-token step. The weights are read once per step, so the ceiling for B tokens is B x the
   one-token rate until the matrix-matrix kernels become compute-bound.
2. The engine: B greedy completions of -n tokens submitted at once to a BatchEngine (threads,
   no HTTP), aggregate generated tok/s against `Llama` generating one alone in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

PROMPTS = ["The capital of France is", "def fibonacci(n):\n", "Once upon a time, in a land far",
           "The three primary colours are", "Water boils at", "List the planets of the solar system:",
           "import numpy as np\n", "A haiku about autumn:\n"]


def native_steps(model_path: str, threads: int, sizes: list[int], n: int, repeats: int) -> dict[int, float]:
    """Best seconds per step of B one-token sequences, for each B."""
    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(model_path)
    rng = np.random.default_rng(0)
    out = {}
    for b in sizes:
        ctx = NativeContext(model, n_ctx=b * (16 + n + 1), n_batch=max(16 * b, b), n_threads=threads,
                            n_threads_batch=threads, logits_all=False, n_logits=b, n_seq_max=b)
        seq = np.repeat(np.arange(b, dtype=np.int32), 16)
        pos = np.tile(np.arange(16, dtype=np.int32), b)
        flags = np.zeros(16 * b, np.int8)
        best = float("inf")
        for _ in range(repeats):
            ctx.seq_clear()
            ctx.decode_batch(rng.integers(1, 1000, 16 * b).astype(np.int32), pos, seq, flags)
            tok = np.ones(b, np.int32)
            ones = np.ones(b, np.int8)
            seqs = np.arange(b, dtype=np.int32)
            start = time.perf_counter()
            for i in range(n):
                ctx.decode_batch(tok, np.full(b, 16 + i, np.int32), seqs, ones)
            best = min(best, (time.perf_counter() - start) / n)
        out[b] = best
        ctx.close()
    return out


def engine_rate(llm, b: int, n: int, repeats: int) -> float:
    """Best aggregate generated tok/s of b concurrent greedy completions on a BatchEngine."""
    from pypowerinfer.batching import BatchEngine

    best = 0.0
    with BatchEngine(llm, n_parallel=b, n_ctx=b * 256) as engine:
        for _ in range(repeats):
            counts = [0] * b

            def run(i):
                # EOS banned: every completion is n tokens long
                out = engine.create_completion(PROMPTS[i % len(PROMPTS)], max_tokens=n, temperature=0,
                                               logit_bias={llm.token_eos(): -1e9})
                counts[i] = out["usage"]["completion_tokens"]

            threads = [threading.Thread(target=run, args=(i,)) for i in range(b)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            best = max(best, sum(counts) / (time.perf_counter() - start))
    return best


def solo_rate(llm, n: int, repeats: int) -> float:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        out = llm.create_completion(PROMPTS[0], max_tokens=n, temperature=0, logit_bias={llm.token_eos(): -1e9})
        best = max(best, out["usage"]["completion_tokens"] / (time.perf_counter() - start))
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("--batch", default="1,2,4,8,16")
    p.add_argument("-n", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-engine", action="store_true", help="only the native steps")
    args = p.parse_args(argv)
    from pypowerinfer import Llama, default_model_path

    model = args.model or str(default_model_path())
    sizes = [int(x) for x in args.batch.split(",")]
    print(f"model {os.path.basename(model)}, {args.threads} threads, {args.n} steps, best of {args.repeats}")
    steps = native_steps(model, args.threads, sizes, args.n, args.repeats)
    one = steps.get(1)
    print("native decode_batch: B sequences, one token each per step")
    print(f"{'B':>4} {'ms/step':>9} {'tok/s':>8} {'step vs 1-token step':>22}")
    for b, sec in steps.items():
        rel = f"{sec / one:.2f}x" if one else "-"
        print(f"{b:>4} {sec * 1e3:>9.2f} {b / sec:>8.1f} {rel:>22}")
    if args.no_engine:
        return 0
    with Llama(model, n_ctx=512, n_threads=args.threads, verbose=False) as llm:
        alone = solo_rate(llm, args.n, args.repeats)
        print(f"\nLlama alone, one greedy completion: {alone:.1f} tok/s (prompt included in the time)")
        for b in sizes:
            rate = engine_rate(llm, b, args.n, args.repeats)
            print(f"BatchEngine, {b:>2} concurrent completions: {rate:7.1f} tok/s aggregate ({rate / alone:.2f}x alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
