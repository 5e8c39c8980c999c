"""llama_cpp.llama_types: the request and response shapes, from pypowerinfer."""
from pypowerinfer.llama_types import *  # noqa: F401,F403
from pypowerinfer.llama_types import __all__  # noqa: F401
