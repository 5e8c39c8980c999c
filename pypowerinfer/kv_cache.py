"""The KV cache's types, as llama-cpp-python's `type_k` / `type_v` take them: GGML type ids (or
their names), f16 by default, q8_0 and q4_0 to hold a context in about a half or a quarter of
the memory."""
from __future__ import annotations

from typing import Union

KV_CACHE_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # name -> GGML type id
_NAMES = {v: k for k, v in KV_CACHE_TYPES.items()}


def kv_cache_type(option: str, value: Union[int, str, None]) -> int:
    """The GGML type id that Llama(option=value) asks for; None is the default, f16."""
    if value is None:
        return KV_CACHE_TYPES["f16"]
    if isinstance(value, str) and value.lower() in KV_CACHE_TYPES:
        return KV_CACHE_TYPES[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and value in _NAMES:
        return int(value)
    supported = ", ".join(f"{name} ({tid})" for name, tid in KV_CACHE_TYPES.items())
    raise ValueError(f"Llama({option}={value!r}): the KV cache types are {supported}")


def kv_cache_type_name(type_id: int) -> str:
    return _NAMES[type_id]


def describe(n_bytes: int, type_k: int, type_v: int) -> str:
    """The load log's line: "KV cache: 12.0 MiB (K q8_0, V q8_0)"."""
    return f"KV cache: {n_bytes / 2**20:.1f} MiB (K {_NAMES[type_k]}, V {_NAMES[type_v]})"
