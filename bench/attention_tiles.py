"""The attention tile ops against each query alone (pi_kernel_attention_f16), one thread.

    python bench/attention_tiles.py [--queries 30] [--keys 2048] [--hd 64] [--stride N] [--repeats 50]

One work item of a SmolLM2 prefill by default: 10 tokens times a KV head's 3 heads against 2048
f16 keys and values, rows 3 heads apart as in the cache (--stride sets the values between rows, as
a cache's rows of all KV heads are), each query its own causal range. Prints
the best time of the scores alone and of scores and mix, per tier, as GMAC/s (q.k and p v).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from pypowerinfer._ffi import ffi, lib

TIERS = {"ref": 1, "avx2": 2, "avx512": 3}


def best_time(impl: int, tiled: int, q, k, v, w, lo, hi, repeats: int) -> float | None:
    nq, hd = q.shape
    n, stride = k.shape
    scores, out = np.zeros((nq, n), np.float32), np.zeros((nq, hd), np.float32)
    args = (impl, tiled, ffi.from_buffer("float[]", q), nq, ffi.from_buffer("uint16_t[]", k),
            ffi.from_buffer("uint16_t[]", v), stride, n, hd, 1.0 / np.sqrt(hd), ffi.from_buffer("float[]", scores),
            ffi.from_buffer("float[]", w), ffi.from_buffer("int32_t[]", lo), ffi.from_buffer("int32_t[]", hi),
            ffi.from_buffer("float[]", out))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        if lib.pi_kernel_attention_f16(*args) != lib.PI_OK:
            return None  # the tier is not available on this CPU
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--keys", type=int, default=2048)
    p.add_argument("--hd", type=int, default=64)
    p.add_argument("--group", type=int, default=3, help="heads a token's queries share their keys with")
    p.add_argument("--stride", type=int, help="values between key (and value) rows; group * hd by default")
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    nq, n, hd = args.queries, args.keys, args.hd
    stride = args.stride or args.group * hd
    if stride < hd:
        p.error("--stride must be at least --hd")
    q = rng.standard_normal((nq, hd)).astype(np.float32)
    k = rng.standard_normal((n, stride)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((n, stride)).astype(np.float16).view(np.uint16)
    w = rng.random((nq, n)).astype(np.float32)
    lo = np.zeros(nq, np.int32)
    hi = np.array([n - 1 - (nq - 1 - r) // args.group for r in range(nq)], np.int32)  # the block's last tokens
    macs = nq * n * hd
    print(f"{nq} queries x {n} keys, head_dim {hd}, rows {stride} values apart: GMAC/s, one thread (best of {args.repeats})")
    print(f"{'tier':<8}{'way':<8}{'scores':>10}{'scores+mix':>12}")
    for name, impl in TIERS.items():
        for tiled in (0, 1):
            repeats = min(args.repeats, 3) if name == "ref" else args.repeats  # the reference is slow
            alone = best_time(impl, tiled, q, k, v, w, lo, lo, repeats)  # mix over one row: scores alone
            both = best_time(impl, tiled, q, k, v, w, lo, hi, repeats)
            if alone is None or both is None:
                continue
            print(f"{name:<8}{'tiled' if tiled else 'alone':<8}{macs / alone / 1e9:>10.1f}{2 * macs / both / 1e9:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
