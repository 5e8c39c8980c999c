"""Where a decoded token's time goes on a CUDA device: wall time per token against the device's
kernel and copy time, per kernel, for layer offload and for the hot/cold split.

    python bench/gpu_profile.py MODEL.gguf [--n-gpu-layers -1] [--budget 100] [--decode 16] [-t THREADS]

Each setting decodes --decode one-token steps after a short prompt, first untimed, then under
PyTorch's profiler (CUPTI: it sees every kernel and copy of the process, ours included). Needs
a CUDA build of the library and torch; the device machine's image has both.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

PROMPT = 32


def decode_steps(ctx, tokens: np.ndarray, first: int) -> float:
    t0 = time.perf_counter()
    for i in range(first, len(tokens)):
        ctx.decode(tokens[i:i + 1], i)
    return time.perf_counter() - t0


def profile_setting(name: str, path: str, n_decode: int, threads: int, **context) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(path)
    tokens = np.random.default_rng(0).integers(1, 1000, PROMPT + 2 * n_decode).astype(np.int32)
    ctx = NativeContext(model, n_ctx=len(tokens), n_batch=PROMPT, n_threads=threads, n_threads_batch=threads,
                        logits_all=False, **context)
    try:
        ctx.decode(tokens[:PROMPT], 0)
        decode_steps(ctx, tokens[:PROMPT + n_decode], PROMPT)  # warm-up, and the untimed rate
        ctx.reset_stats()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            wall = decode_steps(ctx, tokens, PROMPT + n_decode)
        torch.cuda.synchronize()
        traffic = ctx.device_traffic()
    finally:
        ctx.close()
        model.close()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    events.sort(key=lambda e: -e.device_time_total)
    busy = sum(e.device_time_total for e in events)
    per_token = 1e6 * wall / n_decode
    lines = [f"## {name}", "",
             f"{n_decode / wall:.1f} tok/s: {per_token:.0f} us a token, of which the device is busy "
             f"{busy / n_decode:.0f} us ({100 * busy / n_decode / per_token:.0f}%); "
             f"copies {traffic['copies'] / n_decode:.0f} and waits {traffic['syncs'] / n_decode:.0f} a token", "",
             "| kernel or copy | a token | us each | us a token | share of busy |", "|---|---|---|---|---|"]
    for e in events[:14]:
        lines.append(f"| {e.key[:70]} | {e.count / n_decode:.1f} | {e.device_time_total / e.count:.1f} | "
                     f"{e.device_time_total / n_decode:.1f} | {100 * e.device_time_total / busy:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--n-gpu-layers", type=int, default=-1, help="layer offload's setting (0: skip it)")
    ap.add_argument("--budget", type=float, default=100.0,
                    help="the split's device budget, percent of what a token reads (0: skip it; needs a converted file)")
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--markdown", type=Path, help="also write the tables here")
    args = ap.parse_args(argv)

    from pypowerinfer.model import Device, NativeModel, Sparse

    parts = []
    if args.n_gpu_layers:
        parts.append(profile_setting(f"layer offload, n_gpu_layers={args.n_gpu_layers}", args.model, args.decode,
                                     args.threads, sparse=Sparse.OFF, n_gpu_layers=args.n_gpu_layers))
    if args.budget:
        model = NativeModel(args.model)
        budget = model.plan(int(args.budget / 100 * model.device_bytes())).budget
        model.close()
        parts.append(profile_setting(f"hot/cold split, {args.budget:g}% budget", args.model, args.decode,
                                     args.threads, sparse=Sparse.DECODE, device=Device.CUDA, vram_budget=budget))
    text = "\n\n".join(parts)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
