"""The app: the model being served, its request slots and metrics, and the routes."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from typing import Iterator, Optional

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from ..batching import BatchEngine
from ..metrics import ServerMetrics
from .bodies import ChatBody, CompletionBody, DetokenizeBody, EmbeddingBody, TokenizeBody
from .errors import APIError, error_response, model_error
from .streaming import AheadOfClient, chunk_tokens

MAX_BODY_BYTES = 4 << 20


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
            raise model_error(exc) from None
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
            raise model_error(exc) from None
        async def events():
            # sse-starlette cancels this generator when the client leaves; the clean-up runs
            # shielded, so the generation is stopped and the lock released whatever happens
            ahead = AheadOfClient(chunks, asyncio.get_running_loop())
            tokens, first = 0, None
            try:
                while True:
                    if await request.is_disconnected():
                        break
                    chunk = await ahead.get()
                    if chunk is AheadOfClient.DONE:
                        yield {"data": "[DONE]"}
                        break
                    if chunk_tokens(chunk):
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
        return error_response(exc.status, exc.message, exc.kind, exc.code, exc.param, exc.retry_after)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return error_response(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}",
                              "invalid_request_error", param=where)

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
            response = error_response(413, f"request body over {MAX_BODY_BYTES} bytes", "invalid_request_error")
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
