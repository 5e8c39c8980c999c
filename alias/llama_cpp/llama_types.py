"""llama_cpp.llama_types: the request and response shapes, as TypedDicts (what the dicts hold)."""
from typing import Any, Dict, List, Literal, Optional, TypedDict, Union


class ChatCompletionRequestSystemMessage(TypedDict, total=False):
    role: Literal["system"]
    content: Optional[str]


class ChatCompletionRequestUserMessage(TypedDict, total=False):
    role: Literal["user"]
    content: Optional[Union[str, List[Dict[str, Any]]]]


class ChatCompletionRequestAssistantMessage(TypedDict, total=False):
    role: Literal["assistant"]
    content: Optional[str]
    tool_calls: List[Dict[str, Any]]


class ChatCompletionRequestToolMessage(TypedDict, total=False):
    role: Literal["tool"]
    content: Optional[str]
    tool_call_id: str


ChatCompletionRequestMessage = Union[ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
                                     ChatCompletionRequestAssistantMessage, ChatCompletionRequestToolMessage]
ChatCompletionRequestResponseFormat = Dict[str, Any]
ChatCompletionTool = Dict[str, Any]
ChatCompletionToolChoiceOption = Union[str, Dict[str, Any]]
CreateCompletionResponse = Dict[str, Any]
CreateChatCompletionResponse = Dict[str, Any]
CreateEmbeddingResponse = Dict[str, Any]
