"""An OpenAI-compatible HTTP server over one model (FastAPI + uvicorn, SSE for streams).

    python -m pypowerinfer.server --model PATH [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                                  [--n-ctx 2048] [--n-threads N] [--vram-budget 25%] [--no-sparse]
                                  [--max-queue 64]

Every option can also come from the environment: its name in capitals (MODEL, PORT, API_KEY,
N_CTX, VRAM_BUDGET, ...). Endpoints: /v1/completions, /v1/chat/completions, /v1/embeddings,
/v1/models, /extras/tokenize, /extras/tokenize/count, /extras/detokenize; /health (503 while the
model loads, then 200) and /metrics (Prometheus text).

Requests to the model are queued on one lock and never interleaved in its context; a stream
holds the lock until it ends or its client goes away. Beyond --max-queue waiting requests a new
one is answered 503 with Retry-After. Errors are answered in OpenAI's shape,
{"error": {"message", "type", "param", "code"}}, with a 4xx status for the client's mistakes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Literal, Optional, Union

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from .grammar import GrammarError, LlamaGrammar
from .metrics import ServerMetrics
from .sampling import LogitsProcessorList, MinTokensLogitsProcessor

MAX_BODY_BYTES = 4 << 20


# ---- request bodies (unknown fields are accepted and ignored, as OpenAI clients send extras) ----

class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Optional[str] = None


class _Sampling(_Body):
    max_tokens: Optional[int] = Field(16, ge=-1)
    temperature: float = Field(0.8, ge=0.0, le=10.0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    top_k: int = Field(40, ge=0)
    stop: Optional[Union[str, List[str]]] = None
    stream: bool = False
    seed: Optional[int] = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(1.0, ge=0.0)
    logit_bias: Optional[Dict[str, float]] = None
    # llama-cpp-python's server's own fields
    logit_bias_type: Literal["input_ids", "tokens"] = "input_ids"  # logit_bias keys: token ids, or token texts
    typical_p: float = Field(1.0, ge=0.0, le=1.0)
    tfs_z: float = Field(1.0, ge=0.0, le=1.0)
    mirostat_mode: int = Field(0, ge=0, le=2)
    mirostat_tau: float = Field(5.0, ge=0.0, le=10.0)
    mirostat_eta: float = Field(0.1, ge=0.001, le=1.0)
    min_tokens: int = Field(0, ge=0)
    grammar: Optional[str] = None  # GBNF
    n: int = Field(1, ge=1, le=1)  # one choice per request, as the peer's server computes
    best_of: Optional[int] = Field(1, ge=1, le=1)
    user: Optional[str] = None

    def sampling(self, llm) -> Dict[str, Any]:
        """create_completion's sampling keywords; a GBNF grammar that does not parse is a 400 naming
        the parser's complaint."""
        processors = LogitsProcessorList([MinTokensLogitsProcessor(self.min_tokens, llm.token_eos())]) \
            if self.min_tokens > 0 else None
        grammar = None
        if self.grammar is not None:
            try:
                grammar = LlamaGrammar.from_string(self.grammar, verbose=False)
            except GrammarError as exc:
                raise APIError(400, f"invalid grammar: {exc}", param="grammar") from None
        return dict(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p, min_p=self.min_p,
                    top_k=self.top_k, stop=self.stop or [], stream=self.stream, seed=self.seed,
                    presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
                    repeat_penalty=self.repeat_penalty, logit_bias=self._bias(llm), typical_p=self.typical_p,
                    tfs_z=self.tfs_z, mirostat_mode=self.mirostat_mode, mirostat_tau=self.mirostat_tau,
                    mirostat_eta=self.mirostat_eta, logits_processor=processors, grammar=grammar)

    def _bias(self, llm) -> Optional[Dict[int, float]]:
        if not self.logit_bias:
            return None
        if self.logit_bias_type == "input_ids":
            try:
                return {int(k): v for k, v in self.logit_bias.items()}
            except ValueError:
                raise APIError(400, "logit_bias keys must be token ids (or set logit_bias_type to 'tokens')",
                               param="logit_bias") from None
        bias: Dict[int, float] = {}
        for text, value in self.logit_bias.items():  # every token of each text, as the peer's server does
            for token in llm.tokenize(text.encode("utf-8"), add_bos=False, special=True):
                bias[token] = value
        return bias


class CompletionBody(_Sampling):
    prompt: Union[str, List[str], List[int]] = ""
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    suffix: Optional[str] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "function", "developer"]
    content: Optional[Union[str, List[Dict[str, Any]]]] = None


class ChatBody(_Sampling):
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=-1)
    temperature: float = Field(0.2, ge=0.0, le=10.0)
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    response_format: Optional[Dict[str, Any]] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)


class EmbeddingBody(_Body):
    input: Union[str, List[str]]


class TokenizeBody(_Body):
    input: str
    add_special: bool = True


class DetokenizeBody(_Body):
    tokens: List[int]


# ---- errors in OpenAI's shape ----

class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: Optional[str] = None,
                 param: Optional[str] = None, retry_after: Optional[int] = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.retry_after = retry_after


def _error(status: int, message: str, kind: str, code: Optional[str] = None, param: Optional[str] = None,
           retry_after: Optional[int] = None):
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status,
                        headers=headers)


def _model_error(exc: Exception) -> APIError:
    """What the model's exceptions mean to a client."""
    text = str(exc)
    if isinstance(exc, NotImplementedError):
        return APIError(400, text, code="not_implemented")
    if "exceed context window" in text or "exceed batch size" in text:
        return APIError(400, text, code="context_length_exceeded")
    return APIError(400, text)


# ---- the app ----

def _chunk_tokens(chunk: dict) -> int:
    """1 when a streamed chunk carries generated text (a completion's or a chat delta's), else 0."""
    choice = (chunk.get("choices") or [{}])[0]
    return int(bool(choice.get("text") or (choice.get("delta") or {}).get("content")))


class _AheadOfClient:
    """A chunk generator run in its own thread, up to `depth` chunks ahead of the client: the
    next token is computed while the last one is sent, and a chunk crosses threads once."""

    DONE = object()

    def __init__(self, chunks: Iterator[dict], loop: asyncio.AbstractEventLoop, depth: int = 8):
        self._chunks, self._loop = chunks, loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._room = threading.Semaphore(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pypowerinfer-stream", daemon=True)
        self._thread.start()

    def _put(self, item) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            for chunk in self._chunks:
                self._room.acquire()
                if self._stop.is_set():
                    break
                self._put(chunk)
        except Exception as exc:  # noqa: BLE001 - handed to the client's side, which raises it
            self._put(exc)
        finally:
            self._chunks.close()  # ends the generation: the Llama is free again
            self._put(self.DONE)

    async def get(self):
        item = await self._queue.get()
        self._room.release()
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        """Stop generating (the stream ended or its client left) and wait until it has stopped."""
        self._stop.set()
        self._room.release()  # a producer waiting for room sees the stop
        await anyio.to_thread.run_sync(self._thread.join)


class _Served:
    """The model (None while it loads), with `parallel` > 1 the BatchEngine that runs that many
    requests at once, the slots that queue requests to them, and the metrics."""

    def __init__(self, llm, name: str, max_queue: int, parallel: int = 1):
        self.name, self.max_queue, self.parallel = name, max_queue, parallel
        self.llm = self.engine = None
        self.slots = asyncio.Semaphore(parallel)  # a request holds one from its start to its last chunk
        self.exclusive = asyncio.Lock()  # the Llama's own context (embeddings) beside the engine's
        self.waiting = 0
        self.active = 0  # requests holding a slot
        self.metrics = ServerMetrics()
        if llm is not None:
            self.attach(llm)

    def attach(self, llm) -> None:
        """Serve `llm` (the loader's thread calls this when it is ready)."""
        from .batching import BatchEngine

        self.engine = BatchEngine(llm, self.parallel) if self.parallel > 1 else None
        self.llm = llm

    def model(self):
        if self.llm is None:
            raise APIError(503, "the model is loading", "server_error", "model_loading", retry_after=5)
        return self.llm

    def completer(self):
        """What runs completions: the engine, or the Llama one request at a time."""
        llm = self.model()
        return self.engine if self.engine is not None else llm

    async def acquire(self) -> None:
        """Wait for a slot; a 503 with Retry-After when max_queue requests wait already."""
        self.model()
        if self.slots.locked() and self.waiting >= self.max_queue:
            raise APIError(503, f"the server is busy: {self.waiting} requests are waiting", "server_error",
                           "queue_full", retry_after=1)
        self.waiting += 1
        self.metrics.queue.set(self.waiting)
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
            self.metrics.queue.set(self.waiting)
        self.active += 1
        self.metrics.busy.set(self.active)

    def release(self) -> None:
        self.active -= 1
        self.metrics.busy.set(self.active)
        self.slots.release()

    async def run(self, fn, *args, **kwargs):
        await self.acquire()
        try:
            result = await run_in_threadpool(fn, *args, **kwargs)
        except (ValueError, NotImplementedError, RuntimeError) as exc:
            raise _model_error(exc) from None
        finally:
            self.release()
        usage = result.get("usage") if isinstance(result, dict) else None
        if usage:
            self.metrics.tokens.inc(usage.get("completion_tokens", 0))
        return result

    async def stream(self, request: Request, make: "callable") -> EventSourceResponse:
        """SSE of the chunks `make()` yields, holding the lock until the stream ends or the
        client leaves; then the generator is closed, which ends the generation."""
        arrived = time.perf_counter()
        await self.acquire()
        try:
            chunks: Iterator[dict] = await run_in_threadpool(make)
        except (ValueError, NotImplementedError, RuntimeError) as exc:
            self.release()
            raise _model_error(exc) from None
        async def events():
            # sse-starlette cancels this generator when the client leaves; the clean-up runs
            # shielded, so the generation is stopped and the lock released whatever happens
            ahead = _AheadOfClient(chunks, asyncio.get_running_loop())
            tokens, first = 0, None
            try:
                while True:
                    if await request.is_disconnected():
                        break
                    chunk = await ahead.get()
                    if chunk is _AheadOfClient.DONE:
                        yield {"data": "[DONE]"}
                        break
                    if _chunk_tokens(chunk):
                        tokens += 1
                        self.metrics.tokens.inc()
                        if first is None:
                            first = time.perf_counter()
                            self.metrics.ttft.observe(first - arrived)
                    yield {"data": json.dumps(chunk)}
            finally:
                with anyio.CancelScope(shield=True):
                    await ahead.close()
                self.release()
                if tokens > 1:
                    self.metrics.decode_rate.set((tokens - 1) / (time.perf_counter() - first))

        return EventSourceResponse(events(), sep="\n", ping=600)


def create_app(llm, *, model_name: Optional[str] = None, api_key: Optional[str] = None,
               max_queue: int = 64, parallel: int = 1) -> FastAPI:
    """The app over a pypowerinfer.Llama (built with embedding=True for /v1/embeddings), serving
    `parallel` completions at once (continuous batching, batching.BatchEngine) or one at a time;
    with llm None it answers 503 until app.state.served.attach(llm) (the model loading meanwhile)."""
    if llm is None and model_name is None:
        raise ValueError("create_app(None) needs the model_name its responses carry")
    if not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel must be a positive integer, not {parallel!r}")
    served = _Served(llm, model_name or os.path.basename(llm.model_path), max_queue, parallel)
    app = FastAPI(title="pypowerinfer", version="0.1.0")
    app.state.served = served
    routes = {"/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/extras/tokenize",
              "/extras/tokenize/count", "/extras/detokenize", "/health", "/metrics"}

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError):
        return _error(exc.status, exc.message, exc.kind, exc.code, exc.param, exc.retry_after)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}", "invalid_request_error",
                      param=where)

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
            response = _error(413, f"request body over {MAX_BODY_BYTES} bytes", "invalid_request_error")
        else:
            response = await call_next(request)
        path = request.url.path if request.url.path in routes else "other"  # bounded label values
        served.metrics.requests.labels(path, str(response.status_code)).inc()
        return response

    @app.get("/health")
    async def health():
        if served.llm is None:
            return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "5"})
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        body, content_type = served.metrics.render()
        return Response(body, media_type=content_type)

    async def authorize(request: Request):
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise APIError(401, "invalid API key", "authentication_error", "invalid_api_key")

    auth = [Depends(authorize)]

    @app.get("/v1/models", dependencies=auth)
    async def models():
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": int(time.time()),
                                             "owned_by": "me", "permissions": []}]}

    @app.post("/v1/completions", dependencies=auth)
    async def completions(body: CompletionBody, request: Request):
        llm = served.model()
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise APIError(400, "one prompt per request", param="prompt")
            prompt = prompt[0]
        kwargs = dict(body.sampling(llm), echo=body.echo, logprobs=body.logprobs, suffix=body.suffix, model=served.name)
        run = served.completer().create_completion
        if body.stream:
            return await served.stream(request, lambda: run(prompt, **kwargs))
        return await served.run(run, prompt, **kwargs)

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat(body: ChatBody, request: Request):
        llm = served.model()
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        kwargs = dict(body.sampling(llm), tools=body.tools, tool_choice=body.tool_choice,
                      response_format=body.response_format, logprobs=body.logprobs, top_logprobs=body.top_logprobs,
                      model=served.name)
        run = served.completer().create_chat_completion
        if body.stream:
            return await served.stream(request, lambda: run(messages, **kwargs))
        return await served.run(run, messages, **kwargs)

    @app.post("/v1/embeddings", dependencies=auth)
    async def embeddings(body: EmbeddingBody):
        async with served.exclusive:
            return await served.run(served.model().create_embedding, body.input, model=served.name)

    @app.post("/extras/tokenize", dependencies=auth)
    async def tokenize(body: TokenizeBody):
        llm = served.model()
        return {"tokens": llm.tokenize(body.input.encode("utf-8"), add_bos=body.add_special, special=True)}

    @app.post("/extras/tokenize/count", dependencies=auth)
    async def count(body: TokenizeBody):
        llm = served.model()
        return {"count": len(llm.tokenize(body.input.encode("utf-8"), add_bos=body.add_special, special=True))}

    @app.post("/extras/detokenize", dependencies=auth)
    async def detokenize(body: DetokenizeBody):
        llm = served.model()
        if any(t < 0 or t >= llm.n_vocab() for t in body.tokens):
            raise APIError(400, f"token ids must be in [0, {llm.n_vocab()})", param="tokens")
        return {"text": llm.detokenize(body.tokens).decode("utf-8", errors="replace")}

    return app


# ---- command line ----

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

    from .llama import Llama
    from .resources import default_model_path

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


if __name__ == "__main__":
    sys.exit(main())
