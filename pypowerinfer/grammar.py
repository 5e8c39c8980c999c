"""Grammar-constrained sampling: llama.cpp's GBNF, parsed here and run as a pushdown matcher over
Unicode code points (JSON Schema is translated to GBNF in json_schema.py).

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
import re
import weakref
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .json_schema import JSON_GBNF, json_schema_to_gbnf

# JSON_GBNF and json_schema_to_gbnf stay importable here: llama_cpp.llama_grammar's names
__all__ = ["GrammarError", "JSON_GBNF", "LlamaGrammar", "json_schema_to_gbnf", "parse_gbnf"]

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
