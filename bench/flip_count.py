"""Where pypowerinfer's logits leave llama.cpp's on a synthetic test file: teacher-forced mean KL
(ours against llama.cpp one token at a time, and llama.cpp's own batched against one-token), and
how many tokens differ at all (KL above 1e-9) against how many llama.cpp's two paths disagree on.
A token that differs carries an 8-bit activation rounded the other way somewhere (a last-bit
difference in a sum's order lands a value across a rounding boundary).

    python bench/flip_count.py [--case qwen3-q4_0-output] [--layers 1] [--tokens 256]

Cases are tests/test_qwen3.py's.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import compare_logits  # noqa: E402
from synthetic import write_llama_gguf  # noqa: E402
from test_forward import real_text, teacher_forced  # noqa: E402
from test_qwen3 import CASES, DIMS  # noqa: E402


def token_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(p || q) per row of two logit arrays"""
    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=1)


def main() -> int:
    import llama_cpp

    from pypowerinfer import Llama

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, default="qwen3-q4_0-output")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = write_llama_gguf(Path(folder) / "m.gguf", **dict(DIMS, n_layer=args.layers), **CASES[args.case])
        opts = dict(n_ctx=512, logits_all=True, n_threads=2, verbose=False)
        runs = {}
        for name, n_batch in (("one-token", 1), ("batched", 512)):
            llm = llama_cpp.Llama(str(path), n_batch=n_batch, n_ubatch=n_batch, **opts)
            tokens = llm.tokenize(real_text().encode())[: args.tokens]
            runs[name] = teacher_forced(llm, tokens)
            llm.close()
        with Llama(str(path), **opts) as ours:
            runs["ours"] = teacher_forced(ours, tokens)
    ref = runs["one-token"]
    print(f"{args.case}, {args.layers} layer(s), {len(tokens)} tokens, teacher-forced against llama.cpp one-token")
    for name in ("batched", "ours"):
        kl = token_kl(ref, runs[name])
        label = "llama.cpp batched" if name == "batched" else "pypowerinfer"
        print(f"{label:18s} mean KL {compare_logits(ref, runs[name])['kl_mean']:.2e}, tokens that differ "
              f"{int((kl > 1e-9).sum())}, max |logit diff| elsewhere {np.abs(ref - runs[name])[kl <= 1e-9].max():.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
