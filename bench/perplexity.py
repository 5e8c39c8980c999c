"""Held-out perplexity and decode speed of a converted model, dense and sparse.

    python bench/perplexity.py MODEL.powerinfer.gguf [--chunks 16] [--shifts -1,0,1,2] [--decode 64]
                               [-t THREADS] [--json OUT]

Text: the held-out split of pydoc_data.topics (convert/corpus.py), never the calibration text
the converter profiled. Perplexity: --chunks chunks of 256 tokens, each decoded from position 0,
every next-token prediction in the chunk scored. Rows: one per setting,
  dense            sparse=0
  sparse shift=S   sparse=2 (every token through the predictors), thresholds + S (> 0 sparser)
with the share of FFN rows the runtime computed (its stats), and decode tokens/s: one-token
steps after a 64-token prompt (sparse=1 for the sparse rows: the prompt runs dense, the steps
through the predictors), with their own FFN-row share.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after site-packages: an installed pypowerinfer wins

from convert import corpus  # noqa: E402
from convert.profile import perplexity  # noqa: E402

PROMPT = 64


def heldout_chunks(path: str, n_chunks: int, n_ctx: int = 256) -> list[np.ndarray]:
    from pypowerinfer.model import NativeModel
    from pypowerinfer.tokenizer import Tokenizer

    model = NativeModel(path, vocab_only=True)
    tok = Tokenizer(model.metadata())
    model.close()
    bos = tok.bos_id if tok.add_bos and tok.bos_id >= 0 else None
    ids = corpus.token_stream(lambda b: tok.encode(b, add_bos=False, special=False), corpus.heldout_entries(),
                              n_chunks * n_ctx)
    return corpus.chunk(ids, n_ctx, bos)[:n_chunks]


def decode_speed(path: str, tokens: np.ndarray, *, sparse: int, shift: float = 0.0, threads: int,
                 **context) -> dict:
    """Tokens/s of one-token steps after a PROMPT-token prompt, teacher-forced on `tokens`;
    `context`: more NativeContext options (device, vram_budget)."""
    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(path)
    ctx = NativeContext(model, n_ctx=len(tokens), n_batch=PROMPT, n_threads=threads, n_threads_batch=threads,
                        logits_all=False, sparse=sparse, sparse_threshold_shift=shift, **context)
    try:
        ctx.decode(tokens[:PROMPT], 0)
        ctx.reset_stats()
        t0 = time.perf_counter()
        for i in range(PROMPT, len(tokens)):
            ctx.decode(tokens[i:i + 1], i)
        seconds = time.perf_counter() - t0
        stats = ctx.sparse_stats()
    finally:
        ctx.close()
        model.close()
    n = len(tokens) - PROMPT
    return {"decode_tok_s": n / seconds, "decode_rows_share": stats["ffn_rows_done"] / max(stats["ffn_rows_dense"], 1),
            "bytes_per_token": stats["bytes_per_token"], "bytes_per_token_dense": stats["bytes_per_token_dense"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a converted GGUF (convert/add_profile.py); a plain GGUF gives the dense row only")
    ap.add_argument("--chunks", type=int, default=16, help="held-out chunks of 256 tokens (default 16)")
    ap.add_argument("--shifts", default="-1,-0.5,0,0.5,1,2", help="threshold shifts of the sparse rows")
    ap.add_argument("--decode", type=int, default=64, help="one-token steps for the speed column (default 64)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)

    chunks = heldout_chunks(args.model, args.chunks)
    speed_tokens = np.concatenate(chunks)[:PROMPT + args.decode]
    settings = [("dense", 0, 0.0)] + [(f"sparse shift={float(s):+g}", 2, float(s)) for s in args.shifts.split(",") if s]
    rows = []
    dense_ppl = None
    print(f"{Path(args.model).name}: held-out pydoc_data.topics, {len(chunks)} x {len(chunks[0])} tokens, "
          f"{args.threads} threads")
    print(f"{'setting':<20} {'ppl':>8} {'vs dense':>8} {'FFN rows':>8} {'decode tok/s':>12} {'decode rows':>11}")
    for name, sparse, shift in settings:
        res = perplexity(args.model, chunks, sparse=sparse, shift=shift, n_threads=args.threads)
        res.update(decode_speed(args.model, speed_tokens, sparse=0 if sparse == 0 else 1, shift=shift,
                                threads=args.threads))
        res["setting"] = name
        if dense_ppl is None:
            dense_ppl = res["ppl"]
        res["ppl_increase_pct"] = 100 * (res["ppl"] / dense_ppl - 1)
        rows.append(res)
        print(f"{name:<20} {res['ppl']:>8.3f} {res['ppl_increase_pct']:>+7.1f}% {100 * res['ffn_rows_share']:>7.1f}% "
              f"{res['decode_tok_s']:>12.1f} {100 * res['decode_rows_share']:>10.1f}%", flush=True)
        if sparse and res["ffn_rows_share"] >= 1.0 and name.endswith("+0"):
            print("  (every FFN row computed: this runtime or file has no sparse path; the sparse rows equal dense)",
                  file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "chunks": len(chunks), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
