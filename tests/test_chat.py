"""Chat completions against llama-cpp-python: the same prompt for every built-in format and for
the GGUF template, the same dict and chunk shapes, and the end-of-turn stop."""
from __future__ import annotations

import pytest

from pypowerinfer.chat import FORMATS, TemplateFormat

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a planet."}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"}, {"role": "user", "content": "Three"},
     {"role": "assistant", "content": ""}],
]

# llama-cpp-python's module-level function of each built-in format
REFERENCE = {"chatml": "format_chatml", "qwen": "format_qwen", "zephyr": "format_zephyr", "llama-2": "format_llama2",
             "llama-3": "format_llama3", "mistral-instruct": "format_mistral_instruct", "gemma": "format_gemma",
             "alpaca": "format_alpaca", "vicuna": "format"}


def test_every_format_has_a_reference():
    assert set(REFERENCE) == set(FORMATS)


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
def test_builtin_format_prompt_matches_llama_cpp(llama_cpp, name, conversation):
    from llama_cpp import llama_chat_format

    messages = CONVERSATIONS[conversation]
    ours = FORMATS[name](messages=messages)
    ref = getattr(llama_chat_format, REFERENCE[name])(messages=messages)
    assert ours.prompt == ref.prompt
    ref_stop = [] if ref.stop is None else [ref.stop] if isinstance(ref.stop, str) else list(ref.stop)
    assert ours.stop == ref_stop
    assert ours.added_special == ref.added_special


@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
def test_gguf_template_matches_llama_cpp(llama_cpp, smollm2, smollm2_ref, conversation):
    from llama_cpp import llama_chat_format

    messages = CONVERSATIONS[conversation]
    template = smollm2.metadata["tokenizer.chat_template"]
    ref = llama_chat_format.Jinja2ChatFormatter(
        template=template, eos_token=smollm2_ref._model.token_get_text(smollm2_ref.token_eos()),
        bos_token=smollm2_ref._model.token_get_text(smollm2_ref.token_bos()))(messages=messages)
    ours = smollm2._chat_format()(messages=messages)
    assert ours.prompt == ref.prompt
    assert ours.stop == ref.stop and ours.added_special == ref.added_special
    assert list(ours.stop_token_ids) == [smollm2_ref.token_eos()]
    assert smollm2.tokenize(ours.prompt.encode(), add_bos=False, special=True) == \
        smollm2_ref.tokenize(ref.prompt.encode(), add_bos=False, special=True)


def test_template_is_sandboxed():
    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(Exception, match="unsafe|access"):
        TemplateFormat(evil, "<s>", "</s>", 2)(messages=[{"role": "user", "content": "x"}])
    mutate = "{% set _ = messages.append(1) %}{{ messages|length }}"
    with pytest.raises(Exception, match="unsafe|immutable|append"):
        TemplateFormat(mutate, "<s>", "</s>", 2)(messages=[])


def test_template_raise_exception_is_a_value_error():
    t = TemplateFormat("{{ raise_exception('roles must alternate') }}", "", "", None)
    with pytest.raises(ValueError, match="roles must alternate"):
        t(messages=[])


def test_template_sees_tools():
    t = TemplateFormat("{% for t in tools %}{{ t.function.name }};{% endfor %}{{ tools|tojson }}", "", "", None)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    out = t(messages=[], tools=tools).prompt
    assert out.startswith("get_weather;") and '"name": "get_weather"' in out


def test_chat_completion_shape_and_end_of_turn(smollm2, smollm2_ref):
    messages = CONVERSATIONS[1]
    kw = dict(max_tokens=48, temperature=0.0, seed=1)
    ours = smollm2.create_chat_completion(messages, **kw)
    ref = smollm2_ref.create_chat_completion(messages, **kw)
    assert ours.keys() == ref.keys() and ours["object"] == "chat.completion"
    assert ours["choices"][0].keys() == ref["choices"][0].keys()
    assert ours["choices"][0]["message"]["role"] == "assistant"
    assert ours["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"]
    # the turn ends at <|im_end|>, which never appears in the text
    assert ours["choices"][0]["finish_reason"] == ref["choices"][0]["finish_reason"] == "stop"
    assert "<|im_end|>" not in ours["choices"][0]["message"]["content"]


def test_chat_stream_matches_the_whole_completion(smollm2):
    messages = CONVERSATIONS[0]
    whole = smollm2.create_chat_completion(messages, max_tokens=24, temperature=0.0)
    chunks = list(smollm2.create_chat_completion(messages, max_tokens=24, temperature=0.0, stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"][0]["delta"] == {}


def test_chat_formats_by_name(smollm2):
    prompt = FORMATS["chatml"](messages=CONVERSATIONS[0]).prompt
    old = smollm2.chat_format
    try:
        smollm2.chat_format = "chatml"
        out = smollm2.create_chat_completion(CONVERSATIONS[0], max_tokens=4, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == len(smollm2.tokenize(prompt.encode(), add_bos=True, special=True))
        smollm2.chat_format = "no-such-format"
        with pytest.raises(ValueError, match="unknown chat_format"):
            smollm2.create_chat_completion(CONVERSATIONS[0], max_tokens=4)
    finally:
        smollm2.chat_format = old


def test_openai_v1_types(smollm2):
    openai_chat = pytest.importorskip("openai.types.chat")
    out = smollm2.create_chat_completion_openai_v1(CONVERSATIONS[0], max_tokens=4, temperature=0.0)
    assert isinstance(out, openai_chat.ChatCompletion) and out.choices[0].message.role == "assistant"
    chunks = list(smollm2.create_chat_completion_openai_v1(CONVERSATIONS[0], max_tokens=4, temperature=0.0,
                                                           stream=True))
    assert all(isinstance(c, openai_chat.ChatCompletionChunk) for c in chunks)
