"""The server's operations side: /health while the model loads and after, /metrics in
Prometheus's text format, a bounded queue (503 with Retry-After) and the start-up checks."""
from __future__ import annotations

import json
import time

import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from pypowerinfer import Llama  # noqa: E402
from pypowerinfer.server import create_app, main  # noqa: E402
from serving import serve  # noqa: E402


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=512, n_threads=2, verbose=False) as model:
        yield model


def metric(text: str, name: str) -> float:
    """The value of the sample `name` (with its labels, as Prometheus prints them)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def test_health_is_503_while_the_model_loads_then_200(llm):
    app = create_app(None, model_name="smollm2")
    url, stop = serve(app)
    try:
        loading = httpx.get(url + "/health")
        assert loading.status_code == 503 and loading.json() == {"status": "loading"}
        busy = httpx.post(url + "/v1/completions", json={"prompt": "Hi"})
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "model_loading"
        assert busy.headers["retry-after"] == "5"
        app.state.served.attach(llm)
        assert httpx.get(url + "/health").json() == {"status": "ok"}
    finally:
        stop()


def test_metrics_count_requests_tokens_and_first_tokens(llm):
    url, stop = serve(create_app(llm, model_name="smollm2"))
    try:
        plain = httpx.post(url + "/v1/completions", json={"prompt": "The sky is", "max_tokens": 5, "temperature": 0})
        assert plain.status_code == 200
        with httpx.stream("POST", url + "/v1/completions",
                          json={"prompt": "The sky is", "max_tokens": 6, "temperature": 0, "stream": True}) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        text = httpx.get(url + "/metrics")
        assert text.headers["content-type"].startswith("text/plain")
        body = text.text
    finally:
        stop()
    generated = plain.json()["usage"]["completion_tokens"] + sum(bool(c["choices"][0]["text"]) for c in chunks)
    assert metric(body, 'pypowerinfer_requests_total{endpoint="/v1/completions",status="200"}') == 2
    assert metric(body, "pypowerinfer_generated_tokens_total") == generated
    assert metric(body, "pypowerinfer_time_to_first_token_seconds_count") == 1
    assert metric(body, "pypowerinfer_queue_depth") == 0 and metric(body, "pypowerinfer_busy_slots") == 0
    assert metric(body, "pypowerinfer_last_request_tokens_per_second") > 0


def test_a_full_queue_answers_503_with_retry_after(llm):
    url, stop = serve(create_app(llm, model_name="smollm2", max_queue=0))
    try:
        with httpx.stream("POST", url + "/v1/completions",
                          json={"prompt": "Count:", "max_tokens": 400, "min_tokens": 400, "stream": True}) as holding:
            lines = holding.iter_lines()  # kept: closing it would close the stream, freeing the model
            next(line for line in lines if line.startswith("data: {"))  # it holds the model now
            refused = httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "queue_full"
        # the stream's client left: its slot is free again
        deadline = time.time() + 30
        while time.time() < deadline:
            again = httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
            if again.status_code == 200:
                break
            time.sleep(0.2)
        assert again.status_code == 200
    finally:
        stop()


@pytest.mark.parametrize("argv, message", [(["--parallel", "0"], "at least 1"), (["--parallel", "-2"], "at least 1"),
                                           (["--parallel", "4", "--n-gpu-layers", "2"], "on the CPU"),
                                           (["--parallel", "4", "--n-ctx", "2"], "more than --n-ctx"),
                                           (["--max-queue", "-1"], "--max-queue")])
def test_bad_options_are_refused_at_start(argv, message, capsys):
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_a_bad_kv_cache_type_stops_the_server(smollm2_path, capsys):
    assert main(["--model", str(smollm2_path), "--type-k", "q5_k", "--port", "0"]) == 1
    assert "type_k" in capsys.readouterr().err


def test_a_stream_runs_ahead_of_its_client_and_stops_with_it():
    import asyncio

    from pypowerinfer.server.streaming import AheadOfClient as _AheadOfClient

    made, closed = [], []

    def endless():
        try:
            while True:
                made.append(len(made))
                yield {"n": made[-1]}
        finally:
            closed.append(True)

    def failing():
        yield {"n": 0}
        raise ValueError("boom")

    async def run():
        loop = asyncio.get_running_loop()
        ahead = _AheadOfClient(endless(), loop, depth=3)
        assert [(await ahead.get())["n"] for _ in range(2)] == [0, 1]
        await asyncio.sleep(0.2)
        assert len(made) <= 2 + 3 + 1  # the chunks read, the room ahead, and one being made
        await ahead.close()
        assert closed == [True]  # the generation ended with the stream
        failed = _AheadOfClient(failing(), loop)
        assert (await failed.get())["n"] == 0
        with pytest.raises(ValueError, match="boom"):
            await failed.get()
        assert await failed.get() is _AheadOfClient.DONE
        await failed.close()

    asyncio.run(run())
