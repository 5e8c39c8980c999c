"""Chat prompts: the GGUF's Jinja2 template (sandboxed) or a built-in format, and the chat
completion dicts built from text completions, with llama-cpp-python 0.3.36's shapes.

A format turns messages into a `ChatPrompt`: the prompt text, the extra stop strings, whether
the text already carries its BOS (templates do; built-in formats do not, so the tokenizer adds
it), and the token ids that end a turn.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


@dataclass
class ChatPrompt:
    prompt: str
    stop: List[str] = field(default_factory=list)
    added_special: bool = False      # the text holds its own BOS: tokenize without adding one
    stop_token_ids: Sequence[int] = ()  # generation ends when one of these is sampled


# ---- the GGUF template ----

class _GenerationTag(jinja2.ext.Extension):
    """HuggingFace's `{% generation %}...{% endgeneration %}` marks training targets; render its body."""
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Optional[Tuple[str, str]] = None, sort_keys: bool = False) -> str:
    # Transformers' chat templates expect json.dumps, not Jinja2's HTML-safe tojson
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise ValueError(message)


class TemplateFormat:
    """A Jinja2 chat template, rendered in an immutable sandbox: a template can read what it is
    given but not reach Python objects' internals or mutate its inputs."""

    def __init__(self, template: str, bos_token: str, eos_token: str, eos_id: Optional[int],
                 add_generation_prompt: bool = True):
        env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
                                            extensions=[_GenerationTag, jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(template)
        except jinja2.TemplateError as exc:
            raise ValueError(f"the model's chat template does not parse: {exc}") from None
        self.bos_token, self.eos_token, self.eos_id = bos_token, eos_token, eos_id
        self.add_generation_prompt = add_generation_prompt

    def __call__(self, messages: List[dict], **kwargs: Any) -> ChatPrompt:
        prompt = self._template.render(
            messages=messages, bos_token=self.bos_token, eos_token=self.eos_token, raise_exception=_raise,
            add_generation_prompt=self.add_generation_prompt,
            strftime_now=lambda fmt: datetime.now().strftime(fmt), **kwargs)
        return ChatPrompt(prompt, stop=[self.eos_token], added_special=True,
                          stop_token_ids=() if self.eos_id is None else (self.eos_id,))


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: Dict[str, Any], add_generation_prompt: bool = True):
    """A formatter from a HuggingFace tokenizer_config.json dict (chat_template, bos_token,
    eos_token), as llama-cpp-python builds it: with add_generation_prompt an empty assistant
    message is appended rather than the template's flag set; stops at eos and bos."""
    template, bos, eos = (tokenizer_config.get(k) for k in ("chat_template", "bos_token", "eos_token"))
    if not all(isinstance(v, str) for v in (template, bos, eos)):
        raise ValueError("tokenizer_config needs string chat_template, bos_token and eos_token")
    render = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)

    def fmt(messages: List[dict], **kwargs: Any) -> ChatPrompt:
        if add_generation_prompt:
            messages = [*messages, {"role": "assistant", "content": ""}]
        return ChatPrompt(render.render(messages=messages, bos_token=bos, eos_token=eos, **kwargs), stop=[eos, bos],
                          added_special=True)
    return fmt


# ---- built-in formats ----

def _system(messages: List[dict]) -> str:
    """The first system message's text, or ""."""
    return next((m.get("content") or "" for m in messages if m["role"] == "system"), "")


def _turns(messages: List[dict], roles: Dict[str, str]) -> List[Tuple[str, Optional[str]]]:
    """(role label, text) of the messages whose role has a label; non-text content becomes None."""
    return [(roles[m["role"]], m["content"] if isinstance(m.get("content"), str) else None)
            for m in messages if m["role"] in roles]


def _open_turn(turns, roles):
    return turns + [(roles["assistant"], None)]


def _chatml_like(system_header: str, roles: Dict[str, str], end: str, stop: Optional[str],
                 default_system: str = "") -> Callable[[List[dict]], ChatPrompt]:
    """<header>text<end>\\n per turn, the system turn first when there is one, then an open
    assistant turn (chatml, qwen, zephyr)."""
    def fmt(messages: List[dict], **_: Any) -> ChatPrompt:
        system = system_header + (_system(messages) or default_system)
        out = system + end + "\n" if system else ""
        for role, text in _open_turn(_turns(messages, roles), roles):
            out += role + "\n" + text + end + "\n" if text else role + "\n"
        return ChatPrompt(out, stop=[stop] if stop else [])
    return fmt


def _llama2(messages: List[dict], **_: Any) -> ChatPrompt:
    roles = {"user": "<s>[INST]", "assistant": "[/INST]"}
    system = _system(messages)
    out = (f"[INST] <<SYS>>\n{system}\n<</SYS>>" if system else "") + " "
    for i, (role, text) in enumerate(_turns(messages, roles)):
        end = " " if i % 2 == 0 else "</s>"
        if system and i == 0:
            out += (text or "") + end  # the first user turn follows the system block directly
        elif text:
            out += role + text + " " + end
        else:
            out += role + " "
    return ChatPrompt(out + "[/INST]")


def _llama3(messages: List[dict], **_: Any) -> ChatPrompt:
    roles = {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n" for r in ("system", "user", "assistant")}
    out = "".join(role + text + "<|eot_id|>" if text else role
                  for role, text in _open_turn(_turns(messages, roles), roles))
    return ChatPrompt(out, stop=["<|eot_id|>"])


def _mistral_instruct(messages: List[dict], **_: Any) -> ChatPrompt:
    out = ""
    for m in messages:
        if m["role"] == "user" and isinstance(m.get("content"), str):
            out += "[INST] " + m["content"]
        elif m["role"] == "assistant" and m.get("content") is not None:
            out += " [/INST]" + m["content"] + "</s>"
    return ChatPrompt(out + " [/INST]", stop=["</s>"])


def _gemma(messages: List[dict], **_: Any) -> ChatPrompt:
    roles = {"user": "<start_of_turn>user\n", "assistant": "<start_of_turn>model\n"}  # no system role
    out = "".join(role + text + "<end_of_turn>\n" if text else role
                  for role, text in _open_turn(_turns(messages, roles), roles))
    return ChatPrompt(out, stop=["<end_of_turn>\n"])


def _colon_two(system: str, turns, sep: str, sep2: str) -> str:
    """`Role: text` turns separated alternately by sep and sep2; an empty turn ends as `Role:`."""
    out = system + sep
    for i, (role, text) in enumerate(turns):
        out += role + ": " + text + (sep, sep2)[i % 2] if text else role + ":"
    return out


def _alpaca(messages: List[dict], **_: Any) -> ChatPrompt:
    roles = {"user": "### Instruction", "assistant": "### Response"}
    return ChatPrompt(_colon_two(_system(messages), _turns(messages, roles), "\n\n", "</s>"))


VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                 "helpful, detailed, and polite answers to the user's questions.")


def _vicuna(messages: List[dict], **_: Any) -> ChatPrompt:
    roles = {"user": "USER", "assistant": "ASSISTANT"}
    return ChatPrompt(_colon_two(VICUNA_SYSTEM, _open_turn(_turns(messages, roles), roles), " ", "</s>"))


FORMATS: Dict[str, Callable[..., ChatPrompt]] = {
    "chatml": _chatml_like("<|im_start|>system\n", {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"},
                           "<|im_end|>", "<|im_end|>"),
    "qwen": _chatml_like("<|im_start|>system\n", {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"},
                         "<|im_end|>", "<|endoftext|>", default_system="You are a helpful assistant."),
    "zephyr": _chatml_like("<|system|>\n", {"user": "<|user|>\n", "assistant": "<|assistant|>\n"}, "</s>", "</s>"),
    "llama-2": _llama2,
    "llama-3": _llama3,
    "mistral-instruct": _mistral_instruct,
    "gemma": _gemma,
    "alpaca": _alpaca,
    "vicuna": _vicuna,
}


# ---- the model's format ----

class ChatFormats:
    """The format `Llama.chat_format` names: a built-in, or a Jinja2 template of the metadata
    ("chat_template.default" is tokenizer.chat_template, "chat_template.<name>" is
    tokenizer.chat_template.<name>). Without a name, the model's own template, else llama-2
    (llama-cpp-python's fallback)."""

    def __init__(self, metadata: Dict[str, str], tokenizer):
        self._metadata = metadata
        self._tokenizer = tokenizer
        self._compiled: Dict[str, TemplateFormat] = {}  # by source: compiling costs more than rendering

    def templates(self) -> Dict[str, str]:
        out = {k[len("tokenizer."):]: v for k, v in self._metadata.items() if k.startswith("tokenizer.chat_template.")}
        if "tokenizer.chat_template" in self._metadata:
            out["chat_template.default"] = self._metadata["tokenizer.chat_template"]
        return out

    def get(self, chat_format: Optional[str]) -> Callable[..., ChatPrompt]:
        templates = self.templates()
        name = chat_format or ("chat_template.default" if "chat_template.default" in templates else "llama-2")
        if name in FORMATS:
            return FORMATS[name]
        if name in templates:
            source = templates[name]
            if source not in self._compiled:
                tok = self._tokenizer
                text = lambda i: tok.token_text(i) if i >= 0 else ""  # noqa: E731
                eos = tok.eos_id if tok.eos_id >= 0 else None
                self._compiled[source] = TemplateFormat(source, bos_token=text(tok.bos_id),
                                                        eos_token=text(tok.eos_id), eos_id=eos)
            return self._compiled[source]
        raise ValueError(f"unknown chat_format {name!r}: built-in formats are {', '.join(sorted(FORMATS))}"
                         + (f"; the model has {', '.join(sorted(templates))}" if templates else ""))


# ---- completion dicts -> chat dicts ----

def _chat_logprobs(lp: Optional[dict]) -> Optional[dict]:
    if lp is None:
        return None
    return {"content": [{"token": tok, "bytes": None, "logprob": logprob,
                         "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in top.items()]}
                        for tok, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])],
            "refusal": None}


def completion_to_chat(completion: dict) -> dict:
    choice = completion["choices"][0]
    return {"id": "chat" + completion["id"], "object": "chat.completion", "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                         "logprobs": _chat_logprobs(choice["logprobs"]), "finish_reason": choice["finish_reason"]}],
            "usage": completion["usage"]}


def chunks_to_chat(chunks: Iterator[dict]) -> Iterator[dict]:
    """chat.completion.chunk deltas: the role first, then the text, then the finish reason."""
    for i, chunk in enumerate(chunks):
        head = {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                "object": "chat.completion.chunk"}
        if i == 0:
            yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                        "finish_reason": None}]}
        choice = chunk["choices"][0]
        delta = {"content": choice["text"]} if choice["finish_reason"] is None else {}
        yield {**head, "choices": [{"index": 0, "delta": delta, "logprobs": _chat_logprobs(choice["logprobs"]),
                                    "finish_reason": choice["finish_reason"]}]}


# ---- constrained output ----

def response_format_grammar(response_format: Optional[dict]):
    """The grammar a response_format asks for: JSON for json_object, a schema's language when
    one is given (llama-cpp-python's "schema" key, or OpenAI's json_schema.schema); None for text."""
    from .grammar import JSON_GBNF, LlamaGrammar

    if not response_format or response_format.get("type") == "text":
        return None
    kind = response_format.get("type")
    schema = response_format.get("schema")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema", schema)
    elif kind != "json_object":
        raise ValueError(f"response_format type must be text, json_object or json_schema, not {kind!r}")
    return LlamaGrammar.from_json_schema(json.dumps(schema)) if schema else LlamaGrammar.from_string(JSON_GBNF)


def forced_tool(tools: Optional[List[dict]], tool_choice) -> Optional[dict]:
    """The tool a tool_choice of {"type": "function", "function": {"name": ...}} names, or None."""
    if not isinstance(tool_choice, dict):
        return None
    name = tool_choice.get("function", {}).get("name")
    tool = next((t for t in tools or [] if t.get("function", {}).get("name") == name), None)
    if tool is None:
        raise ValueError(f"Tool choice '{name}' not found in tools.")
    return tool


def tool_call_to_chat(name: str, completion: dict) -> dict:
    """A completion whose text is the arguments of a call of tool `name`, as a chat tool call."""
    choice = completion["choices"][0]
    call = {"name": name, "arguments": choice["text"]}
    return {"id": "chat" + completion["id"], "object": "chat.completion", "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "function_call": call,
                                                 "tool_calls": [{"id": f"call__0_{name}_{completion['id']}",
                                                                 "type": "function", "function": call}]},
                         "logprobs": _chat_logprobs(choice["logprobs"]), "finish_reason": "tool_calls"}],
            "usage": completion["usage"]}


def tool_call_chunks(name: str, chunks: Iterator[dict]) -> Iterator[dict]:
    """The streamed form: the call's id and name first, then the arguments as they come."""
    for i, chunk in enumerate(chunks):
        head = {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                "object": "chat.completion.chunk"}
        choice = chunk["choices"][0]
        if choice["finish_reason"] is not None:
            yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}]}
            continue
        call = {"index": 0, "function": {"arguments": choice["text"]}}
        if i == 0:
            call = {"index": 0, "id": f"call__0_{name}_{chunk['id']}", "type": "function",
                    "function": {"name": name, "arguments": choice["text"]}}
        delta = {"role": "assistant", "content": None, "tool_calls": [call]} if i == 0 else {"tool_calls": [call]}
        yield {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
