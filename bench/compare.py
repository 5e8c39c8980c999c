"""Side by side: llama-cpp-python and pypowerinfer on the same GGUF, same threads, one run.

    python bench/compare.py [MODEL] [-t THREADS] [--decode 128] [--prefill 512] [--repeats 3]
                            [--lora ADAPTER | --lora-rank R] [--lora-scale S]

Prints decode tok/s (one token at a time after a short prompt), prefill tok/s (one batch of
--prefill tokens), the ratio ours/theirs, the bytes each decoded token must read, and the
share of the memory-bandwidth roofline each engine reaches. Without MODEL it uses the default
SmolLM2-135M-Instruct; `--synthetic SHAPE` builds (bench/make_tinyllama.py) and uses a random-weight
model of that shape: tinyllama (1.1B Q4_0, also `--tinyllama`), tinyllama-q4_k_m, qwen3-0.6b, qwen3moe-1b,
smallthinker-1b. With --lora both engines apply the adapter; --lora-rank writes a random F16 one of
that rank for the model's attention and FFN (tests/synthetic_lora.py) and uses it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_tinyllama import FILE_NAMES  # noqa: E402  (the synthetic shapes)


def weight_bytes_per_token(path: str) -> int:
    """Bytes of every matrix a decoded token reads: all 2-D weights, the output matrix once, and
    of an MoE's 3-D expert tensors the routed experts' share."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    names = {t.name for t in reader.tensors}
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    used, experts = (int(reader.fields[f"{arch}.expert_{k}"].parts[-1][0]) if f"{arch}.expert_{k}" in reader.fields
                     else 1 for k in ("used_count", "count"))
    total = 0
    for t in reader.tensors:
        if len(t.shape) < 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue  # only one row is read for the lookup
        total += int(t.n_bytes) * used // experts if len(t.shape) == 3 else int(t.n_bytes)
    return total


def read_bandwidth(threads: int, size_mb: int = 512) -> float:
    """GB/s of streaming reads with `threads` numpy threads (numpy releases the GIL in sum)."""
    data = np.ones(size_mb * (1 << 20) // 8, dtype=np.float64)
    parts = np.array_split(data, threads)
    best = 0.0
    for _ in range(3):
        workers = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, data.nbytes / (time.perf_counter() - start) / 1e9)
    return best


def measure(llm, prompt_tokens: list[int], n_decode: int, n_prefill: int, repeats: int) -> dict:
    """Best-of-`repeats` prefill and decode speeds of an object with llama-cpp-python's eval()."""
    long_prompt = (prompt_tokens * (n_prefill // len(prompt_tokens) + 1))[:n_prefill]
    prefill, decode = 0.0, 0.0
    for _ in range(repeats):
        llm.reset()
        start = time.perf_counter()
        llm.eval(long_prompt)
        prefill = max(prefill, n_prefill / (time.perf_counter() - start))
        llm.reset()
        llm.eval(prompt_tokens)
        start = time.perf_counter()
        for i in range(n_decode):
            llm.eval([prompt_tokens[i % len(prompt_tokens)]])
        decode = max(decode, n_decode / (time.perf_counter() - start))
    return {"prefill": prefill, "decode": decode}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("--tinyllama", action="store_const", const="tinyllama", dest="synthetic",
                   help="--synthetic tinyllama")
    p.add_argument("--synthetic", choices=list(FILE_NAMES),
                   help="use the random-weight model of this shape (built if missing)")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lora", help="a LoRA adapter GGUF for MODEL")
    p.add_argument("--lora-rank", type=int, help="write a random F16 adapter of this rank and use it")
    p.add_argument("--lora-scale", type=float, default=1.0)
    args = p.parse_args(argv)

    import llama_cpp

    from pypowerinfer import Llama, default_model_path

    if args.synthetic:
        model = str(HERE / "models" / FILE_NAMES[args.synthetic])
        subprocess.run([sys.executable, str(HERE / "make_tinyllama.py"), "--shape", args.synthetic, "-o", model],
                       check=True)
    else:
        model = args.model or str(default_model_path())
    n_ctx = args.prefill + args.decode + 64
    common = dict(n_ctx=n_ctx, n_batch=args.prefill, n_threads=args.threads, n_threads_batch=args.threads,
                  verbose=False)
    if args.lora_rank:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from synthetic_lora import write_lora_gguf

        args.lora = write_lora_gguf(HERE / "models" / f"lora-r{args.lora_rank}.gguf", model, rank=args.lora_rank,
                                    alpha=2.0 * args.lora_rank, type_name="F16")
    if args.lora:
        common.update(lora_path=args.lora, lora_scale=args.lora_scale)
    engines = {"llama-cpp-python": llama_cpp.Llama(model, **common), "pypowerinfer": Llama(model, **common)}
    prompt = engines["pypowerinfer"].tokenize(b"The history of the printing press begins with", add_bos=True)
    results = {name: measure(llm, prompt, args.decode, args.prefill, args.repeats) for name, llm in engines.items()}

    bytes_per_token = weight_bytes_per_token(model)
    bandwidth = read_bandwidth(args.threads)
    roofline = bandwidth * 1e9 / bytes_per_token
    ours, theirs = results["pypowerinfer"], results["llama-cpp-python"]
    print(f"model {os.path.basename(model)}, {args.threads} threads, kernels {engines['pypowerinfer']._ctx.kernels}"
          + (f", LoRA adapter {os.path.basename(args.lora)} scale {args.lora_scale}" if args.lora else ""))
    print(f"bytes read per decoded token: {bytes_per_token / 1e6:.1f} MB; read bandwidth {bandwidth:.1f} GB/s "
          f"(numpy, {args.threads} threads) -> decode roofline {roofline:.0f} tok/s")
    print(f"{'engine':<18}{'decode tok/s':>14}{'prefill tok/s':>15}{'roofline':>10}")
    for name, r in results.items():
        print(f"{name:<18}{r['decode']:>14.1f}{r['prefill']:>15.1f}{r['decode'] / roofline:>10.0%}")
    print(f"{'ratio ours/theirs':<18}{ours['decode'] / theirs['decode']:>13.2f}x"
          f"{ours['prefill'] / theirs['prefill']:>14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
