"""The installed native library: the backends it was built with."""
import shutil

import pytest

from pypowerinfer.model import build_info, cuda_device_count


def test_cpu_backend_is_built():
    assert build_info().split()[0] == "cpu"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine: CPU-only build")
def test_cuda_sources_compiled_and_linked_when_nvcc_is_present():
    assert "cuda" in build_info().split()


def test_cuda_device_count_is_an_answer_not_a_crash():
    assert cuda_device_count() >= 0


@pytest.mark.cuda
def test_a_gpu_is_visible_on_gpu_machines():
    if cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    assert cuda_device_count() >= 1
