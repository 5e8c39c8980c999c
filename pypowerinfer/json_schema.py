"""JSON Schema -> GBNF, as llama.cpp's json-schema-to-grammar does it: `json_schema_to_gbnf`
for a schema, `JSON_GBNF` for any JSON object (llama-cpp-python's JSON grammar).
"""
from __future__ import annotations

import json
import math
import re
from typing import Dict, List, Optional

JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
"""

_PRIMITIVES = {
    "ws": r'| " " | "\n" [ \t]{0,20}',
    "string": r'"\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws',
    "number": r'"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,4})? ws',
    "integer": r'"-"? ("0" | [1-9] [0-9]{0,15}) ws',
    "boolean": r'("true" | "false") ws',
    "null": r'"null" ws',
    "value": r'object | array | string | number | ("true" | "false" | "null") ws',
    "object": r'"{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws',
    "array": r'"[" ws ( value ("," ws value)* )? "]" ws',
}
_NEEDS = {"string": ["ws"], "number": ["ws"], "integer": ["ws"], "boolean": ["ws"], "null": ["ws"],
          "value": ["object", "array", "string", "number", "ws"], "object": ["string", "value", "ws"],
          "array": ["value", "ws"]}


def _literal(value) -> str:
    """A GBNF string matching json.dumps(value) exactly."""
    text = json.dumps(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _SchemaConverter:
    def __init__(self, schema: dict):
        self.root_schema = schema
        self.rules: Dict[str, str] = {}

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _PRIMITIVES[name]
            for dep in _NEEDS.get(name, []):
                self.primitive(dep)
        return name

    def add(self, hint: str, body: str) -> str:
        name = re.sub(r"[^A-Za-z0-9-]+", "-", hint).strip("-") or "rule"
        base, i = name, 1
        while name in self.rules and self.rules[name] != body:
            i += 1
            name = f"{base}-{i}"
        self.rules[name] = body
        return name

    def resolve(self, ref: str) -> dict:
        if not ref.startswith("#/"):
            raise NotImplementedError(f"JSON schema: only local $ref are supported, not {ref!r}")
        node = self.root_schema
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def visit(self, schema, hint: str) -> str:
        """The GBNF expression (a rule name or a small inline expression) for schema."""
        if schema is True or schema == {}:
            return self.primitive("value")
        if not isinstance(schema, dict):
            raise ValueError(f"JSON schema: expected an object at {hint}, got {schema!r}")
        if "$ref" in schema:
            return self.visit(self.resolve(schema["$ref"]), schema["$ref"].split("/")[-1])
        bounds = [k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema]
        unsupported = [k for k in ("multipleOf", "uniqueItems", "not", "if") if k in schema]
        if "pattern" in schema and schema.get("type") != "string":
            unsupported.append("pattern")
        if bounds and schema.get("type") != "integer":
            unsupported += bounds  # integer bounds only, as llama.cpp's converter
        if unsupported:
            raise NotImplementedError(f"JSON schema: {', '.join(unsupported)} cannot be enforced by the grammar yet")
        if "const" in schema:
            self.primitive("ws")
            return self.add(hint, _literal(schema["const"]) + " ws")
        if "enum" in schema:
            self.primitive("ws")
            return self.add(hint, "(" + " | ".join(_literal(v) for v in schema["enum"]) + ") ws")
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.add(hint, " | ".join(self.visit(s, f"{hint}-{i}") for i, s in enumerate(schema[key])))
        if "allOf" in schema:
            if len(schema["allOf"]) != 1:
                raise NotImplementedError("JSON schema: allOf with several schemas is not supported")
            return self.visit(schema["allOf"][0], hint)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.add(hint, " | ".join(self.visit({**schema, "type": k}, f"{hint}-{k}") for k in kind))
        if kind == "object" or (kind is None and "properties" in schema):
            return self.object(schema, hint)
        if kind == "array":
            return self.array(schema, hint)
        if kind == "string":
            return self.string(schema, hint)
        if kind == "integer" and bounds:
            return self.integer_range(schema, hint)
        if kind in ("number", "integer", "boolean", "null"):
            return self.primitive(kind)
        if kind is None:
            return self.primitive("value")
        raise NotImplementedError(f"JSON schema: type {kind!r} is not supported")

    def integer_range(self, schema: dict, hint: str) -> str:
        """An integer within minimum/maximum (exclusive ones moved in by one)."""
        lo = _integer_bound(schema, "minimum", "exclusiveMinimum", 1)
        hi = _integer_bound(schema, "maximum", "exclusiveMaximum", -1)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"JSON schema: no integer lies in [{lo}, {hi}] at {hint}")
        self.primitive("ws")
        return self.add(hint, "(" + " | ".join(_integer_alternatives(lo, hi)) + ") ws")

    def string(self, schema: dict, hint: str) -> str:
        if "pattern" in schema:
            if "minLength" in schema or "maxLength" in schema:
                raise NotImplementedError("JSON schema: pattern together with minLength/maxLength is not supported")
            self.primitive("ws")
            return self.add(hint, r'"\"" ' + _pattern_to_gbnf(schema["pattern"]) + r' "\"" ws')
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if lo is None and hi is None:
            return self.primitive("string")
        self.primitive("ws")
        char = r'( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )'
        count = f"{{{int(lo or 0)},{'' if hi is None else int(hi)}}}"
        return self.add(hint, r'"\"" ' + self.add(hint + "-char", char) + count + r' "\"" ws')

    def array(self, schema: dict, hint: str) -> str:
        item = self.visit(schema.get("items", {}), hint + "-item")
        self.primitive("ws")
        lo, hi = int(schema.get("minItems", 0)), schema.get("maxItems")
        if hi is not None and int(hi) == 0:
            return self.add(hint, '"[" ws "]" ws')
        more_lo, more_hi = max(lo - 1, 0), None if hi is None else int(hi) - 1
        more = f'("," ws {item}){{{more_lo},{"" if more_hi is None else more_hi}}}'
        body = f"{item} {more}"
        return self.add(hint, f'"[" ws {body if lo > 0 else "(" + body + ")?"} "]" ws')

    def object(self, schema: dict, hint: str) -> str:
        self.primitive("ws")
        props = schema.get("properties", {})
        required = [k for k in props if k in set(schema.get("required", []))]
        optional = [k for k in props if k not in set(required)]
        kv = {k: f'{_literal(k)} ":" ws {self.visit(v, f"{hint}-{k}")}' for k, v in props.items()}
        extra = schema.get("additionalProperties", False)
        if extra not in (False, None):
            value = self.visit({} if extra is True else extra, hint + "-extra")
            kv_extra = self.add(hint + "-kv", f'{self.primitive("string")} ":" ws {value}')
        else:
            kv_extra = None
        # after at least one pair: each optional pair may follow with a comma, then extra pairs
        tail = f'("," ws {kv_extra})*' if kv_extra else ""
        for k in reversed(optional):
            tail = f'("," ws {kv[k]})? {tail}'.strip()
        if required:
            body = ' "," ws '.join(kv[k] for k in required) + (" " + tail if tail else "")
            return self.add(hint, f'"{{" ws {body} "}}" ws')
        # no required pair: the first pair present opens without a comma
        firsts = []
        for i, k in enumerate(optional):
            rest = ""
            for later in reversed(optional[i + 1:]):
                rest = f'("," ws {kv[later]})? {rest}'.strip()
            extras = f'("," ws {kv_extra})*' if kv_extra else ""
            firsts.append(f"{kv[k]} {rest} {extras}".strip())
        if kv_extra:
            firsts.append(f'{kv_extra} ("," ws {kv_extra})*')
        inner = "(" + " | ".join(firsts) + ")?" if firsts else ""
        return self.add(hint, f'"{{" ws {inner} "}}" ws')


# ---- JSON Schema patterns: the regular expressions llama.cpp's converter takes ----

_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": r" \t\n\r"}
# a JSON string's characters other than the quote and backslash, which a pattern may not use here
_STRING_CHAR = r'[^"\\\x7F\x00-\x1F]'


class _PatternParser:
    r"""A regular expression, ^...$ anchored, as one GBNF expression over a JSON string's
    characters: literals, ., classes (with \d \w \s inside and out, negated), groups (plain and
    (?:...)), | and the quantifiers * + ? {m} {m,} {m,n}. Backreferences, lookaround and the
    characters a JSON string must escape (" and \ as literals) raise NotImplementedError."""

    def __init__(self, pattern: str):
        if not (pattern.startswith("^") and pattern.endswith("$")):
            raise NotImplementedError("JSON schema: a pattern must start with ^ and end with $ to be enforced")
        self.t, self.pos = pattern[1:-1], 0

    def unsupported(self, what: str):
        raise NotImplementedError(f"JSON schema pattern: {what} is not supported")

    def parse(self) -> str:
        out = self.alternatives()
        if self.pos != len(self.t):
            raise ValueError(f"JSON schema pattern: unbalanced ')' at {self.pos}")
        return out

    def alternatives(self) -> str:
        alts = [self.sequence()]
        while self.pos < len(self.t) and self.t[self.pos] == "|":
            self.pos += 1
            alts.append(self.sequence())
        return "(" + " | ".join(a or '""' for a in alts) + ")"

    def sequence(self) -> str:
        items = []
        while self.pos < len(self.t) and self.t[self.pos] not in "|)":
            atom = self.atom()
            items.append(atom + self.quantifier())
        return " ".join(items)

    def quantifier(self) -> str:
        if self.pos >= len(self.t):
            return ""
        c = self.t[self.pos]
        if c in "*+?":
            self.pos += 1
            return c
        if c == "{":
            end = self.t.find("}", self.pos)
            body = self.t[self.pos + 1:end] if end > 0 else ""
            if not re.fullmatch(r"\d+(,\d*)?", body):
                raise ValueError(f"JSON schema pattern: bad repetition at {self.pos}")
            self.pos = end + 1
            return "{" + body + "}"
        return ""

    def atom(self) -> str:
        c = self.t[self.pos]
        self.pos += 1
        if c == "(":
            if self.t.startswith("?:", self.pos):
                self.pos += 2
            elif self.t.startswith("?", self.pos):
                self.unsupported("lookaround and named groups")
            inner = self.alternatives()
            if self.pos >= len(self.t) or self.t[self.pos] != ")":
                raise ValueError("JSON schema pattern: unbalanced '('")
            self.pos += 1
            return inner
        if c == ".":
            return _STRING_CHAR
        if c == "[":
            return self.char_class()
        if c in "*+?{":
            raise ValueError(f"JSON schema pattern: nothing to repeat at {self.pos - 1}")
        if c in "^$":
            self.unsupported("an anchor inside the pattern")
        if c == "\\":
            return self.escape(in_class=False)
        return self.literal(c)

    def literal(self, c: str) -> str:
        if c in '"\\' or ord(c) < 0x20:
            self.unsupported(f"the character {c!r}, which a JSON string escapes")
        return json.dumps(c)

    def escape(self, in_class: bool) -> str:
        if self.pos >= len(self.t):
            raise ValueError("JSON schema pattern: trailing backslash")
        c = self.t[self.pos]
        self.pos += 1
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c] if in_class else "[" + _CLASS_ESCAPES[c] + "]"
        if c in "DWS":
            if in_class:
                self.unsupported(f"\\{c} inside a class")
            return "[^" + _CLASS_ESCAPES[c.lower()] + '"\\\\]'
        if c.isalnum():
            self.unsupported(f"the escape \\{c}")
        if in_class:
            return ("\\" + c) if c in "]\\-^" else c
        return self.literal(c)

    def char_class(self) -> str:
        out = "["
        if self.t.startswith("^", self.pos):
            out += "^"
            self.pos += 1
        while self.pos < len(self.t) and self.t[self.pos] != "]":
            c = self.t[self.pos]
            self.pos += 1
            if c == "\\":
                out += self.escape(in_class=True)
            elif c in '"' or ord(c) < 0x20:
                self.unsupported(f"the character {c!r}, which a JSON string escapes")
            else:
                out += c
        if self.pos >= len(self.t):
            raise ValueError("JSON schema pattern: unterminated character class")
        self.pos += 1
        # a negated class must not let the quote, the backslash or control characters in
        return out + (r'"\\\x00-\x1F]' if out.startswith("[^") else "]")


def _pattern_to_gbnf(pattern: str) -> str:
    return _PatternParser(pattern).parse()


def _integer_bound(schema: dict, inclusive: str, exclusive: str, step: int) -> Optional[int]:
    """The tightest integer bound the schema gives on one side, or None."""
    bounds = []
    if inclusive in schema:
        v = schema[inclusive]
        bounds.append(math.ceil(v) if step > 0 else math.floor(v))
    if exclusive in schema:
        v = schema[exclusive]
        bounds.append(math.floor(v) + 1 if step > 0 else math.ceil(v) - 1)
    if not bounds:
        return None
    return max(bounds) if step > 0 else min(bounds)


def _same_length(a: str, b: str) -> List[str]:
    """GBNF sequences spelling every decimal from a to b, strings of one length (a <= b)."""
    if a == b:
        return [" ".join(f'"{d}"' for d in a)]
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    if a[1:] == "0" * (len(a) - 1) and b[1:] == "9" * (len(b) - 1):  # whole decades
        return [f"[{a[0]}-{b[0]}]" + " [0-9]" * (len(a) - 1)]
    if a[0] == b[0]:
        return [f'"{a[0]}" {p}' for p in _same_length(a[1:], b[1:])]
    n = len(a) - 1
    out = [f'"{a[0]}" {p}' for p in _same_length(a[1:], "9" * n)]
    if int(a[0]) + 1 <= int(b[0]) - 1:
        out.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}]" + " [0-9]" * n)
    return out + [f'"{b[0]}" {p}' for p in _same_length("0" * n, b[1:])]


MAX_INT_DIGITS = 16  # as the integer primitive: at most 16 digits


def _natural_range(a: int, b: Optional[int]) -> List[str]:
    """Every integer in [a, b] (b None: no upper bound), a >= 0, without leading zeros."""
    out, top = [], 10 ** MAX_INT_DIGITS - 1
    b = top if b is None else b
    for digits in range(len(str(a)), len(str(b)) + 1):
        lo = max(a, 10 ** (digits - 1) if digits > 1 else 0)
        hi = min(b, 10 ** digits - 1)
        if lo <= hi:
            out += _same_length(str(lo), str(hi))
    return out


def _integer_alternatives(lo: Optional[int], hi: Optional[int]) -> List[str]:
    """GBNF alternatives for the integers in [lo, hi], either side open when None."""
    out = []
    if lo is None or lo < 0:  # the negatives: "-" and their magnitudes
        least = 1 if hi is None or hi >= 0 else -hi
        out += [f'"-" ({p})' for p in _natural_range(least, None if lo is None else -lo)]
    if hi is None or hi >= 0:
        out += _natural_range(max(lo, 0) if lo is not None else 0, hi)
    return out


def json_schema_to_gbnf(schema) -> str:
    """A GBNF grammar whose sentences are JSON documents valid under `schema` (a subset of JSON
    Schema: types, properties/required/additionalProperties, items/minItems/maxItems,
    minLength/maxLength, ^...$ patterns (_PatternParser), integer minimum/maximum, enum, const,
    anyOf/oneOf, local $ref; NotImplementedError for the rest, such as lookaround and the bounds of
    non-integer numbers)."""
    conv = _SchemaConverter(schema)
    root = conv.visit(schema, "root-value")
    lines = [f"root ::= {root}"] + [f"{name} ::= {body}" for name, body in conv.rules.items()]
    return "\n".join(lines) + "\n"
