"""Micro-benchmark of the CPU matmul kernels at SmolLM2-135M's, the 1.1B model's and Gemma 3 270M's shapes, one thread.

First the machine's int8 dot-product peak (bench/int8_peak.c, compiled here with cc): the
throughput of independent chains of vpdpbusd (zmm, ymm) and of AVX2's vpmaddubsw + vpmaddwd
pair, one thread and every thread, in GOP/s (a MAC is 2 ops).

Then for every kernel tier and shape the time of one pi_kernel_matmul call (which also
quantizes the activation, as the forward pass does), for the row-major layout and for the
grouped one the loader gives the 32-weight block formats and Q4_K / Q5_K / Q6_K (pi_kernel_group_rows), the weight
bytes streamed per second, the effective GOP/s (2 * rows * n * nt / time) and its share of the
one-thread peak of the tier's instruction (vpdpbusd zmm for avx512, the AVX2 pair for avx2):

- "hot": the same weight matrix every call, so it sits in L2/L3 once warm (compute bound);
- "cold": rotating over copies totalling more than 4x the L3 (32 MiB here), so the weights
  come from DRAM as in decode, where every layer's weights are read once per token.

Then the sparse FFN's down projection, pi_kernel_axpy_rows over ffn_down_t (1536 neuron rows of
576 weights), with 10% and 30% of the rows active, scattered and ascending as the predictor
picks them. One call sums AXPY_TOKENS tokens' active sets, so the cost of a call from Python
stays small next to the work; GB/s counts the bytes of the rows read. "cold" gives every token
of every call its own copy of the matrix, so its rows come from DRAM.

    PI_LIBRARY=build-kernels/libpowerinfer.so PYTHONPATH=. python bench/bench_kernels.py
"""
from __future__ import annotations

import argparse
import os
import sys
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quant_shape_to_byte_shape, quantize

from pypowerinfer._ffi import check, ffi, lib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic import K_SCALE_OFFSETS, random_k_blocks  # noqa: E402  (gguf-py cannot quantize to K-quants)

IMPLS = {"ref": 1, "avx2": 2, "avx512": 3}
# (type, n = inputs per row, rows): ffn_gate/ffn_up, ffn_down, the tied output matrix.
# The 1.1B model's (TinyLlama's dims) ffn_up and ffn_down in Q4_0. Gemma 3 270M's K-quant weights
# (attn_output Q4_K, ffn_down Q4_K or Q6_K: its 640-wide rows are 32-weight formats), and the K-quants
# at the 1.1B's ffn_up.
SHAPES = [("Q4_1", 576, 1536), ("Q4_1", 1536, 576), ("Q8_0", 576, 49152), ("Q4_0", 2048, 5632), ("Q4_0", 5632, 2048),
          ("Q4_K", 1024, 640), ("Q4_K", 2048, 640), ("Q6_K", 2048, 640), ("Q4_K", 2048, 5632), ("Q6_K", 2048, 5632)]
GROUPED = {"Q4_0", "Q4_K", "Q5_K", "Q6_K"}
PEAK_OF = {"avx512": "vpdpbusd zmm", "avx2": "vpmaddubsw+vpmaddwd ymm"}
COLD_BYTES = 128 << 20
# (type, rows = n_ff, d = n_embd) of ffn_down_t, and the shares of active rows.
AXPY_SHAPES = [("Q4_1", 1536, 576), ("Q4_0", 1536, 576)]
AXPY_ACTIVE = [0.1, 0.3]
AXPY_TOKENS = 8


def impl_available(impl: str) -> bool:
    out = np.zeros(1, np.float32)
    return lib.pi_kernel_dequant(QT.F32, IMPLS[impl], ffi.from_buffer(out), 1, ffi.from_buffer("float[]", out)) == 0


def encode(qtype: str, rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if qtype in K_SCALE_OFFSETS:
        return random_k_blocks(qtype, tuple(quant_shape_to_byte_shape((rows, n), QT[qtype])), rng, 0.05)
    data = rng.standard_normal((rows, n), dtype=np.float32) * 0.05
    return np.ascontiguousarray(quantize(data, QT[qtype])).view(np.uint8)


def int8_peak(seconds: float) -> dict[str, tuple[float, float]]:
    """{instruction: (GOP/s on one thread, on every thread)}, or {} where it cannot be built"""
    src = Path(__file__).with_name("int8_peak.c")
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "int8_peak")
        flags = ["-O2", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx2"]
        if subprocess.run(["cc", *flags, str(src), "-lpthread", "-o", exe]).returncode != 0:
            return {}
        out = subprocess.run([exe, str(os.cpu_count()), str(seconds)], capture_output=True, text=True)
    if out.returncode != 0:
        return {}  # no AVX-512 VNNI here: the first kernel faults
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    return {name: (float(one), float(every)) for name, one, every in rows}


def group(qtype: str, w: np.ndarray, rows: int, n: int) -> np.ndarray:
    g = w.copy()
    check(lib.pi_kernel_group_rows(QT[qtype], ffi.from_buffer(g), rows, n))
    return g


def time_calls(qtype: str, impl: str, weights: list[np.ndarray], rows: int, n: int, nt: int,
               min_seconds: float, grouped: bool = False) -> float:
    """Median seconds per call, cycling over `weights` (grouped ones with `grouped`)."""
    matmul = lib.pi_kernel_matmul_grouped if grouped else lib.pi_kernel_matmul
    x = np.random.default_rng(0).standard_normal((nt, n), dtype=np.float32)
    y = np.empty((nt, rows), np.float32)
    xp, yp = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    wps = [ffi.from_buffer(w) for w in weights]
    check(matmul(QT[qtype], IMPLS[impl], wps[0], rows, n, xp, nt, yp))  # warm up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_seconds and len(times) < 10000):
        w = wps[len(times) % len(wps)]
        t0 = time.perf_counter()
        matmul(QT[qtype], IMPLS[impl], w, rows, n, xp, nt, yp)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench_matmul(impls: list[str], nts: list[int], seconds_each: float, rng: np.random.Generator,
                 peak: dict[str, tuple[float, float]], types: list[str] | None) -> None:
    print(f"{'impl':7} {'layout':7} {'type':5} {'n x rows':>11} {'nt':>3} {'hot ms':>9} {'hot GB/s':>9} "
          f"{'cold GB/s':>9} {'GOP/s':>8} {'of peak':>7}")
    for qtype, n, rows in SHAPES:
        if types and qtype not in types:
            continue
        first = encode(qtype, rows, n, rng)
        copies = [first] + [first.copy() for _ in range(max(1, COLD_BYTES // first.nbytes))]
        layouts = {"rows": copies}
        if qtype in GROUPED:
            layouts["grouped"] = [group(qtype, w, rows, n) for w in copies]
        for nt in nts:
            for impl in impls:
                for layout, ws in layouts.items():
                    # The scalar reference is slow at large batches: one short measurement is plenty.
                    seconds = seconds_each if impl != "ref" else min(seconds_each, 0.2)
                    if impl == "ref" and rows * n * nt > 1 << 26:
                        continue
                    grouped = layout == "grouped"
                    hot = time_calls(qtype, impl, ws[:1], rows, n, nt, seconds, grouped)
                    cold = time_calls(qtype, impl, ws[1:], rows, n, nt, seconds, grouped) if nt <= 8 else float("nan")
                    gops = 2.0 * rows * n * nt / hot / 1e9
                    share = f"{gops / peak[PEAK_OF[impl]][0]:7.0%}" if PEAK_OF.get(impl) in peak else f"{'-':>7}"
                    print(f"{impl:7} {layout:7} {qtype:5} {f'{n}x{rows}':>11} {nt:>3} {hot * 1e3:9.3f} "
                          f"{first.nbytes / hot / 1e9:9.2f} {first.nbytes / cold / 1e9:9.2f} {gops:8.1f} {share}",
                          flush=True)


def active_rows(rng: np.random.Generator, n_rows: int, k: int, first: int = 0) -> np.ndarray:
    """k distinct rows of n_rows, ascending as the predictor lists them, numbered from `first`."""
    return (np.sort(rng.choice(n_rows, k, replace=False)) + first).astype(np.int32)


def time_axpy(qtype: str, impl: str, w: np.ndarray, n_rows: int, d: int, row_lists: list[np.ndarray],
              min_seconds: float) -> float:
    """Median seconds per pi_kernel_axpy_rows call, cycling over `row_lists`."""
    a = np.random.default_rng(0).standard_normal(len(row_lists[0]), dtype=np.float32) + 2.0  # no zeros
    y = np.zeros(d, np.float32)
    wp, ap, yp = ffi.from_buffer(w), ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", y)
    rps = [ffi.from_buffer("int32_t[]", r) for r in row_lists]
    n = len(row_lists[0])
    check(lib.pi_kernel_axpy_rows(QT[qtype], IMPLS[impl], wp, n_rows, d, rps[0], ap, n, yp))  # warm up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_seconds and len(times) < 10000):
        rows = rps[len(times) % len(rps)]
        t0 = time.perf_counter()
        lib.pi_kernel_axpy_rows(QT[qtype], IMPLS[impl], wp, n_rows, d, rows, ap, n, yp)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench_axpy(impls: list[str], seconds: float, rng: np.random.Generator) -> None:
    print(f"\naxpy_rows: y += sum of the active rows of ffn_down_t, {AXPY_TOKENS} tokens a call")
    print(f"{'impl':7} {'type':5} {'rows x d':>9} {'active':>6} {'hot us':>8} {'hot GB/s':>9} {'cold GB/s':>9}")
    for qtype, n_rows, d in AXPY_SHAPES:
        one = encode(qtype, n_rows, d, rng)
        copies = max(2 * AXPY_TOKENS, COLD_BYTES // one.nbytes)
        w = np.concatenate([one] * copies)  # hot reads copy 0; cold reads a new copy per token
        for share in AXPY_ACTIVE:
            k = round(share * n_rows)
            hot_lists = [np.concatenate([active_rows(rng, n_rows, k) for _ in range(AXPY_TOKENS)])
                         for _ in range(4)]
            cold_lists = [np.concatenate([active_rows(rng, n_rows, k, ((c * AXPY_TOKENS + t) % copies) * n_rows)
                                          for t in range(AXPY_TOKENS)])
                          for c in range(copies // AXPY_TOKENS)]
            nbytes = AXPY_TOKENS * k * one.shape[1]
            for impl in impls:
                hot = time_axpy(qtype, impl, w, n_rows * copies, d, hot_lists, seconds)
                cold = time_axpy(qtype, impl, w, n_rows * copies, d, cold_lists, seconds)
                print(f"{impl:7} {qtype:5} {f'{n_rows}x{d}':>9} {share:6.0%} {hot * 1e6:8.1f} "
                      f"{nbytes / hot / 1e9:9.2f} {nbytes / cold / 1e9:9.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", action="append", choices=list(IMPLS), help="tiers to run (default: all available)")
    parser.add_argument("--nt", type=int, action="append", help="token counts (default: 1, 8, 64)")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    parser.add_argument("--only", choices=["matmul", "axpy"], help="run one part (default: both)")
    parser.add_argument("--type", action="append", help="the matmul shapes of these weight types only")
    args = parser.parse_args()
    impls = [i for i in (args.impl or IMPLS) if impl_available(i)]
    nts = args.nt or [1, 8, 64]
    rng = np.random.default_rng(1)

    if args.only != "axpy":
        peak = int8_peak(args.seconds)
        print(f"int8 dot peak, GOP/s: {'instruction':24} {'1 thread':>9} {f'{os.cpu_count()} threads':>10}")
        for name, (one, every) in peak.items():
            print(f"{'':22}{name:24} {one:9.1f} {every:10.1f}")
        bench_matmul(impls, nts, args.seconds, rng, peak, args.type)
    if args.only != "matmul":
        bench_axpy(impls, args.seconds, rng)


if __name__ == "__main__":
    main()
