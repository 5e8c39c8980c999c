"""Replicas behind Ray Serve (pypowerinfer.serve_ray): a local Ray instance, two replicas, driven
with the openai client. Runs where `ray[serve]` is installed (the `ray` extra), else skips."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
openai = pytest.importorskip("openai")

from pypowerinfer.serve_ray import _typed, build_app, deployment  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_url(smollm2_path):
    ray.init(num_cpus=4, include_dashboard=False, ignore_reinit_error=True)
    serve.start(http_options={"host": "127.0.0.1", "port": 8765})
    serve.run(deployment(str(smollm2_path), num_replicas=2, threads_per_replica=1, model_name="smollm2",
                         n_ctx=512).bind(), blocking=False)
    yield "http://127.0.0.1:8765"
    serve.shutdown()
    ray.shutdown()


def test_two_replicas_answer_through_the_openai_client(base_url):
    status = serve.status().applications["default"].deployments["pypowerinfer"]
    assert status.replica_states.get("RUNNING") == 2
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    kw = dict(model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0.0)
    answers = {client.completions.create(**kw).choices[0].text for _ in range(6)}
    assert len(answers) == 1 and answers.pop().strip()  # every replica gives the same greedy text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw))
    assert streamed == client.completions.create(**kw).choices[0].text
    chat = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert chat.choices[0].message.role == "assistant"


def test_the_builder_reads_the_deployment_config():
    assert _typed("4") == 4 and _typed("0.5") == 0.5 and _typed("false") is False and _typed("x.gguf") == "x.gguf"
    with pytest.raises(ValueError, match="model_path"):
        build_app({"n_ctx": "512"})
    app = deployment("m.gguf", max_replicas=3)
    assert app.name == "pypowerinfer"
