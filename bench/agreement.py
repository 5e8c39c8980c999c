"""How closely pypowerinfer's logits follow llama.cpp's, next to how closely llama.cpp follows
itself: teacher-forced top-1 agreement and mean KL over the same tokens, for

- llama.cpp batched (n_batch 512) against llama.cpp one token at a time (n_batch 1): the noise
  floor of the oracle itself, which evaluates the same text through different kernels;
- pypowerinfer against llama.cpp, batched and one token at a time;
- pypowerinfer batched against itself one token at a time;
- pypowerinfer with the file's row-major weights (repack=False) against llama.cpp, one token at a
  time: what the grouped layout the loader gives the 32-weight block formats changes;
- with --n-gpu-layers N, pypowerinfer with N layers on the CUDA device (on a machine without a
  GPU, the CPU emulator's build: PI_LIBRARY=build-emu/libpowerinfer.so) against llama.cpp.

    python bench/agreement.py MODEL.gguf [--tokens 256] [-t 2] [--n-gpu-layers N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import compare_logits  # noqa: E402
from test_forward import real_text, teacher_forced  # noqa: E402


def main() -> None:
    import llama_cpp

    from pypowerinfer import Llama
    from pypowerinfer.model import cuda_device_count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--n-gpu-layers", type=int, default=0, help="also pypowerinfer with layer offload")
    args = parser.parse_args()
    if args.n_gpu_layers and cuda_device_count() == 0:
        parser.error("--n-gpu-layers: no CUDA device (nor the emulator's build) in this library")

    def logits(engine, n_batch: int, tokens=None, **kw):
        llm = engine(args.model, n_ctx=max(512, args.tokens), n_batch=n_batch, logits_all=True,
                     n_threads=args.threads, verbose=False, **kw)
        try:
            if tokens is None:
                tokens = llm.tokenize(real_text().encode())[: args.tokens]
            return tokens, teacher_forced(llm, tokens)
        finally:
            llm.close()

    tokens, ref_batched = logits(llama_cpp.Llama, 512)
    _, ref_single = logits(llama_cpp.Llama, 1, tokens)
    _, ours_batched = logits(Llama, 512, tokens)
    _, ours_single = logits(Llama, 1, tokens)
    _, rows_single = logits(Llama, 1, tokens, repack=False)
    rows = [
        ("llama.cpp batched vs llama.cpp one-token", ref_batched, ref_single),
        ("pypowerinfer vs llama.cpp, batched", ref_batched, ours_batched),
        ("pypowerinfer vs llama.cpp, one-token", ref_single, ours_single),
        ("pypowerinfer batched vs pypowerinfer one-token", ours_batched, ours_single),
        ("pypowerinfer row-major vs llama.cpp, one-token", ref_single, rows_single),
    ]
    if args.n_gpu_layers:
        _, offload = logits(Llama, 512, tokens, n_gpu_layers=args.n_gpu_layers)
        rows.append((f"pypowerinfer -ngl {args.n_gpu_layers} vs llama.cpp, batched", ref_batched, offload))
    print(f"{Path(args.model).name}: {len(tokens)} tokens of real text, teacher-forced")
    print(f"{'pair':50} {'top-1':>7} {'mean KL':>9} {'max KL':>8}")
    for label, a, b in rows:
        s = compare_logits(a, b)
        print(f"{label:50} {s['top1']:7.2%} {s['kl_mean']:9.5f} {s['kl_max']:8.4f}")


if __name__ == "__main__":
    main()
