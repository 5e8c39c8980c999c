"""Assemble llama-cpp-python's completion dicts from a token stream.

`run_completion` drives a token generator (`Llama`'s) and yields, for stream=True, chunks whose
texts never split a UTF-8 character or show part of a stop string, then a final chunk with the
finish_reason; for stream=False, one full response with usage.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Protocol, Sequence

import numpy as np

from .sampling import logits_to_logprobs, top_logprobs


class CompletionModel(Protocol):
    """What a completion reads of its `Llama` (described here so that this module, which llama.py
    imports, does not import llama.py)."""

    tokenizer_: Any  # tokenizer.Tokenizer: is_eog
    cache: Any  # state.BaseLlamaCache or None
    scores: np.ndarray

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes: ...

    def token_bos(self) -> int: ...

    def save_state(self) -> Any: ...


def utf8_complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        if byte & 0x80 == 0:  # ASCII
            return len(data)
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return len(data) if back >= need else len(data) - back
    return len(data)


def stop_holdback(text: bytes, stops: list[bytes]) -> int:
    """Bytes at the end of `text` that could be the start of a stop sequence."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


def find_stop(text: bytes, stops: list[bytes]) -> Optional[int]:
    """Index of the earliest stop sequence in `text`, or None."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


@dataclass
class CompletionRequest:
    prompt_tokens: list[int]
    prompt_text: str
    max_tokens: int
    stops: list[bytes]
    stream: bool
    echo: bool
    logprobs: Optional[int]
    suffix: Optional[str]
    model_name: str


class _Logprobs:
    """Builds the OpenAI-style logprobs dict for a run of tokens."""

    def __init__(self, llm: CompletionModel, n_top: int):
        self.llm = llm
        self.n_top = n_top

    def piece(self, token: int) -> str:
        return self.llm.detokenize([token]).decode("utf-8", errors="ignore")

    def entry(self, token: int, logits_row) -> tuple[str, float, dict[str, float]]:
        logprobs = logits_to_logprobs(logits_row)
        ids, values = top_logprobs(logprobs, self.n_top)
        token_str = self.piece(token)
        top_dict = {self.piece(int(i)): float(v) for i, v in zip(ids, values)}
        top_dict[token_str] = float(logprobs[token])
        return token_str, float(logprobs[token]), top_dict

    def build(self, tokens: list[int], first_position: int, text_offset: int, null_first: bool) -> dict:
        """Logprobs of tokens[i], predicted by the logits at position first_position + i - 1."""
        out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        offset = text_offset
        for i, token in enumerate(tokens):
            if token == self.llm.token_bos():
                continue
            pos = first_position + i - 1
            if pos < 0 or (null_first and i == 0):
                token_str, lp, top = self.piece(token), None, None
            else:
                token_str, lp, top = self.entry(token, self.llm.scores[pos])
            out["tokens"].append(token_str)
            out["text_offset"].append(offset)
            out["token_logprobs"].append(lp)
            out["top_logprobs"].append(top)
            offset += len(token_str)
        return out


def _chunk(cid: str, created: int, model: str, text: str, logprobs, finish_reason) -> dict:
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}]}


def run_completion(llm: CompletionModel, req: CompletionRequest,
                   generate: Callable[[List[int]], Iterator[int]]) -> Iterator[dict]:
    """The response (or chunks) of the tokens generate(prompt_tokens) samples."""
    cid, created = f"cmpl-{uuid.uuid4()}", int(time.time())
    prompt_tokens = req.prompt_tokens
    completion: list[int] = []
    text = b""
    emitted = 0  # bytes of `text` already streamed
    emitted_tokens = 0
    finish_reason = "length"
    lp = _Logprobs(llm, req.logprobs) if req.logprobs is not None else None

    def stream_logprobs(upto: int):
        nonlocal emitted_tokens
        if lp is None:
            return None
        out = lp.build(completion[emitted_tokens:upto], len(prompt_tokens) + emitted_tokens,
                       len(req.prompt_text) + len(text[:emitted].decode("utf-8", "ignore")), False)
        emitted_tokens = upto
        return out

    if req.max_tokens > 0:
        for token in generate(prompt_tokens):
            if llm.tokenizer_.is_eog(token):
                finish_reason = "stop"
                break
            completion.append(token)
            text = llm.detokenize(completion, prev_tokens=prompt_tokens)
            stop_at = find_stop(text, req.stops)
            if stop_at is not None:
                text = text[:stop_at]
                finish_reason = "stop"
                break
            if req.stream:
                safe = utf8_complete_prefix(text[: len(text) - stop_holdback(text, req.stops)])
                if safe > emitted:
                    piece = text[emitted:safe].decode("utf-8", errors="ignore")
                    emitted = safe
                    yield _chunk(cid, created, req.model_name, piece, stream_logprobs(len(completion)), None)
            if len(completion) >= req.max_tokens:
                break

    if llm.cache is not None:
        llm.cache[list(prompt_tokens) + completion] = llm.save_state()

    if req.stream:
        if len(text) > emitted:
            piece = text[emitted:].decode("utf-8", errors="ignore")
            emitted = len(text)
            yield _chunk(cid, created, req.model_name, piece, stream_logprobs(len(completion)), None)
        yield _chunk(cid, created, req.model_name, "", None, finish_reason)
        return

    text_str = text.decode("utf-8", errors="ignore")
    if req.echo:
        text_str = req.prompt_text + text_str
    if req.suffix is not None:
        text_str += req.suffix
    logprobs = None
    if lp is not None:
        if req.echo:
            all_tokens = prompt_tokens[1:] if prompt_tokens[:1] == [llm.token_bos()] else list(prompt_tokens)
            first = len(prompt_tokens) - len(all_tokens)
            logprobs = lp.build(all_tokens + completion, first, 0, True)
        else:
            logprobs = lp.build(completion, len(prompt_tokens), len(req.prompt_text), False)
    response = _chunk(cid, created, req.model_name, text_str, logprobs, finish_reason)
    response["usage"] = {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(completion),
                         "total_tokens": len(prompt_tokens) + len(completion)}
    yield response
