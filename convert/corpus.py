"""Calibration and held-out text: a fixed split of CPython's `pydoc_data.topics`, or a user file.

`pydoc_data.topics.topics` maps ~79 help-topic names to their text (~113k SmolLM2 tokens).
In sorted-key order, the first CALIBRATION_SHARE of the entries are the calibration split (the
converter profiles and trains on them) and the rest are held out (bench/perplexity.py measures
on them); the converter never reads the held-out entries, so bench numbers are not flattered.

    calibration_entries() / heldout_entries()   [(key, text)] in sorted-key order
    calibration_text() / heldout_text()         the entries joined by blank lines
    token_stream(encode, entries, n_tokens)     token ids of the entries, interleaved so a
                                                short stream still spans many topics
    chunk(tokens, n_ctx, bos)                   fixed-length chunks for the forward pass
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

CALIBRATION_SHARE = 0.7
TOPICS_NAME = "pydoc_data.topics"
SEPARATOR = "\n\n"


def _topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return topics


def _split() -> tuple[list[str], list[str]]:
    keys = sorted(_topics())
    n_cal = int(len(keys) * CALIBRATION_SHARE)
    return keys[:n_cal], keys[n_cal:]


def calibration_keys() -> list[str]:
    return _split()[0]


def heldout_keys() -> list[str]:
    return _split()[1]


def calibration_entries() -> list[tuple[str, str]]:
    topics = _topics()
    return [(k, topics[k]) for k in calibration_keys()]


def heldout_entries() -> list[tuple[str, str]]:
    topics = _topics()
    return [(k, topics[k]) for k in heldout_keys()]


def calibration_text() -> str:
    return SEPARATOR.join(text for _, text in calibration_entries())


def heldout_text() -> str:
    return SEPARATOR.join(text for _, text in heldout_entries())


def file_entries(path: str | Path) -> list[tuple[str, str]]:
    """A user corpus: paragraphs (blank-line separated) become the entries."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    paragraphs = [p for p in text.split(SEPARATOR) if p.strip()]
    if not paragraphs:
        raise ValueError(f"corpus file {path} has no text")
    return [(f"{Path(path).name}#{i}", p) for i, p in enumerate(paragraphs)]


def corpus_entries(corpus: str | Path | None) -> tuple[str, list[tuple[str, str]]]:
    """(name recorded in the output's metadata, entries) for --corpus FILE or the default split."""
    if corpus is None:
        return f"{TOPICS_NAME}[calibration {CALIBRATION_SHARE:.0%}]", calibration_entries()
    return Path(corpus).name, file_entries(corpus)


def token_stream(encode: Callable[[bytes], list[int]], entries: Sequence[tuple[str, str]],
                 n_tokens: int | None = None, piece_tokens: int = 1024) -> np.ndarray:
    """Token ids of `entries` (each encoded on its own, no BOS), cut into pieces of piece_tokens
    and interleaved round-robin across entries, stopping at n_tokens: a short calibration stream
    then samples every topic instead of only the first few in key order. Deterministic."""
    pieces_per_entry = []
    for _, text in entries:
        ids = encode(text.encode("utf-8"))
        pieces_per_entry.append([ids[i:i + piece_tokens] for i in range(0, len(ids), piece_tokens)])
    out: list[int] = []
    rank = 0
    while n_tokens is None or len(out) < n_tokens:
        took = False
        for pieces in pieces_per_entry:
            if rank < len(pieces):
                out += pieces[rank]
                took = True
        if not took:
            break
        rank += 1
    if n_tokens is not None:
        out = out[:n_tokens]
    return np.asarray(out, dtype=np.int32)


def chunk(tokens: np.ndarray, n_ctx: int, bos: int | None = None) -> list[np.ndarray]:
    """Consecutive chunks of n_ctx tokens (a trailing partial chunk is dropped unless it is the
    only one); with `bos`, each chunk starts with it and carries n_ctx - 1 text tokens."""
    step = n_ctx - (bos is not None)
    if step <= 0:
        raise ValueError(f"n_ctx {n_ctx} is too small")
    starts = range(0, max(len(tokens) - step + 1, 1), step)
    chunks = []
    for s in starts:
        piece = tokens[s:s + step]
        if bos is not None:
            piece = np.concatenate([np.asarray([bos], np.int32), piece])
        if len(piece) >= 2:
            chunks.append(np.ascontiguousarray(piece, dtype=np.int32))
    return chunks
