"""Measured guarantees: fuzzed loading, threads, memory that stays flat, limits."""
from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from synthetic import write_llama_gguf

from pypowerinfer import Llama

HERE = Path(__file__).resolve().parent


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> str:
    return write_llama_gguf(tmp_path_factory.mktemp("rel") / "small.gguf", n_layer=2)


def test_fuzzed_gguf_files_raise_python_exceptions(tmp_path):
    """A short run in CI (the long one: python tests/fuzz_gguf.py --count 100000)."""
    r = subprocess.run([sys.executable, str(HERE / "fuzz_gguf.py"), "--count", "3000", "--seed", "11",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr  # a crash is a negative return code, a hang the timeout
    assert "3000 mutated files" in r.stdout and "0 failures" in r.stdout


def test_one_llama_from_many_threads_is_serialized(smollm2_path):
    prompts = [f"List {i} fruits:" for i in range(8)]
    with Llama(str(smollm2_path), n_ctx=256, n_threads=2, verbose=False) as llm:
        alone = [llm(p, max_tokens=10, temperature=0.0)["choices"][0]["text"] for p in prompts]

        def streamed(p):  # streams interleave their chunks across threads if nothing serializes them
            return "".join(c["choices"][0]["text"] for c in llm(p, max_tokens=10, temperature=0.0, stream=True))

        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(streamed, prompts))
    assert together == alone


def test_a_second_completion_inside_a_stream_is_refused(smollm2):
    stream = smollm2("Hello", max_tokens=8, stream=True)
    next(stream)
    with pytest.raises(RuntimeError, match="still reading another completion"):
        smollm2("Again", max_tokens=2)
    stream.close()
    assert smollm2("Again", max_tokens=2)["choices"][0]["finish_reason"] in ("stop", "length")


def test_several_llamas_run_in_parallel_threads(smollm2_path):
    """Each thread's own model gives what it gives alone, and native work lets Python run."""
    prompts = ["The sun", "A river", "Old trees"]
    models = [Llama(str(smollm2_path), n_ctx=512, n_threads=1, verbose=False) for _ in prompts]
    try:
        alone = [m(p, max_tokens=12, temperature=0.0)["choices"][0]["text"] for m, p in zip(models, prompts)]
        for m in models:
            m.reset()
        with ThreadPoolExecutor(max_workers=3) as pool:
            together = list(pool.map(lambda mp: mp[0](mp[1], max_tokens=12, temperature=0.0)["choices"][0]["text"],
                                     zip(models, prompts)))
        assert together == alone
        # the GIL is released in pi_decode: this thread keeps counting while a long prompt runs
        tokens = models[0].tokenize(b"word " * 400)
        models[0].reset()
        done = threading.Event()
        worker = threading.Thread(target=lambda: (models[0].eval(tokens), done.set()))
        count = 0
        worker.start()
        while not done.is_set():
            count += 1
        worker.join()
        assert count > 10_000
    finally:
        for m in models:
            m.close()


def test_create_and_close_200_times_keeps_memory_flat(small):
    for _ in range(20):
        Llama(small, n_ctx=64, verbose=False).close()
    gc.collect()
    before = rss_bytes()
    for _ in range(200):
        llm = Llama(small, n_ctx=64, verbose=False)
        llm.eval([1, 2, 3])
        llm.close()
    gc.collect()
    grown = rss_bytes() - before
    assert grown < 8 << 20, f"resident memory grew by {grown / 2**20:.1f} MiB over 200 models"


def test_1000_completions_keep_memory_flat(small):
    with Llama(small, n_ctx=64, verbose=False) as llm:
        for i in range(50):
            llm("ab", max_tokens=2, seed=i)
        gc.collect()
        before = rss_bytes()
        for i in range(1000):
            llm("ab", max_tokens=2, seed=i)
        gc.collect()
        grown = rss_bytes() - before
    assert grown < 8 << 20, f"resident memory grew by {grown / 2**20:.1f} MiB over 1000 completions"


def test_max_tokens_beyond_the_context_stops_with_length(small):
    with Llama(small, n_ctx=16, verbose=False) as llm:
        out = llm("ab", max_tokens=100, temperature=0.0, seed=1)
        # every generated token fit in the context, and the reason says the context ended it
        assert out["usage"]["total_tokens"] <= 16
        assert out["choices"][0]["finish_reason"] in ("length", "stop")
        if out["usage"]["total_tokens"] == 16:
            assert out["choices"][0]["finish_reason"] == "length"


def test_kv_cache_too_large_fails_before_allocating(smollm2_path):
    before = rss_bytes()
    with pytest.raises(MemoryError, match="MiB"):  # ~360 GiB of KV cache
        Llama(str(smollm2_path), n_ctx=1 << 24, verbose=False)
    assert rss_bytes() - before < 64 << 20


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("cc") is None, reason="needs valgrind and cc")
def test_valgrind_memcheck_is_clean_on_a_short_generation(small, tmp_path):
    """A C driver (load, 8 decode steps, free) under memcheck: no invalid access, nothing leaked."""
    import pypowerinfer

    lib = os.environ.get("PI_LIBRARY") or str(Path(pypowerinfer.__file__).parent / "libpowerinfer.so")
    include = HERE.parent / "native" / "include"
    header = include if include.exists() else Path(pypowerinfer.__file__).parent
    driver = tmp_path / "driver"
    subprocess.run(["cc", "-O1", "-g", f"-I{header}", str(HERE / "native_driver.c"), "-o", str(driver), lib,
                    f"-Wl,-rpath,{Path(lib).parent}", "-lm"], check=True)
    r = subprocess.run(["valgrind", "--error-exitcode=9", "--leak-check=full", "--errors-for-leak-kinds=definite",
                        "--quiet", str(driver), small, "8"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "decoded 8" in r.stdout
