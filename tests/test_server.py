"""The server on loopback, driven by the real `openai` client: serving one request at a time, and
four at once (--parallel 4, continuous batching), which must look the same to a client."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from pypowerinfer import Llama  # noqa: E402
from pypowerinfer.server import create_app  # noqa: E402
from serving import serve  # noqa: E402

KEY = "sk-test-key"


@pytest.fixture(scope="module", params=[1, 4], ids=["serial", "parallel4"])
def app(smollm2_path, request):
    parallel = request.param
    llm = Llama(str(smollm2_path), n_ctx=512 * (1 + (parallel > 1)), n_threads=2, embedding=True, verbose=False)
    app = create_app(llm, model_name="smollm2", api_key=KEY, parallel=parallel)
    yield app
    if app.state.served.engine is not None:
        app.state.served.engine.close()
    llm.close()


@pytest.fixture(scope="module")
def base_url(app):
    url, stop = serve(app)
    yield url
    stop()


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def test_models(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["smollm2"]


def test_completion_and_its_stream_agree(client):
    kw = dict(model="smollm2", prompt="The capital of France is", max_tokens=12, temperature=0.0)
    whole = client.completions.create(**kw)
    assert whole.object == "text_completion" and whole.usage.completion_tokens > 0
    pieces = [c.choices[0].text for c in client.completions.create(stream=True, **kw)]
    assert "".join(pieces) == whole.choices[0].text


def test_chat_and_its_stream_agree(client):
    msgs = [{"role": "user", "content": "Say hello in French."}]
    whole = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=16, temperature=0.0)
    assert whole.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=16, temperature=0.0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_embeddings(client):
    out = client.embeddings.create(model="smollm2", input=["Hello world", "Hi"])
    assert len(out.data) == 2 and out.usage.prompt_tokens == 3
    assert len(out.data[0].embedding) == 2 and len(out.data[0].embedding[0]) == 576  # per token: pooling none


def test_bad_requests_get_openai_errors(client, base_url):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="x", max_tokens=4, temperature=-1.0)
    assert e.value.body["type"] == "invalid_request_error" and e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="word " * 600, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="smollm2", messages=[], max_tokens=4)
    import httpx

    r = httpx.post(base_url + "/v1/completions", content=b"{not json", headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(base_url + "/v1/completions", content=b"x" * (5 << 20), headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 413


def test_llama_cpp_servers_fields(app, base_url):
    import httpx

    h = {"Authorization": f"Bearer {KEY}"}
    post = lambda path, body: httpx.post(base_url + path, json=body, headers=h, timeout=60)  # noqa: E731
    # a grammar constrains the text, in completions and chat
    r = post("/v1/completions", {"prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 0.0,
                                 "grammar": 'root ::= " yes" | " no"'})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in (" yes", " no")
    r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Pick a colour."}], "max_tokens": 8,
                                      "grammar": 'root ::= "red" | "blue"'})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] in ("red", "blue")
    # one that does not parse is a 400 with the parser's message
    r = post("/v1/completions", {"prompt": "x", "max_tokens": 4, "grammar": 'root ::= ("a"'})
    assert r.status_code == 400 and "invalid grammar" in r.json()["error"]["message"]
    assert "expected )" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "grammar"
    # logit_bias by token text: the biased token comes first
    r = post("/v1/completions", {"prompt": "The", "max_tokens": 1, "temperature": 0.0,
                                 "logit_bias": {" zebra": 100.0}, "logit_bias_type": "tokens"})
    assert r.status_code == 200 and r.json()["choices"][0]["text"].startswith(" z")
    # min_tokens holds end of text back: with its logit pushed up, EOS comes first without it
    eos = {str(app.state.served.llm.token_eos()): 100.0}
    r = post("/v1/completions", {"prompt": "Hi", "max_tokens": 6, "logit_bias": eos})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 1
    r = post("/v1/completions", {"prompt": "Hi", "max_tokens": 6, "logit_bias": eos, "min_tokens": 4})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 4
    # mirostat and the other sampling fields are accepted
    r = post("/v1/completions", {"prompt": "Hi", "max_tokens": 6, "min_tokens": 6, "mirostat_mode": 2,
                                 "mirostat_tau": 4.0, "typical_p": 0.9, "seed": 1, "user": "me"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 6
    assert post("/v1/completions", {"prompt": "x", "max_tokens": 2, "n": 2}).status_code == 400


def test_wrong_api_key(base_url):
    bad = openai.OpenAI(base_url=base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_tokenize_round_trip(base_url):
    import httpx

    h = {"Authorization": f"Bearer {KEY}"}
    tokens = httpx.post(base_url + "/extras/tokenize", json={"input": "Hello world"}, headers=h).json()["tokens"]
    assert httpx.post(base_url + "/extras/tokenize/count", json={"input": "Hello world"}, headers=h).json() == \
        {"count": len(tokens)}
    assert httpx.post(base_url + "/extras/detokenize", json={"tokens": tokens}, headers=h).json()["text"] == "Hello world"
    assert httpx.post(base_url + "/extras/detokenize", json={"tokens": [10 ** 9]}, headers=h).status_code == 400


def test_100_requests_from_20_clients_are_answered_unmixed(client):
    """20 clients at once, 100 requests, half of them streams: each gets exactly what it gets
    alone (requests queue on one model), all within a bound."""
    prompts = [f"Count from {i} to {i + 5}:" for i in range(100)]

    def ask(i_p):
        i, p = i_p
        kw = dict(model="smollm2", prompt=p, max_tokens=6, temperature=0.0)
        if i % 2:
            return "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw))
        return client.completions.create(**kw).choices[0].text

    alone = [ask((0, p)) for p in prompts[:10]]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=20) as pool:
        together = list(pool.map(ask, enumerate(prompts)))
    assert time.time() - t0 < 300
    assert together[:10] == alone
    assert all(isinstance(t, str) for t in together)
    # the same prompt asked again alone answers as it did under load
    assert [ask((0, p)) for p in prompts[90:]] == together[90:]


def test_a_client_that_leaves_mid_stream_frees_the_model(app, base_url, client):
    import httpx

    served = app.state.served
    engine = served.engine
    before = engine.step_tokens if engine is not None else 0
    body = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0.0, "stream": True}
    with httpx.stream("POST", base_url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # one chunk, then hang up
    deadline = time.time() + 30
    while (served.active or (engine is not None and engine.busy_slots())) and time.time() < deadline:
        time.sleep(0.01)
    assert served.active == 0
    # the generation stopped with the client, long before 400 tokens
    if engine is not None:
        assert engine.busy_slots() == 0 and engine.step_tokens - before < 100
    else:
        assert served.llm.n_tokens < 100
    out = client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, temperature=0.0)
    assert out.choices[0].text is not None
