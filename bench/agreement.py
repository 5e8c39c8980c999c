"""How closely pypowerinfer's logits follow llama.cpp's, next to how closely llama.cpp follows
itself: teacher-forced top-1 agreement and mean KL over the same tokens, for

- llama.cpp batched (n_batch 512) against llama.cpp one token at a time (n_batch 1): the noise
  floor of the oracle itself, which evaluates the same text through different kernels;
- pypowerinfer against llama.cpp, batched and one token at a time;
- pypowerinfer batched against itself one token at a time.

    python bench/agreement.py MODEL.gguf [--tokens 256] [-t 2]
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

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("-t", "--threads", type=int, default=2)
    args = parser.parse_args()

    def logits(engine, n_batch: int, tokens=None):
        llm = engine(args.model, n_ctx=max(512, args.tokens), n_batch=n_batch, logits_all=True,
                     n_threads=args.threads, verbose=False)
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
    rows = [
        ("llama.cpp batched vs llama.cpp one-token", ref_batched, ref_single),
        ("pypowerinfer vs llama.cpp, batched", ref_batched, ours_batched),
        ("pypowerinfer vs llama.cpp, one-token", ref_single, ours_single),
        ("pypowerinfer batched vs pypowerinfer one-token", ours_batched, ours_single),
    ]
    print(f"{Path(args.model).name}: {len(tokens)} tokens of real text, teacher-forced")
    print(f"{'pair':50} {'top-1':>7} {'mean KL':>9} {'max KL':>8}")
    for label, a, b in rows:
        s = compare_logits(a, b)
        print(f"{label:50} {s['top1']:7.2%} {s['kl_mean']:9.5f} {s['kl_max']:8.4f}")


if __name__ == "__main__":
    main()
