"""The request bodies (unknown fields are accepted and ignored, as OpenAI clients send extras);
the sampling fields' defaults are sampling.COMPLETION's, and the chat body's sampling.CHAT's."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..sampling import CHAT, COMPLETION
from ..grammar import GrammarError, LlamaGrammar
from ..sampling import LogitsProcessorList, MinTokensLogitsProcessor
from .errors import APIError


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Optional[str] = None


class _Sampling(_Body):
    max_tokens: Optional[int] = Field(COMPLETION.max_tokens, ge=-1)
    temperature: float = Field(COMPLETION.temperature, ge=0.0, le=10.0)
    top_p: float = Field(COMPLETION.top_p, ge=0.0, le=1.0)
    min_p: float = Field(COMPLETION.min_p, ge=0.0, le=1.0)
    top_k: int = Field(COMPLETION.top_k, ge=0)
    stop: Optional[Union[str, List[str]]] = None
    stream: bool = False
    seed: Optional[int] = None
    presence_penalty: float = Field(COMPLETION.presence_penalty, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(COMPLETION.frequency_penalty, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(COMPLETION.repeat_penalty, ge=0.0)
    logit_bias: Optional[Dict[str, float]] = None
    # llama-cpp-python's server's own fields
    logit_bias_type: Literal["input_ids", "tokens"] = "input_ids"  # logit_bias keys: token ids, or token texts
    typical_p: float = Field(COMPLETION.typical_p, ge=0.0, le=1.0)
    tfs_z: float = Field(COMPLETION.tfs_z, ge=0.0, le=1.0)
    mirostat_mode: int = Field(COMPLETION.mirostat_mode, ge=0, le=2)
    mirostat_tau: float = Field(COMPLETION.mirostat_tau, ge=0.0, le=10.0)
    mirostat_eta: float = Field(COMPLETION.mirostat_eta, ge=0.001, le=1.0)
    min_tokens: int = Field(0, ge=0)
    grammar: Optional[str] = None  # GBNF
    n: int = Field(1, ge=1, le=1)  # one choice per request, as the peer's server computes
    best_of: Optional[int] = Field(1, ge=1, le=1)
    user: Optional[str] = None

    def sampling(self, llm) -> Dict[str, Any]:
        """create_completion's sampling keywords; a GBNF grammar that does not parse is a 400 naming
        the parser's complaint."""
        processors = LogitsProcessorList([MinTokensLogitsProcessor(self.min_tokens, llm.token_eos())]) \
            if self.min_tokens > 0 else None
        grammar = None
        if self.grammar is not None:
            try:
                grammar = LlamaGrammar.from_string(self.grammar, verbose=False)
            except GrammarError as exc:
                raise APIError(400, f"invalid grammar: {exc}", param="grammar") from None
        return dict(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p, min_p=self.min_p,
                    top_k=self.top_k, stop=self.stop or [], stream=self.stream, seed=self.seed,
                    presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
                    repeat_penalty=self.repeat_penalty, logit_bias=self._bias(llm), typical_p=self.typical_p,
                    tfs_z=self.tfs_z, mirostat_mode=self.mirostat_mode, mirostat_tau=self.mirostat_tau,
                    mirostat_eta=self.mirostat_eta, logits_processor=processors, grammar=grammar)

    def _bias(self, llm) -> Optional[Dict[int, float]]:
        if not self.logit_bias:
            return None
        if self.logit_bias_type == "input_ids":
            try:
                return {int(k): v for k, v in self.logit_bias.items()}
            except ValueError:
                raise APIError(400, "logit_bias keys must be token ids (or set logit_bias_type to 'tokens')",
                               param="logit_bias") from None
        bias: Dict[int, float] = {}
        for text, value in self.logit_bias.items():  # every token of each text, as the peer's server does
            for token in llm.tokenize(text.encode("utf-8"), add_bos=False, special=True):
                bias[token] = value
        return bias


class CompletionBody(_Sampling):
    prompt: Union[str, List[str], List[int]] = ""
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    suffix: Optional[str] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "function", "developer"]
    content: Optional[Union[str, List[Dict[str, Any]]]] = None


class ChatBody(_Sampling):
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(CHAT.max_tokens, ge=-1)
    temperature: float = Field(CHAT.temperature, ge=0.0, le=10.0)
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    response_format: Optional[Dict[str, Any]] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)


class EmbeddingBody(_Body):
    input: Union[str, List[str]]


class TokenizeBody(_Body):
    input: str
    add_special: bool = True


class DetokenizeBody(_Body):
    tokens: List[int]
