"""How the Python modules lean on each other: no import cycle among them (scripts/cycles.py), and
BatchEngine builds on the shared completion and generation modules, reading only Llama's public
names."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cycles_module():
    spec = importlib.util.spec_from_file_location("cycles_under_test", ROOT / "scripts" / "cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_python_module_is_in_a_cycle():
    cycles = _cycles_module()
    found = cycles.cycles(cycles.py_edges(ROOT))
    assert found == [], found


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
