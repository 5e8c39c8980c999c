"""Saved sequence states and the prompt caches, with llama-cpp-python's names.

A LlamaState holds what resumes a sequence: the native KV cache of its positions (bytes), the
token ids, the logits rows in use and the seed. LlamaRAMCache maps token sequences to states,
finds the one sharing the longest prefix with a new prompt, and drops the least recently used
states past its capacity; LlamaDiskCache does the same in a folder that outlives the process,
through the diskcache package (as llama-cpp-python's does: a well-kept SQLite-backed store, not
worth writing again).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np


class LlamaState:
    def __init__(self, input_ids: np.ndarray, scores: np.ndarray, n_tokens: int, llama_state: bytes,
                 llama_state_size: int, seed: int):
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed


def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share (lists, tuples or arrays), compared in one numpy pass."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


class BaseLlamaCache(ABC):
    def __init__(self, capacity_bytes: int = (2 << 30)):
        self.capacity_bytes = capacity_bytes

    @property
    @abstractmethod
    def cache_size(self) -> int: ...

    @abstractmethod
    def __getitem__(self, key: Sequence[int]) -> LlamaState: ...

    @abstractmethod
    def __contains__(self, key: Sequence[int]) -> bool: ...

    @abstractmethod
    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None: ...


class _PrefixCache(BaseLlamaCache):
    """What both caches share: the stored key sharing the longest prefix with a new one."""

    def _stored_keys(self) -> Iterable[Tuple[int, ...]]:
        raise NotImplementedError

    def _longest_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        best, best_len = None, 0
        for k in self._stored_keys():
            n = longest_token_prefix(k, key)
            if n > best_len:
                best, best_len = k, n
        return best

    def _found(self, key: Sequence[int]) -> Tuple[int, ...]:
        found = self._longest_prefix_key(tuple(key))
        if found is None:
            raise KeyError("no cached state shares a prefix with these tokens")
        return found

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._longest_prefix_key(tuple(key)) is not None


class LlamaRAMCache(_PrefixCache):
    """States in memory, least recently used first out."""

    def __init__(self, capacity_bytes: int = (2 << 30)):
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Tuple[int, ...], LlamaState]" = OrderedDict()

    @property
    def cache_size(self) -> int:
        return sum(s.llama_state_size for s in self.cache_state.values())

    def _stored_keys(self) -> Iterable[Tuple[int, ...]]:
        return self.cache_state

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        found = self._found(key)
        self.cache_state.move_to_end(found)
        return self.cache_state[found]

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        self.cache_state.pop(key, None)
        self.cache_state[key] = value
        while self.cache_state and self.cache_size > self.capacity_bytes:
            self.cache_state.popitem(last=False)


class LlamaDiskCache(_PrefixCache):
    """States pickled in a diskcache.Cache folder, least recently used first out. Needs the
    diskcache package (pip install diskcache)."""

    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = (2 << 30)):
        super().__init__(capacity_bytes)
        try:
            import diskcache
        except ImportError as exc:
            raise ImportError("LlamaDiskCache needs the diskcache package: pip install diskcache") from exc
        self.cache = diskcache.Cache(cache_dir)

    @property
    def cache_size(self) -> int:
        return int(self.cache.volume())

    def _stored_keys(self) -> Iterable[Tuple[int, ...]]:
        return iter(self.cache)  # in insertion order: the oldest first

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        found = self._found(key)
        value = self.cache.pop(found)
        self.cache[found] = value  # stored again: now the most recently used
        return value

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        self.cache.pop(key, None)
        self.cache[key] = value
        while len(self.cache) > 1 and self.cache_size > self.capacity_bytes:
            del self.cache[next(iter(self.cache))]  # the oldest first


LlamaCache = LlamaRAMCache
