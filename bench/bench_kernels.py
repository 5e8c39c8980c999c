"""Micro-benchmark of the CPU matmul kernels at SmolLM2-135M's shapes, one thread.

For every kernel tier and shape it reports the time of one pi_kernel_matmul call (which also
quantizes the activation, as the forward pass does), the weight bytes streamed per second and
the effective GFLOP/s (2 * rows * n * nt / time):

- "hot": the same weight matrix every call, so it sits in L2/L3 once warm (compute bound);
- "cold": rotating over copies totalling more than 4x the L3 (32 MiB here), so the weights
  come from DRAM as in decode, where every layer's weights are read once per token.

    PI_LIBRARY=build-kernels/libpowerinfer.so PYTHONPATH=. python bench/bench_kernels.py
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

from pypowerinfer._ffi import check, ffi, lib

IMPLS = {"ref": 1, "avx2": 2, "avx512": 3}
# (type, n = inputs per row, rows): ffn_gate/ffn_up, ffn_down, the tied output matrix.
SHAPES = [("Q4_1", 576, 1536), ("Q4_1", 1536, 576), ("Q8_0", 576, 49152)]
COLD_BYTES = 128 << 20


def impl_available(impl: str) -> bool:
    out = np.zeros(1, np.float32)
    return lib.pi_kernel_dequant(QT.F32, IMPLS[impl], ffi.from_buffer(out), 1, ffi.from_buffer("float[]", out)) == 0


def encode(qtype: str, rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    data = rng.standard_normal((rows, n), dtype=np.float32) * 0.05
    return np.ascontiguousarray(quantize(data, QT[qtype])).view(np.uint8)


def time_calls(qtype: str, impl: str, weights: list[np.ndarray], rows: int, n: int, nt: int,
               min_seconds: float) -> float:
    """Median seconds per call, cycling over `weights`."""
    x = np.random.default_rng(0).standard_normal((nt, n), dtype=np.float32)
    y = np.empty((nt, rows), np.float32)
    xp, yp = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    wps = [ffi.from_buffer(w) for w in weights]
    check(lib.pi_kernel_matmul(QT[qtype], IMPLS[impl], wps[0], rows, n, xp, nt, yp))  # warm up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_seconds and len(times) < 10000):
        w = wps[len(times) % len(wps)]
        t0 = time.perf_counter()
        lib.pi_kernel_matmul(QT[qtype], IMPLS[impl], w, rows, n, xp, nt, yp)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", action="append", choices=list(IMPLS), help="tiers to run (default: all available)")
    parser.add_argument("--nt", type=int, action="append", help="token counts (default: 1, 8, 64)")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args()
    impls = [i for i in (args.impl or IMPLS) if impl_available(i)]
    nts = args.nt or [1, 8, 64]
    rng = np.random.default_rng(1)

    print(f"{'impl':7} {'type':5} {'n x rows':>11} {'nt':>3} {'hot ms':>9} {'hot GB/s':>9} "
          f"{'cold GB/s':>9} {'GFLOP/s':>8}")
    for qtype, n, rows in SHAPES:
        first = encode(qtype, rows, n, rng)
        copies = [first] + [first.copy() for _ in range(max(1, COLD_BYTES // first.nbytes))]
        for nt in nts:
            for impl in impls:
                # The scalar reference is slow at large batches: one short measurement is plenty.
                seconds = args.seconds if impl != "ref" else min(args.seconds, 0.2)
                hot = time_calls(qtype, impl, copies[:1], rows, n, nt, seconds)
                cold = time_calls(qtype, impl, copies[1:], rows, n, nt, seconds) if nt <= 8 else float("nan")
                print(f"{impl:7} {qtype:5} {f'{n}x{rows}':>11} {nt:>3} {hot * 1e3:9.3f} "
                      f"{first.nbytes / hot / 1e9:9.2f} {first.nbytes / cold / 1e9:9.2f} "
                      f"{2.0 * rows * n * nt / hot / 1e9:8.1f}", flush=True)


if __name__ == "__main__":
    main()
