"""Prompt-lookup speculative decoding against plain greedy decoding, in both engines, one run.

    python bench/speculative.py [MODEL] [-t THREADS] [-n 160] [--drafts 2,3,4,10] [--repeats 3]

The task is input-grounded (the model is asked to repeat a given text), where prompt lookup's
guesses come true. Prints generated tok/s for plain greedy and for each draft length, whether
the text is identical to plain greedy, and the speed-up; llama-cpp-python (whose draft_model
turns logits_all on) runs the same prompts.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from pydoc_data.topics import topics

PROMPT = ("<|im_start|>user\nRepeat this text exactly:\n" + topics["assert"][:1200] +
          "<|im_end|>\n<|im_start|>assistant\n")


def run(engine, model: str, threads: int, n: int, repeats: int, draft=None) -> tuple[list[int], float]:
    """The greedy tokens and the best generated tok/s over `repeats` (the prompt excluded)."""
    kw = {"draft_model": draft} if draft is not None else {}
    llm = engine(model, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False, **kw)
    prompt = llm.tokenize(PROMPT.encode(), special=True)
    best, out = 0.0, []
    for _ in range(repeats):
        llm.reset()
        llm.eval(prompt)  # generate() then re-evaluates only the last prompt token
        out = []
        start = time.perf_counter()
        for token in llm.generate(prompt, temp=0.0):
            out.append(token)
            if len(out) == n:
                break
        best = max(best, n / (time.perf_counter() - start))
    llm.close()
    return out, best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("-n", type=int, default=160)
    p.add_argument("--drafts", default="2,3,4,10")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding as TheirLookup

    from pypowerinfer import Llama, default_model_path
    from pypowerinfer.llama_speculative import LlamaPromptLookupDecoding

    model = args.model or str(default_model_path())
    print(f"model {os.path.basename(model)}, {args.threads} threads, {args.n} greedy tokens")
    print(f"{'engine':<18}{'draft':>6}{'tok/s':>9}{'vs plain':>10}  text")
    for name, engine, lookup in (("pypowerinfer", Llama, LlamaPromptLookupDecoding),
                                 ("llama-cpp-python", llama_cpp.Llama, TheirLookup)):
        plain, plain_speed = run(engine, model, args.threads, args.n, args.repeats)
        print(f"{name:<18}{'-':>6}{plain_speed:>9.1f}{1.0:>9.2f}x")
        for k in (int(x) for x in args.drafts.split(",")):
            out, speed = run(engine, model, args.threads, args.n, args.repeats, lookup(num_pred_tokens=k))
            same = "identical" if out == plain else "DIFFERENT"
            print(f"{name:<18}{k:>6}{speed:>9.1f}{speed / plain_speed:>9.2f}x  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
