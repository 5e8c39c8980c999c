"""One streaming client against the server, against `Llama` decoding alone, in one run.

    python bench/server_stream.py [MODEL] [-t THREADS] [-n 96] [--repeats 3]

Starts `python -m pypowerinfer.server` in its own process, streams greedy completions of n tokens
through the openai client and times the tokens after the first; then, with the server stopped,
the same number of tokens from a `Llama` eval/sample loop. Prints both and their ratio.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

PROMPT = "Once upon a time"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def best_stream_rate(base_url: str, n: int, repeats: int) -> float:
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=300)
    best = 0.0
    for _ in range(repeats):
        times = []
        for chunk in client.completions.create(model="m", prompt=PROMPT, max_tokens=n, temperature=0.0, stream=True,
                                               extra_body={"min_tokens": n}):
            if chunk.choices[0].text:
                times.append(time.perf_counter())
        best = max(best, (len(times) - 1) / (times[-1] - times[0]))
    return best


def best_loop_rate(model: str, threads: int, n: int, repeats: int) -> float:
    from pypowerinfer import Llama

    llm = Llama(model, n_ctx=512, n_threads=threads, verbose=False)
    prompt = llm.tokenize(PROMPT.encode())
    best = 0.0
    for _ in range(repeats):
        llm.reset()
        llm.eval(prompt)
        token = llm.sample(temp=0.0)
        start = time.perf_counter()
        for _ in range(n - 1):
            llm.eval([token])
            token = llm.sample(temp=0.0)
        best = max(best, (n - 1) / (time.perf_counter() - start))
    llm.close()
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("-n", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    from pypowerinfer import default_model_path

    model = args.model or str(default_model_path())
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "pypowerinfer.server", "--model", model, "--port", str(port),
                               "--n-ctx", "512", "--n-threads", str(args.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(base + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        streamed = best_stream_rate(base, args.n, args.repeats)
    finally:
        server.terminate()
        server.wait(timeout=30)
    alone = best_loop_rate(model, args.threads, args.n, args.repeats)
    print(f"model {os.path.basename(model)}, {args.threads} threads, {args.n} greedy tokens, best of {args.repeats}")
    print(f"one streaming client (openai), tokens after the first: {streamed:.1f} tok/s")
    print(f"Llama eval/sample loop alone:                          {alone:.1f} tok/s")
    print(f"ratio: {streamed / alone:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
