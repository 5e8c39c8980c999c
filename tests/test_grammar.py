"""GBNF parsing and matching, JSON Schema to GBNF, and generation that always parses."""
from __future__ import annotations

import json

import pytest

from pypowerinfer.grammar import JSON_GBNF, GrammarError, LlamaGrammar, json_schema_to_gbnf

jsonschema = pytest.importorskip("jsonschema")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "pet": {"enum": ["cat", "dog", None]},
        "alive": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "home": {"$ref": "#/$defs/place"},
    },
    "required": ["name", "age", "alive"],
    "$defs": {"place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                        "required": ["city"]}},
}


@pytest.mark.parametrize("text,ok", [
    ("{}", True), ('{"a": 1}', True), ('{"a": [1, -2.5e3, "x\\n\\u00e9"], "b": {"c": null}}', True),
    ('{"a":}', False), ("[1]", False), ('{"a": 01}', False), ('{"a": "\x01"}', False), ('{"a": tru}', False),
])
def test_json_grammar(text, ok):
    assert LlamaGrammar.from_string(JSON_GBNF).accepts_text(text) is ok


@pytest.mark.parametrize("grammar,yes,no", [
    ('root ::= "a"+ "b"?', ["a", "aaab"], ["", "b", "abb"]),
    ("root ::= [a-c]{2,3}", ["ab", "abc"], ["a", "abca", "ad"]),
    ("root ::= [^x]* \"x\"", ["x", "abcx"], ["xx", "ab"]),
    ("root ::= (\"ab\" | \"cd\")* # comment\n", ["", "abcd", "cdab"], ["ac"]),
    ("root ::= item (\",\" item)*\nitem ::= [0-9]+\n  | \"n\"", ["1,22,n"], ["1,", ",1"]),
    ("root ::= \"\\u00e9\" . \"\\x41\"", ["é?A"], ["éA"]),
])
def test_gbnf_constructs(grammar, yes, no):
    g = LlamaGrammar.from_string(grammar)
    assert all(g.accepts_text(t) for t in yes)
    assert not any(g.accepts_text(t) for t in no)


@pytest.mark.parametrize("bad,match", [
    ("item ::= \"a\"", "root"), ("root ::= other", "not defined"), ("root ::= \"a", "unterminated"),
    ("root ::= [b-a]", "empty"), ("root ::= \"a\"\nroot ::= \"b\"", "twice"), ("root ::= root \"a\"", "recurses"),
    ("root ::= \"\\q\"", "escape"), ("root ::= (\"a\"", "expected \\)"),
])
def test_gbnf_errors(bad, match):
    with pytest.raises(GrammarError, match=match):
        LlamaGrammar.from_string(bad)


def test_schema_language():
    g = LlamaGrammar.from_json_schema(json.dumps(PERSON))
    good = [{"name": "Ann", "age": 3, "alive": True},
            # required properties first, then the optional ones, each in declared order (as llama.cpp)
            {"name": "Bo", "age": -1, "alive": False, "pet": None, "tags": ["a", "b"], "home": {"city": "Oslo"}}]
    bad = [{"name": "Ann", "alive": True}, {"name": "x" * 13, "age": 1, "alive": True},
           {"name": "A", "age": 1.5, "alive": True}, {"name": "A", "age": 1, "alive": True, "tags": ["1", "2", "3", "4"]},
           {"name": "A", "age": 1, "alive": True, "pet": "cow"}, {"name": "A", "age": 1, "alive": True, "extra": 1},
           {"name": "A", "age": 1, "pet": "cat", "alive": True}]
    assert all(g.accepts_text(json.dumps(x)) for x in good)
    assert not any(g.accepts_text(json.dumps(x)) for x in bad)


def test_unenforceable_schema_is_refused():
    with pytest.raises(NotImplementedError, match="pattern"):
        json_schema_to_gbnf({"type": "string", "pattern": "^a+$"})


@pytest.mark.parametrize("seed", range(8))
def test_generated_json_validates(smollm2, seed):
    g = LlamaGrammar.from_json_schema(json.dumps(PERSON))
    out = smollm2("A person, as JSON: ", grammar=g, max_tokens=160, temperature=0.9, seed=seed)
    text = out["choices"][0]["text"]
    assert out["choices"][0]["finish_reason"] == "stop", text
    jsonschema.validate(json.loads(text), PERSON)


def test_chat_response_format_and_forced_tool(smollm2):
    msgs = [{"role": "user", "content": "Describe a cat as a JSON object."}]
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 10}}, "required": ["color"]}
    out = smollm2.create_chat_completion(msgs, response_format={"type": "json_object", "schema": schema},
                                         max_tokens=60, seed=2)
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)
    tools = [{"type": "function", "function": {"name": "set_color", "parameters": schema}}]
    out = smollm2.create_chat_completion(msgs, tools=tools, max_tokens=60, seed=3,
                                         tool_choice={"type": "function", "function": {"name": "set_color"}})
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "set_color"
    jsonschema.validate(json.loads(call["arguments"]), schema)
    with pytest.raises(ValueError, match="not found"):
        smollm2.create_chat_completion(msgs, tools=tools, tool_choice={"type": "function", "function": {"name": "x"}})
