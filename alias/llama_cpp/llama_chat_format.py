"""llama_cpp.llama_chat_format: the chat formats pypowerinfer has."""
from pypowerinfer.chat import FORMATS, ChatPrompt, TemplateFormat  # noqa: F401
