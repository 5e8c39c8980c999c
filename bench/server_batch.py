"""Many concurrent streaming clients against the server: continuous batching against one-at-a-time
serving and against llama-cpp-python's server, in one run; or, with --soak, a long mixed load.

    python bench/server_batch.py [MODEL] [-t THREADS] [-n 48] [--clients 1,4,8] [--parallel 8]
                                 [--repeats 2] [--no-peer] [--json PATH]
    python bench/server_batch.py [MODEL] --soak [--parallel 8] [--soak-requests 200] [--soak-clients 16]
                                 [--soak-warmup 16] [--json PATH]

Each server config in turn (only one server runs at a time): `python -m pypowerinfer.server` with
--parallel 1 (n_ctx 512), with --parallel K (n_ctx 512*K, so each slot has 512 positions), and
`python -m llama_cpp.server --interrupt_requests False` (n_ctx 512). For each client count C, C
threads (each with its own openai client) start together and each streams one greedy completion of
n tokens (min_tokens n) of its own prompt. Reported per (config, C): aggregate tok/s (text chunks of
all clients over last chunk - first send; best of the repeats), TTFT p50/p95 over all clients of
all repeats, and how many answers equal that prompt's answer when it runs alone on the same server.
Ratios at the end: parallel at max C vs parallel at 1 client, vs the peer, vs serial.

--soak: ours with --parallel K only. Solo answers first, then a warm-up of 16 requests
(--soak-warmup), then --soak-requests streaming completions of 32 tokens from --soak-clients
threads, every 4th closed after 3 chunks. Reports errors, correct/total of the completed ones,
the server's RSS growth, and whether /metrics shows busy slots left once the load is over.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

# Varied short prompts so that concurrent sequences differ in length and content; client i gets
# prompt i (more clients than prompts wrap around).
PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "List three primary colors:",
    "In 1492, Christopher Columbus",
    "The quick brown fox",
    "Water boils at a temperature of",
    "To make a cup of tea, first",
    "The most important rule of programming is",
    "Photosynthesis is the process by which",
]

SLOT_CTX = 512  # positions per sequence, in every config
SOAK_TOKENS = 32
DISCONNECT_EVERY = 4  # every 4th soak request closes its stream early...
DISCONNECT_AFTER = 3  # ...after this many text chunks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: List[float], q: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# ---- servers ----

class StartError(RuntimeError):
    """A server that exited or never became ready."""


class Server:
    """One server process: started, polled until ready, always terminated by the `with`."""

    def __init__(self, label: str, cmd: List[str], ready_path: str):
        self.label, self.cmd, self.ready_path = label, cmd, ready_path
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        # stderr kept in a file (not a pipe that could fill and block the server) to show on failure
        self.log = tempfile.TemporaryFile()

    def __enter__(self) -> "Server":
        import httpx

        self.proc = subprocess.Popen(self.cmd + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        try:
            deadline = time.time() + 180
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    raise StartError(f"{self.label}: server exited with {self.proc.returncode}\n{self.stderr_tail()}")
                try:
                    # ours answers /health 503 while loading; llama-cpp-python's only serves once loaded
                    if httpx.get(self.base + self.ready_path, timeout=5).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            raise StartError(f"{self.label}: not ready after 180 s\n{self.stderr_tail()}")
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stderr_tail(self, n: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-n:]

    def model_id(self) -> str:
        import httpx

        return httpx.get(self.base + "/v1/models", timeout=10).json()["data"][0]["id"]

    def rss_mb(self) -> Optional[float]:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024  # kB
        except OSError:
            pass
        return None

    def metrics(self) -> Dict[str, float]:
        import httpx

        out = {}
        for line in httpx.get(self.base + "/metrics", timeout=10).text.splitlines():
            if line.startswith("pypowerinfer_") and " " in line:
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out


def ours(model: str, threads: int, parallel: int) -> Server:
    n_ctx = SLOT_CTX * parallel if parallel > 1 else SLOT_CTX
    return Server(f"ours --parallel {parallel}",
                  [sys.executable, "-m", "pypowerinfer.server", "--model", model, "--n-ctx", str(n_ctx),
                   "--n-threads", str(threads), "--parallel", str(parallel)], "/health")


def peer(model: str, threads: int) -> Server:
    return Server("llama-cpp-python",
                  [sys.executable, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(SLOT_CTX),
                   "--n_threads", str(threads), "--interrupt_requests", "False"], "/v1/models")


# ---- clients ----

def make_client(base: str):
    import openai

    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=300)


def stream_one(client, model_id: str, prompt: str, n: int, stop_after: Optional[int] = None) -> dict:
    """One streaming greedy completion: send time, text chunk arrival times, the text. With
    stop_after, the stream is closed after that many text chunks (a client going away)."""
    sent = time.perf_counter()
    times, parts = [], []
    stream = client.completions.create(model=model_id, prompt=prompt, max_tokens=n, temperature=0.0, stream=True,
                                       extra_body={"min_tokens": n})
    try:
        for chunk in stream:
            text = chunk.choices[0].text if chunk.choices else ""
            if text:
                times.append(time.perf_counter())
                parts.append(text)
                if stop_after is not None and len(times) >= stop_after:
                    break
    finally:
        stream.close()  # for an early stop, drops the connection so the server sees the client gone
    return {"sent": sent, "times": times, "text": "".join(parts)}


def solo_texts(server: Server, model_id: str, prompts: List[str], n: int) -> List[str]:
    """Each prompt's answer with nothing else running (also warms the server up)."""
    client = make_client(server.base)
    return [stream_one(client, model_id, p, n)["text"] for p in prompts]


def concurrent_round(server: Server, model_id: str, n_clients: int, n: int) -> List[dict]:
    """n_clients threads released together by a barrier, client i streaming PROMPTS[i]."""
    clients = [make_client(server.base) for _ in range(n_clients)]
    barrier = threading.Barrier(n_clients)
    results: List[Optional[dict]] = [None] * n_clients

    def work(i: int) -> None:
        barrier.wait()
        try:
            results[i] = stream_one(clients[i], model_id, PROMPTS[i % len(PROMPTS)], n)
        except Exception as exc:  # noqa: BLE001 - reported in the row, the other clients go on
            results[i] = {"error": f"{type(exc).__name__}: {exc}"}

    # daemon: an interrupted run exits (stopping its server) without waiting for the streams
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def bench_config(server: Server, client_counts: List[int], n: int, repeats: int) -> List[dict]:
    model_id = server.model_id()
    n_prompts = min(max(client_counts), len(PROMPTS))
    solo = solo_texts(server, model_id, PROMPTS[:n_prompts], n)
    rows = []
    for c in client_counts:
        best_rate, ttfts, same, errors, chunks = 0.0, [], 0, [], []
        for _ in range(repeats):
            results = concurrent_round(server, model_id, c, n)
            ok = [r for r in results if "error" not in r and r["times"]]
            errors += [r["error"] for r in results if "error" in r]
            for i, r in enumerate(results):
                if "error" in r:
                    continue
                same += r["text"] == solo[i % len(PROMPTS)]
                chunks.append(len(r["times"]))
                if r["times"]:
                    ttfts.append(r["times"][0] - r["sent"])
            if ok:
                span = max(r["times"][-1] for r in ok) - min(r["sent"] for r in results if "sent" in r)
                best_rate = max(best_rate, sum(len(r["times"]) for r in ok) / span)
        rows.append({"config": server.label, "clients": c, "tok_s": best_rate,
                     "ttft_p50": percentile(ttfts, 0.5), "ttft_p95": percentile(ttfts, 0.95),
                     "identical": same, "total": c * repeats, "errors": errors,
                     "chunks_min": min(chunks, default=0), "chunks_max": max(chunks, default=0)})
    return rows


def print_table(rows: List[dict]) -> None:
    def ms(v):
        return "-" if v is None else f"{v * 1000:.0f}"

    print(f"{'config':<22}{'clients':>8}{'tok/s':>9}{'TTFT p50 ms':>13}{'TTFT p95 ms':>13}"
          f"{'same as solo':>14}{'chunks':>9}{'errors':>8}")
    for r in rows:
        chunks = f"{r['chunks_min']}" if r["chunks_min"] == r["chunks_max"] else f"{r['chunks_min']}-{r['chunks_max']}"
        print(f"{r['config']:<22}{r['clients']:>8}{r['tok_s']:>9.1f}{ms(r['ttft_p50']):>13}{ms(r['ttft_p95']):>13}"
              f"{str(r['identical']) + '/' + str(r['total']):>14}{chunks:>9}{len(r['errors']):>8}")
    for r in rows:
        for e in sorted(set(r["errors"])):
            print(f"  error ({r['config']}, {r['clients']} clients): {e}")


def ratios(rows: List[dict], parallel: int, client_counts: List[int]) -> Dict[str, float]:
    rate = {(r["config"], r["clients"]): r["tok_s"] for r in rows}
    hi, lo = max(client_counts), min(client_counts)
    par, ser = f"ours --parallel {parallel}", "ours --parallel 1"
    wanted = {f"{par} @{hi} / {par} @{lo}": ((par, hi), (par, lo)),
              f"{par} @{hi} / llama-cpp-python @{hi}": ((par, hi), ("llama-cpp-python", hi)),
              f"{par} @{hi} / {ser} @{hi}": ((par, hi), (ser, hi))}
    return {name: rate[a] / rate[b] for name, (a, b) in wanted.items()
            if rate.get(a) and rate.get(b) and a != b}


# ---- soak ----

def soak(model: str, threads: int, parallel: int, n_requests: int, n_clients: int, n_warmup: int) -> dict:
    with ours(model, threads, parallel) as server:
        model_id = server.model_id()
        solo = solo_texts(server, model_id, PROMPTS[:min(max(n_requests, n_warmup), len(PROMPTS))], SOAK_TOKENS)

        def run_load(n: int, disconnects: bool) -> dict:
            """n requests pulled by n_clients threads; request j streams prompt j, every 4th closed early."""
            counter = itertools.count()
            lock = threading.Lock()
            tally = {"errors": [], "completed": 0, "correct": 0, "disconnects": 0}

            def work() -> None:
                client = make_client(server.base)
                while True:
                    with lock:
                        j = next(counter)
                    if j >= n:
                        return
                    cut = disconnects and j % DISCONNECT_EVERY == DISCONNECT_EVERY - 1
                    try:
                        r = stream_one(client, model_id, PROMPTS[j % len(PROMPTS)], SOAK_TOKENS,
                                       stop_after=DISCONNECT_AFTER if cut else None)
                    except Exception as exc:  # noqa: BLE001 - counted; the load goes on
                        with lock:
                            tally["errors"].append(f"{type(exc).__name__}: {exc}")
                        continue
                    with lock:
                        if cut:
                            tally["disconnects"] += 1
                        else:
                            tally["completed"] += 1
                            tally["correct"] += r["text"] == solo[j % len(PROMPTS)]

            workers = [threading.Thread(target=work, daemon=True) for _ in range(n_clients)]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            return tally

        warm = run_load(n_warmup, disconnects=False)
        rss_start = server.rss_mb()
        start = time.perf_counter()
        load = run_load(n_requests, disconnects=True)
        seconds = time.perf_counter() - start
        rss_end = server.rss_mb()
        # slots of closed streams are freed at the engine's next step: give them a moment
        deadline = time.time() + 10
        while True:
            m = server.metrics()
            busy = m.get("pypowerinfer_busy_slots", 0.0)
            if busy == 0 or time.time() > deadline:
                break
            time.sleep(0.2)
        return {"parallel": parallel, "requests": n_requests, "clients": n_clients, "tokens": SOAK_TOKENS,
                "seconds": seconds, "warmup": n_warmup, "warmup_errors": warm["errors"], "errors": load["errors"],
                "completed": load["completed"], "correct": load["correct"], "disconnects": load["disconnects"],
                "rss_start_mb": rss_start, "rss_end_mb": rss_end,
                "rss_growth_mb": None if rss_start is None or rss_end is None else rss_end - rss_start,
                "busy_slots": busy, "queue_depth": m.get("pypowerinfer_queue_depth"), "slot_leak": busy > 0}


def print_soak(s: dict) -> None:
    print(f"soak: ours --parallel {s['parallel']}, {s['requests']} requests of {s['tokens']} tokens from "
          f"{s['clients']} clients, every {DISCONNECT_EVERY}th closed after {DISCONNECT_AFTER} chunks, "
          f"{s['seconds']:.1f} s")
    print(f"  errors:            {len(s['errors'])} (warm-up: {len(s['warmup_errors'])})")
    for e in sorted(set(s["errors"] + s["warmup_errors"])):
        print(f"    {e}")
    print(f"  completed correct: {s['correct']}/{s['completed']}")
    print(f"  disconnects:       {s['disconnects']}")
    if s["rss_growth_mb"] is not None:
        print(f"  server RSS:        {s['rss_start_mb']:.1f} MB after {s['warmup']} warm-up requests -> "
              f"{s['rss_end_mb']:.1f} MB ({s['rss_growth_mb']:+.1f} MB)")
    print(f"  after the load:    busy slots {s['busy_slots']:.0f}, queue depth {s['queue_depth']:.0f}"
          f" -> {'SLOT LEAK' if s['slot_leak'] else 'no slot leaked'}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("-n", type=int, default=48, help="tokens per completion")
    p.add_argument("--clients", default="1,4,8", help="concurrent client counts, comma-separated")
    p.add_argument("--parallel", type=int, default=8, help="--parallel of our batching server")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-peer", action="store_true", help="skip llama-cpp-python's server")
    p.add_argument("--soak", action="store_true", help="run the soak test instead of the throughput table")
    p.add_argument("--soak-requests", type=int, default=200)
    p.add_argument("--soak-clients", type=int, default=16)
    p.add_argument("--soak-warmup", type=int, default=16, help="requests before the first RSS reading")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    # SIGTERM (timeout, kill) as an exception, so that the finally blocks stop the server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    from pypowerinfer import default_model_path

    model = args.model or str(default_model_path())
    header = {"model": os.path.basename(model), "threads": args.threads}

    if args.soak:
        result = {**header, "soak": soak(model, args.threads, args.parallel, args.soak_requests,
                                           args.soak_clients, args.soak_warmup)}
        print(f"model {header['model']}, {args.threads} threads")
        print_soak(result["soak"])
    else:
        client_counts = sorted({int(c) for c in args.clients.split(",") if c.strip()})
        servers = [lambda: ours(model, args.threads, 1), lambda: ours(model, args.threads, args.parallel)]
        if not args.no_peer:
            servers.append(lambda: peer(model, args.threads))
        rows, skipped = [], {}
        for make in servers:
            server = make()
            try:
                with server:
                    rows += bench_config(server, client_counts, args.n, args.repeats)
            except StartError as exc:
                if server.label != "llama-cpp-python":
                    raise
                # the peer is optional (its server needs llama-cpp-python[server]): say so, keep our rows
                print(f"warning: skipping the peer, it did not start: {exc}", file=sys.stderr)
                skipped[server.label] = str(exc)
        result = {**header, "n": args.n, "repeats": args.repeats, "clients": client_counts,
                  "parallel": args.parallel, "rows": rows, "skipped": skipped,
                  "ratios": ratios(rows, args.parallel, client_counts)}
        print(f"model {header['model']}, {args.threads} threads, {args.n} greedy tokens per client, "
              f"best of {args.repeats} (TTFT over all)")
        print_table(rows)
        for name, value in result["ratios"].items():
            print(f"{name}: {value:.2f}x")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
