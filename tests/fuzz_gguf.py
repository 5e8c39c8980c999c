"""Fuzz the GGUF loader and the tokenizer: mutated files must give a Python exception (or load
cleanly), never a crash or a hang; tokenizing arbitrary text must round-trip.

    python tests/fuzz_gguf.py [--count 10000] [--seed 0] [--workdir DIR]

Mutations of small synthetic models (llama, a PWRI-magic copy of it, and phi3, opt and falcon,
whose loaders bind fused tensors and learned positions), weighted toward the header:
truncation at a random byte; random bytes flipped; a count, dimension, type, offset, string
length or array length of a known field overwritten with an edge value (0, 1, -1, 2^31, 2^32,
2^63, ...); a random run of bytes zeroed or duplicated. Every file is loaded with the native
loader (and, when it loads, evaluated for one token). Prints the tally; exit status 1 if any
mutation raised something other than ValueError, OSError, MemoryError or NotImplementedError.
A crash kills the process, so the caller sees it; a hang is the caller's timeout.
"""
from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synthetic import gguf_layout, write_llama_gguf  # noqa: E402

EDGES = [0, 1, 2, 3, 31, 32, 255, 256, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 32, (1 << 63) - 1, 1 << 63,
         (1 << 64) - 1]
EXPECTED = (ValueError, OSError, MemoryError, NotImplementedError)


def field_positions(path) -> list[tuple[int, str]]:
    """(offset, struct format) of every count, length, type and offset in the file's header."""
    lay = gguf_layout(path)
    spots = [(8, "Q"), (16, "Q")]  # tensor and key counts
    for kv in lay.kvs:
        spots += [(kv.start, "Q"), (kv.type_at, "I"), (kv.type_at + 4, "Q"), (kv.type_at + 8, "Q")]
    for t in lay.tensors:
        spots += [(t.n_dims_at, "I"), (t.type_at, "I"), (t.offset_at, "Q")]
        spots += [(t.n_dims_at + 4 + 8 * i, "Q") for i in range(len(t.ne))]
    return spots


def mutate(buf: bytes, spots, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "field", "field", "field", "zero_run", "dup_run"])
    out = bytearray(buf)
    if kind == "truncate":
        return kind, bytes(out[: rng.randrange(len(out))])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(min(len(out), 4096)) if rng.random() < 0.8 else rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
        return kind, bytes(out)
    if kind == "field":
        at, fmt = rng.choice(spots)
        value = rng.choice(EDGES) & (0xFFFF_FFFF if fmt == "I" else (1 << 64) - 1)
        if at + struct.calcsize(fmt) <= len(out):
            struct.pack_into("<" + fmt, out, at, value)
        return kind, bytes(out)
    at = rng.randrange(len(out))
    n = rng.randint(1, 64)
    if kind == "zero_run":
        out[at:at + n] = bytes(len(out[at:at + n]))
        return kind, bytes(out)
    return kind, bytes(out[:at] + out[at:at + n] + out[at:])  # dup_run


def load_one(path: str) -> str:
    from pypowerinfer.model import NativeContext, NativeModel

    try:
        model = NativeModel(path)
    except EXPECTED as exc:
        return type(exc).__name__
    try:
        ctx = NativeContext(model, n_ctx=16, n_batch=16, n_threads=1, n_threads_batch=1, logits_all=False)
        try:
            import numpy as np
            ctx.decode(np.array([1], dtype=np.int32), 0)
        finally:
            ctx.close()
        return "loaded"
    except EXPECTED as exc:
        return "ctx " + type(exc).__name__
    finally:
        model.close()


def fuzz_tokenizer(rng: random.Random, count: int) -> int:
    """Random text through a synthetic model's tokenizer: decode(encode(x)) == x. Returns failures."""
    from pypowerinfer.model import NativeModel
    from pypowerinfer.tokenizer import Tokenizer

    path = os.path.join(tempfile.mkdtemp(), "tok.gguf")
    write_llama_gguf(path)
    model = NativeModel(path, vocab_only=True)
    tok = Tokenizer(model.metadata())
    model.close()
    alphabet = "ab c\n\t.,!?-_0123456789éü€日本語🙂\u0000\u200b"
    failures = 0
    for _ in range(count):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if tok.decode(tok.encode(text.encode("utf-8"), add_bos=False)) != text.encode("utf-8"):
            failures += 1
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="fuzz-gguf-"))
    work.mkdir(parents=True, exist_ok=True)
    bases = []  # (bytes, the header fields to mutate) of each model mutated in turn
    for arch in ("llama", "phi3", "opt", "falcon"):
        good = write_llama_gguf(work / f"good-{arch}.gguf", n_layer=1, arch=arch,
                                **({"n_head_kv": 4} if arch == "opt" else {}))
        bases.append((Path(good).read_bytes(), field_positions(good)))
        if arch == "llama":
            bases.append((b"PWRI" + bases[0][0][4:], bases[0][1]))
    tally: Counter = Counter()
    unexpected = []
    t0 = time.perf_counter()
    target = work / "case.gguf"
    for i in range(args.count):
        base, spots = bases[i % len(bases)]
        kind, data = mutate(base, spots, rng)
        target.write_bytes(data)
        try:
            outcome = load_one(str(target))
        except Exception as exc:  # anything but the documented exception types
            outcome = "UNEXPECTED " + type(exc).__name__
            unexpected.append((i, kind, repr(exc)))
            (work / f"unexpected-{i}.gguf").write_bytes(data)
        tally[(kind, outcome)] += 1
    seconds = time.perf_counter() - t0
    tok_failures = fuzz_tokenizer(rng, max(100, args.count // 10))
    print(f"{args.count} mutated files in {seconds:.1f} s ({args.count / seconds:.0f}/s), seed {args.seed}")
    for (kind, outcome), n in sorted(tally.items()):
        print(f"  {kind:<9} {outcome:<24} {n}")
    print(f"tokenizer round trips: {max(100, args.count // 10)} texts, {tok_failures} failures")
    for case in unexpected[:10]:
        print("unexpected:", *case)
    return 1 if unexpected or tok_failures else 0


if __name__ == "__main__":
    sys.exit(main())
