"""llama-cpp-python's completion API over one sequence's generation, for `Llama` and `BatchEngine`.

`CompletionAPI` holds the public methods (create_completion, create_chat_completion, __call__):
their arguments become a `CompletionRequest`, which the class that inherits them generates
(`_run`: on Llama's own sequence, or among the batch's). `run_completion` turns the generated
tokens into the response: for stream=True, chunks whose texts never split a UTF-8 character or
show part of a stop string, then a final chunk with the finish_reason; for stream=False, one full
response with usage.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Union


from .chat import (chunks_to_chat, completion_to_chat, forced_tool, response_format_grammar, tool_call_chunks,
                   tool_call_to_chat)
from .generator import CompletionText, Sampling, StopRules
from .grammar import LlamaGrammar
from .sampling import (CHAT, COMPLETION, LogitsProcessorList, SamplingParams, StoppingCriteriaList, logits_to_logprobs,
                       top_logprobs)


class CompletionOutput(Protocol):
    """Where a completion's response is read from: the tokenizer, the logits rows by position
    (for logprobs) and the prompt cache (None, or state.BaseLlamaCache with save_state)."""

    tokenizer_: Any  # tokenizer.Tokenizer
    cache: Any
    scores: Any  # positions -> logits rows: an array, or a dict of the rows kept

    def save_state(self) -> Any: ...


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
    seed: Optional[int]  # None: the generator's own choice
    sampling: Sampling


class _Logprobs:
    """Builds the OpenAI-style logprobs dict for a run of tokens."""

    def __init__(self, out: CompletionOutput, n_top: int):
        self.out = out
        self.n_top = n_top

    def piece(self, token: int) -> str:
        return self.out.tokenizer_.decode([token]).decode("utf-8", errors="ignore")

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
            if token == self.out.tokenizer_.bos_id:
                continue
            pos = first_position + i - 1
            if pos < 0 or (null_first and i == 0):
                token_str, lp, top = self.piece(token), None, None
            else:
                token_str, lp, top = self.entry(token, self.out.scores[pos])
            out["tokens"].append(token_str)
            out["text_offset"].append(offset)
            out["token_logprobs"].append(lp)
            out["top_logprobs"].append(top)
            offset += len(token_str)
        return out


def _chunk(cid: str, created: int, model: str, text: str, logprobs, finish_reason) -> dict:
    return {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason}]}


def run_completion(out: CompletionOutput, req: CompletionRequest,
                   generate: Callable[[], Iterator[int]]) -> Iterator[dict]:
    """The response (or chunks) of the tokens generate() samples after the prompt."""
    cid, created = f"cmpl-{uuid.uuid4()}", int(time.time())
    prompt_tokens = req.prompt_tokens
    rules = StopRules(out.tokenizer_, req.max_tokens, req.stops)
    text = CompletionText(out.tokenizer_.decode, req.stops)
    completion = text.tokens
    emitted_tokens = 0
    finish_reason = "length"
    lp = _Logprobs(out, req.logprobs) if req.logprobs is not None else None

    def piece(upto: int) -> dict:
        """A chunk of the text up to byte `upto`, with the logprobs of the tokens not yet streamed."""
        nonlocal emitted_tokens
        chunk_text = text.take(upto)
        logprobs = None
        if lp is not None:  # text_offset counts the chunk's own text too
            logprobs = lp.build(completion[emitted_tokens:], len(prompt_tokens) + emitted_tokens,
                                len(req.prompt_text) + text.emitted_chars(), False)
            emitted_tokens = len(completion)
        return _chunk(cid, created, req.model_name, chunk_text, logprobs, None)

    if req.max_tokens > 0:
        tokens = generate()
        try:
            for token in tokens:
                if rules.ends_before(token) or text.add(token):  # an end-of-generation token, a stop string
                    finish_reason = "stop"
                    break
                if req.stream:
                    safe = text.streamable()
                    if safe > text.emitted:
                        yield piece(safe)
                if rules.full(len(completion)):
                    break
        finally:
            tokens.close()

    if out.cache is not None:
        out.cache[list(prompt_tokens) + completion] = out.save_state()

    if req.stream:
        if len(text.text) > text.emitted:
            yield piece(len(text.text))
        yield _chunk(cid, created, req.model_name, "", None, finish_reason)
        return

    text_str = text.text.decode("utf-8", errors="ignore")
    if req.echo:
        text_str = req.prompt_text + text_str
    if req.suffix is not None:
        text_str += req.suffix
    logprobs = None
    if lp is not None:
        if req.echo:
            bos = out.tokenizer_.bos_id
            all_tokens = prompt_tokens[1:] if prompt_tokens[:1] == [bos] else list(prompt_tokens)
            first = len(prompt_tokens) - len(all_tokens)
            logprobs = lp.build(all_tokens + completion, first, 0, True)
        else:
            logprobs = lp.build(completion, len(prompt_tokens), len(req.prompt_text), False)
    response = _chunk(cid, created, req.model_name, text_str, logprobs, finish_reason)
    response["usage"] = {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(completion),
                         "total_tokens": len(prompt_tokens) + len(completion)}
    yield response


class CompletionAPI:
    """llama-cpp-python's completion methods, shared by `Llama` and `BatchEngine`: the arguments
    become a CompletionRequest, which the inheriting class's `_run` generates. What these methods
    read of that class: `tokenizer_`, `last_n_tokens_size`, `model_path`, `_n_ctx` (a sequence's
    positions), `_logits_all` (whether logprobs can be given), `_require_decoder()` (raises when
    nothing can be generated) and `_chat_format()` (the chat formatter)."""

    def _run(self, req: CompletionRequest) -> Iterator[dict]:
        raise NotImplementedError

    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = COMPLETION.max_tokens,
                          temperature: float = COMPLETION.temperature, top_p: float = COMPLETION.top_p,
                          min_p: float = COMPLETION.min_p,
                          typical_p: float = COMPLETION.typical_p, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = [],
                          frequency_penalty: float = COMPLETION.frequency_penalty,
                          presence_penalty: float = COMPLETION.presence_penalty,
                          repeat_penalty: float = COMPLETION.repeat_penalty, top_k: int = COMPLETION.top_k,
                          stream: bool = False, seed: Optional[int] = None, tfs_z: float = COMPLETION.tfs_z,
                          mirostat_mode: int = COMPLETION.mirostat_mode, mirostat_tau: float = COMPLETION.mirostat_tau,
                          mirostat_eta: float = COMPLETION.mirostat_eta, model: Optional[str] = None,
                          stopping_criteria: Optional[StoppingCriteriaList] = None,
                          logits_processor: Optional[LogitsProcessorList] = None, grammar=None,
                          logit_bias: Optional[Dict[int, float]] = None):
        """Complete `prompt`; a dict, or an iterator of chunk dicts when stream=True."""
        params = SamplingParams.from_arguments(locals(), self.last_n_tokens_size)
        return self._complete(prompt, Sampling(params, logits_processor, stopping_criteria, grammar), suffix=suffix,
                              max_tokens=max_tokens, logprobs=logprobs, echo=echo, stop=stop, stream=stream,
                              seed=seed, model=model)

    def __call__(self, prompt: Union[str, List[int]], *args: Any, **kwargs: Any):
        return self.create_completion(prompt, *args, **kwargs)

    def _complete(self, prompt: Union[str, List[int]], sampling: Sampling, *, suffix: Optional[str],
                  max_tokens: Optional[int], logprobs: Optional[int], echo: bool,
                  stop: Optional[Union[str, List[str]]], stream: bool, seed: Optional[int], model: Optional[str]):
        self._require_decoder()
        tokenizer = self.tokenizer_
        if isinstance(prompt, str):
            prompt_text = prompt
            prompt_tokens = (tokenizer.encode(prompt.encode("utf-8"), add_bos=True, special=suffix is None)
                             if prompt else [])
        else:
            prompt_tokens, prompt_text = list(prompt), ""
        if not prompt_tokens:
            prompt_tokens = [tokenizer.bos_id]
        if len(prompt_tokens) >= self._n_ctx:
            raise ValueError(f"Requested tokens ({len(prompt_tokens)}) exceed context window of {self._n_ctx}")
        if logprobs is not None and not self._logits_all:
            raise ValueError("logprobs is not supported for models created with logits_all=False")
        room = self._n_ctx - len(prompt_tokens)
        max_tokens = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        req = CompletionRequest(
            prompt_tokens=prompt_tokens, prompt_text=prompt_text, max_tokens=max_tokens,
            stops=[s.encode("utf-8") for s in stops], stream=stream, echo=echo, logprobs=logprobs,
            suffix=suffix, model_name=model if model is not None else self.model_path, seed=seed, sampling=sampling,
        )
        chunks = self._run(req)
        if stream:
            return chunks
        try:
            return next(chunks)
        finally:
            chunks.close()

    def create_chat_completion(self, messages: List[Dict[str, Any]], functions: Optional[List[dict]] = None,
                               function_call=None, tools: Optional[List[dict]] = None, tool_choice=None,
                               temperature: float = CHAT.temperature, top_p: float = CHAT.top_p,
                               top_k: int = CHAT.top_k, min_p: float = CHAT.min_p, typical_p: float = CHAT.typical_p,
                               stream: bool = False, stop: Optional[Union[str, List[str]]] = [],
                               seed: Optional[int] = None, response_format: Optional[dict] = None,
                               max_tokens: Optional[int] = CHAT.max_tokens,
                               presence_penalty: float = CHAT.presence_penalty,
                               frequency_penalty: float = CHAT.frequency_penalty,
                               repeat_penalty: float = CHAT.repeat_penalty, tfs_z: float = CHAT.tfs_z,
                               mirostat_mode: int = CHAT.mirostat_mode, mirostat_tau: float = CHAT.mirostat_tau,
                               mirostat_eta: float = CHAT.mirostat_eta, model: Optional[str] = None,
                               logits_processor: Optional[LogitsProcessorList] = None, grammar=None,
                               logit_bias: Optional[Dict[int, float]] = None, logprobs: Optional[bool] = None,
                               top_logprobs: Optional[int] = None):
        """A chat completion of `messages` (a dict, or chat.completion.chunk dicts with stream=True)."""
        params = SamplingParams.from_arguments(locals(), self.last_n_tokens_size)
        if functions is not None and tools is None:  # the legacy form, as tools for the template
            tools = [{"type": "function", "function": f} for f in functions]
        grammar = response_format_grammar(response_format) or grammar
        if isinstance(function_call, dict) and "name" in function_call:
            tool_choice = {"type": "function", "function": {"name": function_call["name"]}}
        forced = forced_tool(tools, tool_choice)
        if forced is not None:
            grammar = LlamaGrammar.from_json_schema(json.dumps(forced["function"].get("parameters", {})))
        chat = self._chat_format()(messages=messages, functions=functions, function_call=function_call,
                                   tools=tools, tool_choice=tool_choice)
        prompt = self.tokenizer_.encode(chat.prompt.encode("utf-8"), add_bos=not chat.added_special, special=True)
        stops = ([stop] if isinstance(stop, str) else list(stop or [])) + chat.stop
        criteria = None
        if chat.stop_token_ids:
            ends = frozenset(chat.stop_token_ids)
            criteria = StoppingCriteriaList([lambda ids, logits: int(ids[-1]) in ends])
        out = self._complete(prompt, Sampling(params, logits_processor, criteria, grammar), suffix=None,
                             max_tokens=max_tokens, logprobs=top_logprobs if logprobs else None, echo=False,
                             stop=stops, stream=stream, seed=seed, model=model)
        if forced is not None:
            return tool_call_chunks(forced["function"]["name"], out) if stream else \
                tool_call_to_chat(forced["function"]["name"], out)
        return chunks_to_chat(out) if stream else completion_to_chat(out)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any):
        """create_chat_completion as the `openai` package's ChatCompletion / ChatCompletionChunk objects."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from None
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**chunk) for chunk in self.create_chat_completion(*args, **kwargs))
        return ChatCompletion(**self.create_chat_completion(*args, **kwargs))
