"""The merging both llama.cpp tokenizers (byte-level BPE and SentencePiece) run: a priority
queue over adjacent symbols, and a cache of the ids of words already encoded.
"""
from __future__ import annotations

import heapq


def merge_pairs(symbols: list, priority) -> list:
    """Merge adjacent symbols until no pair has a priority; smallest key first, leftmost on ties.

    This is the priority queue both llama.cpp tokenizers run: `priority(left, right)` gives the
    key of merging two neighbours (or None if they do not merge). Queue entries go stale when a
    side is merged away or grows; they are recognised by their merged text and skipped.
    """
    n = len(symbols)
    nxt = [*range(1, n), -1]
    prv = list(range(-1, n - 1))
    queue: list = []

    def push(left: int, right: int) -> None:
        key = priority(symbols[left], symbols[right])
        if key is not None:
            heapq.heappush(queue, (key, left, right, symbols[left] + symbols[right]))

    for i in range(n - 1):
        push(i, i + 1)
    while queue:
        _, left, right, merged = heapq.heappop(queue)
        if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != merged:
            continue
        symbols[left], symbols[right] = merged, symbols[right][:0]  # "" or b""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        if prv[left] >= 0:
            push(prv[left], left)
        if after >= 0:
            push(left, after)
    return [s for s in symbols if s]


_CACHE_LIMIT = 1 << 18  # words; the cache starts over when full


def encode_words(words: list, cache: dict, encode_word) -> list[int]:
    """Concatenated ids of the words, each encoded once: real text repeats its words."""
    out: list[int] = []
    for word in words:
        ids = cache.get(word)
        if ids is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            ids = cache[word] = encode_word(word)
        out.extend(ids)
    return out
