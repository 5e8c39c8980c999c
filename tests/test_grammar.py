"""GBNF parsing and matching, JSON Schema to GBNF, and generation that always parses."""
from __future__ import annotations

import json
import math

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
        json_schema_to_gbnf({"type": "string", "pattern": "(?=a)b"})
    with pytest.raises(NotImplementedError, match="minimum"):
        json_schema_to_gbnf({"type": "number", "minimum": 0.5})
    with pytest.raises(ValueError, match="no integer"):
        json_schema_to_gbnf({"type": "integer", "minimum": 3, "exclusiveMaximum": 3})


PATTERNS = {
    r"^[a-z]+$": (["abc", "z"], ["", "Abc", "ab1"]),
    r"^\d{3}-\d{4}$": (["555-1234"], ["5551234", "55-1234", "555-12345"]),
    r"^(foo|bar)baz?$": (["foobaz", "barba", "fooba"], ["foo", "bazbar"]),
    r"^[^0-9]*$": (["abc", "", "x y"], ["a1", 'a"b']),
    r"^\w+@\w+\.com$": (["a_b@c.com"], ["a@b.org", "@b.com"]),
    r"^(?:ab)+$": (["ab", "abab"], ["aba", ""]),
    r"^.{2,3}$": (["ab", "abc"], ["a", "abcd"]),
    r"^[A-F\d]{2}$": (["0A", "FF", "9B"], ["G1", "a0"]),
    r"^\S+$": (["abc"], ["a b", ""]),
}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_string_patterns(pattern):
    g = LlamaGrammar.from_json_schema(json.dumps({"type": "string", "pattern": pattern}))
    yes, no = PATTERNS[pattern]
    assert all(g.accepts_text(json.dumps(y)) for y in yes)
    assert not any(g.accepts_text(json.dumps(n)) for n in no)


@pytest.mark.parametrize("pattern, error", [("a+", "must start with"), ("^(?=a)b$", "lookaround"), (r"^a\1$", "escape"),
                                            ('^"$', "escapes"), ("^(a$", "unbalanced"), ("^*a$", "nothing to repeat")])
def test_unenforceable_patterns_say_why(pattern, error):
    with pytest.raises((NotImplementedError, ValueError), match=error):
        json_schema_to_gbnf({"type": "string", "pattern": pattern})


@pytest.mark.parametrize("bounds", [dict(minimum=0, maximum=9), dict(minimum=5, maximum=5), dict(minimum=-3, maximum=17),
                                    dict(minimum=7, maximum=1234), dict(minimum=-150, maximum=-20),
                                    dict(maximum=10), dict(minimum=-5), dict(minimum=99, maximum=101),
                                    dict(exclusiveMinimum=-1.5, exclusiveMaximum=42), dict(minimum=0.5, maximum=3.5)])
def test_integer_bounds_admit_exactly_their_range(bounds):
    g = LlamaGrammar.from_json_schema(json.dumps({"type": "integer", **bounds}))
    lo = max(math.ceil(bounds.get("minimum", -1e9)), math.floor(bounds.get("exclusiveMinimum", -1e9)) + 1)
    hi = min(math.floor(bounds.get("maximum", 1e9)), math.ceil(bounds.get("exclusiveMaximum", 1e9)) - 1)
    edges = [e for e in (lo, hi) if abs(e) < 1e8] + [0, 10**6, -10**6]  # each bound, zero, far off
    for v in {v for e in edges for v in range(e - 40, e + 41)}:
        assert g.accepts_text(str(v)) == (lo <= v <= hi), v
    assert not any(g.accepts_text(t) for t in ["007", "-0", "1.0", "", "--1", "+1"])


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


@pytest.mark.parametrize("word", ["日本", "😀", "naïve"])
def test_characters_split_across_tokens_can_be_generated(smollm2, word):
    """SmolLM2's byte-level BPE spells 日 and 😀 only as tokens that end inside a code point (and
    ï inside "ïve"): the matcher carries the unfinished bytes, as llama.cpp's does."""
    pieces = [smollm2.tokenizer_.token_to_piece(t) for t in smollm2.tokenize(word.encode(), add_bos=False)]
    if word != "naïve":
        assert any(_ends_inside_a_code_point(p) for p in pieces), pieces
    g = LlamaGrammar.from_string(f'root ::= "{word}" " "?')
    for seed in range(3):
        out = smollm2("Say something: ", grammar=g, max_tokens=12, temperature=0.8, seed=seed)
        assert out["choices"][0]["text"].rstrip() == word and out["choices"][0]["finish_reason"] == "stop"


def _ends_inside_a_code_point(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_unfinished_code_points_are_held_to_the_grammar():
    """A token ending inside a code point is allowed only if some completion fits; end of text
    is not allowed with a code point unfinished."""

    class Bytes:  # a tokenizer of single bytes, and an end-of-generation token
        n_vocab = 257

        def token_to_piece(self, t):
            return bytes([t]) if t < 256 else b""

        def is_eog(self, t):
            return t == 256

    tok = Bytes()
    g = LlamaGrammar.from_string('root ::= [一-鿿]')  # the CJK unified ideographs, U+4E00..U+9FFF
    allowed = g.allowed(tok)
    assert allowed[0xE4] and allowed[0xE9] and not allowed[0xE3] and not allowed[0xEA]  # lead bytes of 3-byte forms
    assert not allowed[ord("a")] and not allowed[0x80] and not allowed[256]
    g.accept_token(tok, 0xE6)  # 日 is E6 97 A5
    allowed = g.allowed(tok)
    assert allowed[0x97] and not allowed[ord("a")] and not allowed[256]
    g.accept_token(tok, 0x97)
    g.accept_token(tok, 0xA5)
    assert g.allowed(tok)[256]  # complete: the grammar may end


@pytest.mark.parametrize("seed", range(2))
def test_generated_json_keeps_patterns_and_integer_bounds(smollm2, seed):
    schema = {"type": "object", "required": ["phone", "floor"],
              "properties": {"phone": {"type": "string", "pattern": r"^\d{3}-\d{4}$"},
                             "floor": {"type": "integer", "minimum": -2, "maximum": 120}}}
    out = smollm2("An office, as JSON: ", grammar=LlamaGrammar.from_json_schema(json.dumps(schema)), max_tokens=60,
                  temperature=0.9, seed=seed)
    jsonschema.validate(json.loads(out["choices"][0]["text"]), schema)
