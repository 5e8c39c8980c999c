"""An OpenAI-compatible HTTP server over one model (FastAPI + uvicorn, SSE for streams).

    python -m pypowerinfer.server --model PATH [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                                  [--n-ctx 2048] [--n-threads N] [--vram-budget 25%] [--no-sparse]
                                  [--max-queue 64] [--parallel 1]

Every option can also come from the environment: its name in capitals (MODEL, PORT, API_KEY,
N_CTX, VRAM_BUDGET, ...).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import List, Optional

from .app import create_app


def _env(name: str, default=None):
    return os.environ.get(name.upper(), default)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m pypowerinfer.server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=_env("model"), help="GGUF path (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--model-alias", default=_env("model_alias"), help="the model's name in responses")
    ap.add_argument("--host", default=_env("host", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(_env("port", 8000)))
    ap.add_argument("--api-key", default=_env("api_key"), help="require 'Authorization: Bearer KEY'")
    ap.add_argument("--n-ctx", type=int, default=int(_env("n_ctx", 2048)))
    ap.add_argument("--n-threads", type=int, default=int(_env("n_threads", 0)) or None)
    ap.add_argument("--chat-format", default=_env("chat_format"))
    ap.add_argument("--vram-budget", default=_env("vram_budget"), help="bytes, 2G, 25%% or auto (profiled models)")
    ap.add_argument("--n-gpu-layers", type=int, default=int(_env("n_gpu_layers", 0)),
                    help="layer offload: the last N layers on the CUDA device (-1: all)")
    ap.add_argument("--no-sparse", action="store_true", default=_env("no_sparse", "") not in ("", "0", "false"))
    ap.add_argument("--sparse-shift", type=float, default=float(_env("sparse_shift", 0.0)))
    ap.add_argument("--lora-path", default=_env("lora_path"), help="a LoRA adapter (llama.cpp's GGUF) for the model")
    ap.add_argument("--lora-scale", type=float, default=float(_env("lora_scale", 1.0)))
    kv_type = lambda v: int(v) if v.isdigit() else v  # noqa: E731 - a GGML id, as the peer's server takes, or a name
    ap.add_argument("--type-k", type=kv_type, default=_env("type_k"), help="KV cache keys: f16 (default), q8_0, q4_0")
    ap.add_argument("--type-v", type=kv_type, default=_env("type_v"), help="KV cache values: f16 (default), q8_0, q4_0")
    ap.add_argument("--max-queue", type=int, default=int(_env("max_queue", 64)),
                    help="requests that may wait for the model; beyond them a 503 with Retry-After")
    ap.add_argument("--parallel", type=int, default=int(_env("parallel", 1)),
                    help="requests computed at once, sharing --n-ctx (continuous batching); 1: one at a time")
    return ap.parse_args(argv)


def _check(args) -> Optional[str]:
    """What is wrong with the options, before anything loads."""
    if args.parallel < 1:
        return f"--parallel must be at least 1, not {args.parallel}"
    if args.parallel > 1 and (args.vram_budget or args.n_gpu_layers):
        return (f"--parallel {args.parallel} runs its sequences on the CPU: --vram-budget and --n-gpu-layers with "
                "more than one are not supported yet")
    if args.parallel > args.n_ctx:
        return f"--parallel {args.parallel} is more than --n-ctx {args.n_ctx}: each sequence needs positions"
    if args.max_queue < 0:
        return f"--max-queue must be 0 or more, not {args.max_queue}"
    return None


def main(argv=None) -> int:
    """Serve at once, answering 503 (and /health 503) while the model loads in a thread; a model
    that fails to load stops the server with the loader's message and exit status 1."""
    import uvicorn

    from ..llama import Llama
    from ..resources import default_model_path

    args = parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    model = args.model or str(default_model_path())
    app = create_app(None, model_name=args.model_alias or os.path.basename(model), api_key=args.api_key,
                     max_queue=args.max_queue, parallel=args.parallel)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port))
    failed: List[Exception] = []

    def load():
        try:
            app.state.served.attach(Llama(
                model, n_ctx=args.n_ctx, n_threads=args.n_threads, chat_format=args.chat_format, embedding=True,
                sparse=False if args.no_sparse else None,  # None: as the file decided
                sparse_threshold_shift=args.sparse_shift, vram_budget=args.vram_budget,
                n_gpu_layers=args.n_gpu_layers, lora_path=args.lora_path, lora_scale=args.lora_scale,
                type_k=args.type_k, type_v=args.type_v, verbose=False))
        except Exception as exc:  # noqa: BLE001 - whatever stops the load stops the server, with its message
            failed.append(exc)
            server.should_exit = True

    loader = threading.Thread(target=load, name="pypowerinfer-load", daemon=True)
    loader.start()
    server.run()
    loader.join()
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
        return 1
    return 0

