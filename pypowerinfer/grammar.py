"""Grammar-constrained sampling: llama.cpp's GBNF, parsed here and run as a pushdown matcher over
Unicode code points, and JSON Schema translated to GBNF.

A grammar is a list of rules; a rule is a list of alternatives; an alternative is a tuple of
elements, each a character set ("c", ranges, negated) or a rule reference ("r", index).
Repetition and groups become generated rules. The matcher's state is a set of stacks, each a
tuple of (rule, alternative, element) continuations whose top is a character set; a code point
moves every stack whose top accepts it. A token is allowed when all of its code points can be
taken in turn; the vocabulary is walked as a trie of bytes, and masks and moves are memoised per
state, so a state seen before (inside a JSON string, say) costs nothing the second time.

As in llama.cpp, a code point may be split across tokens (byte-level BPE spells many characters
that way): the matcher carries the bytes of an unfinished code point, and a token ending inside
one is allowed when some code point it could still complete fits the grammar. End-of-generation
tokens are allowed only where the grammar may end, with no code point unfinished.
"""
from __future__ import annotations

import json
import math
import re
import weakref
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

MAX_CODEPOINT = 0x10FFFF
MAX_STACK = 512  # deeper stacks mean unbounded (left) recursion

# ---- GBNF ----

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "/": "/",
            "f": "\f", "b": "\b", "'": "'"}
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class GrammarError(ValueError):
    pass


class _Parser:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
        self.names: Dict[str, int] = {}
        self.rules: List[Optional[List[tuple]]] = []

    def fail(self, message: str):
        line = self.text.count("\n", 0, self.pos) + 1
        raise GrammarError(f"grammar, line {line}: {message}")

    def rule_id(self, name: str) -> int:
        if name not in self.names:
            self.names[name] = len(self.rules)
            self.rules.append(None)
        return self.names[name]

    def new_rule(self, alternatives: List[tuple]) -> int:
        self.rules.append(alternatives)
        return len(self.rules) - 1

    def space(self, newlines: bool) -> None:
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            if c == "#":
                while self.pos < len(t) and t[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                return

    def at_rule_start(self) -> bool:
        """Is a `name ::=` ahead (ending the current rule)?"""
        m = _NAME.match(self.text, self.pos)
        return bool(m) and self.text.startswith("::=", _skip_blanks(self.text, m.end()))

    def parse(self) -> Tuple[List[List[tuple]], Dict[str, int]]:
        self.space(True)
        while self.pos < len(self.text):
            m = _NAME.match(self.text, self.pos)
            if not m:
                self.fail("expected a rule name")
            name = m.group()
            self.pos = _skip_blanks(self.text, m.end())
            if not self.text.startswith("::=", self.pos):
                self.fail(f"expected ::= after {name!r}")
            self.pos += 3
            rid = self.rule_id(name)
            if self.rules[rid] is not None:
                self.fail(f"rule {name!r} is defined twice")
            self.rules[rid] = self.alternatives(nested=False)
            self.space(True)
        for name, rid in self.names.items():
            if self.rules[rid] is None:
                raise GrammarError(f"grammar: rule {name!r} is used but not defined")
        if "root" not in self.names:
            raise GrammarError("grammar: no rule named 'root'")
        return self.rules, self.names

    def alternatives(self, nested: bool) -> List[tuple]:
        alts = [self.sequence(nested)]
        while True:
            save = self.pos
            self.space(True)  # an alternative may continue on the next line, starting with |
            if self.pos < len(self.text) and self.text[self.pos] == "|":
                self.pos += 1
                self.space(True)
                alts.append(self.sequence(nested))
            else:
                if not nested:
                    self.pos = save  # the newline ends the rule
                return alts

    def sequence(self, nested: bool) -> tuple:
        items: List[tuple] = []
        t = self.text
        while True:
            self.space(nested)
            if self.pos >= len(t) or t[self.pos] in "|)\r\n" or (not nested and self.at_rule_start()):
                return tuple(items)
            c = t[self.pos]
            if c == '"':
                self.pos += 1
                chars = []
                while self.pos < len(t) and t[self.pos] != '"':
                    chars.append(self.char())
                if self.pos >= len(t):
                    self.fail("unterminated string")
                self.pos += 1
                atom = [("c", ((ord(ch), ord(ch)),), False) for ch in chars]
            elif c == "[":
                atom = [self.char_class()]
            elif c == ".":
                self.pos += 1
                atom = [("c", ((0, MAX_CODEPOINT),), False)]
            elif c == "(":
                self.pos += 1
                self.space(True)
                inner = self.alternatives(nested=True)
                self.space(True)
                if self.pos >= len(t) or t[self.pos] != ")":
                    self.fail("expected )")
                self.pos += 1
                atom = [("r", self.new_rule(inner))]
            else:
                m = _NAME.match(t, self.pos)
                if not m:
                    self.fail(f"unexpected {c!r}")
                self.pos = m.end()
                atom = [("r", self.rule_id(m.group()))]
            items.extend(self.repeat(atom))

    def repeat(self, atom: List[tuple]) -> List[tuple]:
        """The atom with a following *, +, ? or {m,n} applied."""
        t = self.text
        if self.pos >= len(t) or t[self.pos] not in "*+?{":
            return atom
        op = t[self.pos]
        self.pos += 1
        if op == "{":
            m = re.compile(r"\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?}").match(t, self.pos)
            if not m:
                self.fail("expected {m}, {m,} or {m,n}")
            self.pos = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                self.fail(f"repetition {{{lo},{hi}}} is empty")
        else:
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[op]
        seq = tuple(atom)
        out = list(seq) * lo
        if hi is None:
            star = len(self.rules)
            self.rules.append([seq + (("r", star),), ()])  # star ::= atom star | empty
            out.append(("r", star))
        else:
            tail: Optional[int] = None  # optional copies, nested: (atom (atom ...)?)?
            for _ in range(hi - lo):
                tail = self.new_rule([seq + ((("r", tail),) if tail is not None else ()), ()])
            if tail is not None:
                out.append(("r", tail))
        return out

    def char(self) -> str:
        t = self.text
        c = t[self.pos]
        if c != "\\":
            self.pos += 1
            return c
        if self.pos + 1 >= len(t):
            self.fail("dangling escape")
        e = t[self.pos + 1]
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            digits = t[self.pos + 2: self.pos + 2 + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                self.fail(f"bad \\{e} escape")
            self.pos += 2 + n
            value = int(digits, 16)
            if value > MAX_CODEPOINT:
                self.fail("code point out of range")
            return chr(value)
        if e not in _ESCAPES:
            self.fail(f"unknown escape \\{e}")
        self.pos += 2
        return _ESCAPES[e]

    def char_class(self) -> tuple:
        t = self.text
        self.pos += 1
        negated = self.pos < len(t) and t[self.pos] == "^"
        self.pos += negated
        ranges = []
        while self.pos < len(t) and t[self.pos] != "]":
            lo = self.char()
            hi = lo
            if self.pos + 1 < len(t) and t[self.pos] == "-" and t[self.pos + 1] != "]":
                self.pos += 1
                hi = self.char()
            if ord(hi) < ord(lo):
                self.fail(f"character range {lo!r}-{hi!r} is empty")
            ranges.append((ord(lo), ord(hi)))
        if self.pos >= len(t):
            self.fail("unterminated character class")
        self.pos += 1
        return ("c", tuple(ranges), negated)


def _skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def parse_gbnf(text: str) -> Tuple[List[List[tuple]], int]:
    """(rules, index of root)."""
    rules, names = _Parser(text).parse()
    return rules, names["root"]


# ---- matching ----

def _accepts(element: tuple, cp: int) -> bool:
    _, ranges, negated = element
    inside = any(lo <= cp <= hi for lo, hi in ranges)
    return inside != negated


def _accepts_some(element: tuple, first: int, last: int) -> bool:
    """Does the character set take some code point in [first, last]?"""
    _, ranges, negated = element
    if not negated:
        return any(lo <= last and first <= hi for lo, hi in ranges)
    # negated: some code point of [first, last] lies outside every range
    cut = sorted((max(lo, first), min(hi, last)) for lo, hi in ranges if lo <= last and first <= hi)
    at = first
    for lo, hi in cut:
        if lo > at:
            return True
        at = max(at, hi + 1)
    return at <= last


# ---- UTF-8, a byte at a time ----
# A decoding state is None between code points, or (value so far, continuation bytes still to
# come, the smallest code point of that length): the last rejects overlong forms.

_LEAD = [(0xC2, 0xDF, 0x1F, 1, 0x80), (0xE0, 0xEF, 0x0F, 2, 0x800), (0xF0, 0xF4, 0x07, 3, 0x10000)]


def _utf8_step(partial, byte: int):
    """(code point or None, the next decoding state), or None when the byte cannot follow."""
    if partial is None:
        if byte < 0x80:
            return byte, None
        for lo, hi, mask, need, least in _LEAD:
            if lo <= byte <= hi:
                return None, (byte & mask, need, least)
        return None  # a continuation byte, or one UTF-8 never uses
    if not 0x80 <= byte <= 0xBF:
        return None
    value, need, least = partial
    value = value << 6 | (byte & 0x3F)
    if need > 1:
        return None, (value, need - 1, least)
    if value < least or 0xD800 <= value <= 0xDFFF or value > MAX_CODEPOINT:
        return None
    return value, None


def _completions(partial) -> Tuple[int, int]:
    """The code points an unfinished sequence may still become."""
    value, need, least = partial
    return max(value << 6 * need, least), min(((value + 1) << 6 * need) - 1, MAX_CODEPOINT)


class _Machine:
    """Moves over a parsed grammar, memoised; states are frozensets of stacks."""

    def __init__(self, rules: List[List[tuple]], root: int):
        self.rules = rules
        self.start = self._expand_all([((root, a, 0),) for a in range(len(rules[root]))])
        self._moves: Dict[Tuple[frozenset, int], frozenset] = {}

    def _expand_all(self, stacks) -> frozenset:
        out, seen, todo = set(), set(), list(stacks)
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if len(stack) > MAX_STACK:
                raise GrammarError("grammar recurses without consuming input (left recursion?)")
            if not stack:
                out.add(stack)  # the grammar may end here
                continue
            r, a, i = stack[-1]
            alt = self.rules[r][a]
            if i == len(alt):
                todo.append(stack[:-1])
                continue
            el = alt[i]
            if el[0] == "c":
                out.add(stack)
                continue
            rest = stack[:-1] + ((r, a, i + 1),)
            target = el[1]
            todo.extend(rest + ((target, b, 0),) for b in range(len(self.rules[target])))
        return frozenset(out)

    def move(self, state: frozenset, cp: int) -> frozenset:
        key = (state, cp)
        hit = self._moves.get(key)
        if hit is None:
            nxt = []
            for stack in state:
                if stack:
                    r, a, i = stack[-1]
                    if _accepts(self.rules[r][a][i], cp):
                        nxt.append(stack[:-1] + ((r, a, i + 1),))
            hit = self._expand_all(nxt) if nxt else frozenset()
            if len(self._moves) > 200_000:
                self._moves.clear()
            self._moves[key] = hit
        return hit

    @staticmethod
    def can_end(state: frozenset) -> bool:
        return () in state

    def can_take_some(self, state: frozenset, first: int, last: int) -> bool:
        """Can some code point in [first, last] move the state on?"""
        return any(stack and _accepts_some(self.rules[stack[-1][0]][stack[-1][1]][stack[-1][2]], first, last)
                   for stack in state)

    def step(self, state: frozenset, partial, byte: int):
        """(state, partial) after one byte of UTF-8, or None where it does not fit the grammar."""
        decoded = _utf8_step(partial, byte)
        if decoded is None:
            return None
        cp, partial = decoded
        if cp is not None:
            state = self.move(state, cp)
            if not state:
                return None
        return state, partial

    def take_bytes(self, state: frozenset, partial, data: bytes):
        """(state, partial) after the bytes, or None where they do not fit the grammar."""
        for byte in data:
            taken = self.step(state, partial, byte)
            if taken is None:
                return None
            state, partial = taken
        return state, partial


class _Trie:
    """The vocabulary by bytes: children[node] maps a byte to a node; ends[node] lists the tokens
    spelled by the path to node."""

    def __init__(self, pieces: Sequence[bytes]):
        self.children: List[Dict[int, int]] = [{}]
        self.ends: List[List[int]] = [[]]
        for token, piece in enumerate(pieces):
            if not piece:
                continue
            node = 0
            for byte in piece:
                nxt = self.children[node].get(byte)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][byte] = nxt
                    self.children.append({})
                    self.ends.append([])
                node = nxt
            self.ends[node].append(token)


# ---- the public grammar ----

class LlamaGrammar:
    """A GBNF grammar with its matching state; llama-cpp-python's constructors."""

    def __init__(self, *, _grammar: str, verbose: bool = True):
        self._grammar = _grammar
        self.rules, self.root = parse_gbnf(_grammar)
        self._machine = _Machine(self.rules, self.root)
        self._masks: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
        self.reset()

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_grammar=grammar, verbose=verbose)

    @classmethod
    def from_file(cls, file, verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            text = f.read()
        if not text:
            raise ValueError(f"grammar file {file} is empty")
        return cls.from_string(text, verbose)

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls.from_string(json_schema_to_gbnf(json.loads(json_schema)), verbose)

    def reset(self) -> None:
        self._state = self._machine.start
        self._partial = None  # the unfinished code point the last tokens ended in (UTF-8 above)

    def accepts_text(self, text: str) -> bool:
        """Does the whole of `text` parse (from the start state), ending where the grammar may end?"""
        state = self._machine.start
        for ch in text:
            state = self._machine.move(state, ord(ch))
            if not state:
                return False
        return _Machine.can_end(state)

    # -- sampling hooks (Llama.sample) --
    def allowed(self, tokenizer) -> np.ndarray:
        """Boolean [n_vocab]: the tokens the current state can take next."""
        key = (self._state, self._partial)
        mask = self._masks.get(key)
        if mask is not None:
            self._masks.move_to_end(key)
            return mask
        trie, eog = _vocabulary(tokenizer)
        mask = np.zeros(tokenizer.n_vocab, dtype=np.bool_)
        machine = self._machine
        todo = [(0, self._state, self._partial)]
        while todo:
            node, state, partial = todo.pop()
            for byte, child in trie.children[node].items():
                taken = machine.step(state, partial, byte)
                if taken is None:
                    continue
                nxt, nxt_partial = taken
                if nxt_partial is not None and not machine.can_take_some(nxt, *_completions(nxt_partial)):
                    continue
                if trie.ends[child]:
                    mask[trie.ends[child]] = True
                todo.append((child, nxt, nxt_partial))
        if _Machine.can_end(self._state) and self._partial is None:
            mask[eog] = True
        self._masks[key] = mask
        if len(self._masks) > 256:
            self._masks.popitem(last=False)
        return mask

    def accept_token(self, tokenizer, token: int) -> None:
        if tokenizer.is_eog(token):
            return
        taken = self._machine.take_bytes(self._state, self._partial, tokenizer.token_to_piece(token))
        if taken is None:
            raise ValueError(f"token {token} does not fit the grammar")
        self._state, self._partial = taken


_VOCABULARIES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _vocabulary(tokenizer) -> Tuple[_Trie, np.ndarray]:
    """The tokenizer's trie and end-of-generation ids, built once per tokenizer (and dropped with it)."""
    cached = _VOCABULARIES.get(tokenizer)
    if cached is None:
        pieces = [tokenizer.token_to_piece(i) for i in range(tokenizer.n_vocab)]
        eog = np.array([i for i in range(tokenizer.n_vocab) if tokenizer.is_eog(i)], dtype=np.int64)
        cached = _VOCABULARIES[tokenizer] = (_Trie(pieces), eog)
    return cached


# ---- JSON ----

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
