"""An OpenAI-compatible HTTP server over one model (FastAPI + uvicorn, SSE for streams):
`python -m pypowerinfer.server --model PATH` (cli.py gives the options).

Endpoints: /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models, /extras/tokenize,
/extras/tokenize/count, /extras/detokenize; /health (503 while the model loads, then 200) and
/metrics (Prometheus text).

Requests to the model are queued on `parallel` slots (one by default, a BatchEngine's sequences
with more) and never interleaved in a context; a stream holds its slot until it ends or its
client goes away. Beyond --max-queue waiting requests a new one is answered 503 with
Retry-After. Errors are answered in OpenAI's shape, {"error": {"message", "type", "param",
"code"}}, with a 4xx status for the client's mistakes.

The modules, by job: bodies.py (the request bodies), errors.py (OpenAI-shaped errors),
streaming.py (chunks generated ahead of the client), app.py (the served model, its slots and
metrics, and the routes), cli.py (the command line).
"""
from .app import MAX_BODY_BYTES, create_app
from .cli import main, parse_args
from .errors import APIError

__all__ = ["APIError", "MAX_BODY_BYTES", "create_app", "main", "parse_args"]
