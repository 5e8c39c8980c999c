"""llama_cpp.llama: the Llama class and its companions, from pypowerinfer."""
from pypowerinfer import LogitsProcessorList, StoppingCriteriaList  # noqa: F401
from pypowerinfer.grammar import LlamaGrammar  # noqa: F401
from pypowerinfer.llama import LLAMA_DEFAULT_SEED, Llama  # noqa: F401
from pypowerinfer.state import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache, LlamaState  # noqa: F401
