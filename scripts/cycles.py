"""Print the dependency cycles between the project's source units.

A unit is a C/C++/CUDA source and its same-named header (`forward.c` + `forward.h`), a lone
header, or a Python module of `pypowerinfer/` or `convert/`; tests, bench and scripts are left out.
An edge A -> B is: A includes B's header; A calls a function that B alone defines (a declaration
is no call, nor is a call through a struct member, `x.f(...)` or `x->f(...)`: that is how a vtable
is called, nor is a call of a function that A defines itself, or of a file-static one: a `static`
function, or any defined in a header, is seen only through an include, which is the edge); A imports
B, anywhere in the file (inside functions and `TYPE_CHECKING` blocks too).

    python scripts/cycles.py [ROOT]      # exit 0 always; one line per cycle, members sorted
"""
from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

C_SUFFIXES = {".c", ".h", ".cu", ".cuh", ".cpp", ".inc"}
HEADER_SUFFIXES = {".h", ".cuh", ".inc"}
C_DIRS = ("native",)
PY_DIRS = ("pypowerinfer", "convert")

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# a definition: a name and its parameter list at the start of a line, then a body
DEFINITION = re.compile(r"^([A-Za-z_][\w \t\*]*?)\b([A-Za-z_]\w*)\s*\(([^;{}]*)\)\s*\{", re.M)
STATIC = re.compile(r"\bstatic\b")
# a declaration names a function without calling it
PROTOTYPE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b[A-Za-z_]\w*\s*\([^;{}]*\)\s*;", re.M)
CALL = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "__attribute__", "_Static_assert",
            "static_assert", "alignof", "_Alignof", "decltype"}


def c_unit(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    return str(rel.with_suffix(""))


def strip_comments(text: str) -> str:
    return COMMENT.sub(" ", text)


def c_sources(root: Path):
    for top in C_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in C_SUFFIXES and path.is_file():
                yield path


def resolve_include(name: str, including: Path, root: Path) -> Path | None:
    for base in (including.parent, root / "native" / "src", root / "native" / "include"):
        candidate = (base / name).resolve()
        if candidate.is_file():
            return candidate
    return None


def c_edges(root: Path) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    texts: dict[Path, str] = {}
    defined_in: dict[str, set[str]] = defaultdict(set)  # the units that define a name for others to call
    local: dict[str, set[str]] = defaultdict(set)  # every name a unit defines
    for path in c_sources(root):
        text = strip_comments(path.read_text(errors="replace"))
        texts[path] = text
        unit = c_unit(path, root)
        edges[unit]  # every unit is a node
        for m in DEFINITION.finditer(text):
            if m.group(2) in KEYWORDS:
                continue
            local[unit].add(m.group(2))
            if path.suffix not in HEADER_SUFFIXES and not STATIC.search(m.group(1)):
                defined_in[m.group(2)].add(unit)
    for path, text in texts.items():
        unit = c_unit(path, root)
        for name in INCLUDE.findall(text):
            target = resolve_include(name, path, root.resolve())
            if target is not None:
                other = c_unit(target, root.resolve())
                if other != unit:
                    edges[unit].add(other)
        for name in set(CALL.findall(PROTOTYPE.sub(" ", STRING.sub('""', text)))):
            owners = defined_in.get(name, set())
            if len(owners) == 1 and name not in local[unit]:
                edges[unit].add(next(iter(owners)))
    return edges


def py_module(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def py_edges(root: Path) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    modules: dict[str, Path] = {}
    for top in PY_DIRS:
        for path in sorted((root / top).rglob("*.py")):
            modules[py_module(path, root)] = path
    for name, path in modules.items():
        edges[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                # the longest prefix that is one of our modules
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent)
    graph = {**c_edges(root), **py_edges(root)}
    found = cycles(graph)
    for component in found:
        print(f"cycle of {len(component)}: " + ", ".join(component))
    print(f"{len(found)} cycle(s) among {len(graph)} units")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
