"""The completion defaults live in pypowerinfer.sampling (COMPLETION, CHAT): Llama's signatures,
SamplingParams and the server's request bodies read them from there, and they are
llama-cpp-python's."""
from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from pypowerinfer.sampling import CHAT, COMPLETION
from pypowerinfer.sampling import SamplingParams

# a Llama method, the defaults its signature reads, and its name for the temperature
METHODS = [("create_completion", COMPLETION, "temperature"), ("create_chat_completion", CHAT, "temperature"),
           ("sample", COMPLETION, "temp"), ("generate", COMPLETION, "temp")]


def _defaults(fn) -> dict:
    params = inspect.signature(fn).parameters.items()
    return {n: p.default for n, p in params if p.default is not inspect.Parameter.empty}


def _argument(field: str, temperature: str) -> str:
    return {"temperature": temperature, "penalty_last_n": "last_n_tokens_size"}.get(field, field)


def test_llama_and_sampling_params_read_the_defaults():
    from pypowerinfer import Llama

    for method, defaults, temperature in METHODS:
        given = _defaults(getattr(Llama, method))
        for f in fields(defaults):
            name = _argument(f.name, temperature)
            if name in given:
                assert given[name] == getattr(defaults, f.name), (method, name)
    assert _defaults(Llama.__init__)["last_n_tokens_size"] == COMPLETION.penalty_last_n
    params = SamplingParams()
    for f in fields(params):
        if hasattr(COMPLETION, f.name):
            assert getattr(params, f.name) == getattr(COMPLETION, f.name), f.name


def test_the_servers_bodies_read_the_defaults():
    pytest.importorskip("fastapi")
    from pypowerinfer.server.bodies import ChatBody, CompletionBody

    for body, defaults in ((CompletionBody(), COMPLETION), (ChatBody(messages=[{"role": "user"}]), CHAT)):
        for f in fields(defaults):
            if hasattr(body, f.name):
                assert getattr(body, f.name) == getattr(defaults, f.name), (type(body).__name__, f.name)


def test_they_are_llama_cpp_pythons():
    llama_cpp = pytest.importorskip("llama_cpp")
    from pypowerinfer import Llama

    for method in ("__init__", "create_completion", "create_chat_completion", "sample", "generate"):
        ours, theirs = _defaults(getattr(Llama, method)), _defaults(getattr(llama_cpp.Llama, method))
        shared = ours.keys() & theirs.keys()
        assert shared and {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}, method
