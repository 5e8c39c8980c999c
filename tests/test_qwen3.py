"""Qwen 3 (per-head q/k norms, a head size apart from n_embd / n_head) and Qwen 3 MoE (a router
over SwiGLU experts) on small random-weight files, against llama-cpp-python as the oracle."""
from __future__ import annotations

import numpy as np
import pytest

from reference import compare_logits
from synthetic import write_llama_gguf
from test_forward import NEAR_TIE, real_text, teacher_forced

from pypowerinfer import Llama
from pypowerinfer.model import NativeModel

N_TEACHER = 512
DIMS = dict(n_vocab=512, n_layer=3, n_ctx_train=512)

# head_dim != n_embd / n_head in each; tied and separate outputs; top-1 and top-k > 1
CASES = {
    "qwen3-q8_0-tied": dict(arch="qwen3", weight_type="Q8_0", n_embd=128, n_head=4, n_head_kv=2, head_dim=64, n_ff=256),
    "qwen3-q4_0-output": dict(arch="qwen3", weight_type="Q4_0", n_embd=256, n_head=4, n_head_kv=1, head_dim=32,
                              n_ff=512, output_type="Q8_0"),
    "qwen3moe-q8_0-top1": dict(arch="qwen3moe", weight_type="Q8_0", n_embd=128, n_head=4, n_head_kv=2, head_dim=64,
                               n_ff=256, n_expert=4, n_expert_used=1, n_ff_exp=64),
    "qwen3moe-q4_0-top2": dict(arch="qwen3moe", weight_type="Q4_0", n_embd=256, n_head=8, n_head_kv=4, head_dim=64,
                               n_ff=256, n_expert=8, n_expert_used=2, n_ff_exp=96, output_type="Q8_0"),
    "qwen3moe-q8_0-top3": dict(arch="qwen3moe", weight_type="Q8_0", n_embd=128, n_head=2, n_head_kv=2, head_dim=128,
                               n_ff=256, n_expert=6, n_expert_used=3, n_ff_exp=32),
}


def logits_pairs(path, tokens):
    """Teacher-forced logits of llama.cpp batched and one token at a time, and ours the same two ways."""
    import llama_cpp

    out = {}
    for n_batch in (512, 1):
        opts = dict(n_ctx=512, n_batch=n_batch, logits_all=True, n_threads=2, verbose=False)
        for name, llm in (("ref", llama_cpp.Llama(str(path), n_ubatch=n_batch, **opts)), ("ours", Llama(str(path), **opts))):
            out[name, n_batch] = teacher_forced(llm, tokens)
            llm.close()
    return out


def decisive_top1(ref: np.ndarray, ours: np.ndarray) -> float:
    """Top-1 agreement over the steps where llama.cpp's best logit leads its second by NEAR_TIE
    or more: below that, its own 8-bit rounding noise decides (test_forward.py)."""
    top2 = np.sort(ref, axis=-1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= NEAR_TIE
    return float(np.mean(ref[decisive].argmax(-1) == ours[decisive].argmax(-1)))


def agreement_of(path) -> dict:
    """llama.cpp's own batched/one-token agreement on the file at path, ours to it on each path,
    and ours to ourselves, over N_TEACHER tokens of real text."""
    import llama_cpp

    ref = llama_cpp.Llama(str(path), n_ctx=512, verbose=False)
    tokens = ref.tokenize(real_text().encode())[:N_TEACHER]
    ref.close()
    assert len(tokens) == N_TEACHER
    got = logits_pairs(path, tokens)
    pairs = {"self": (got["ref", 512], got["ref", 1]), "batched": (got["ref", 512], got["ours", 512]),
             "one-token": (got["ref", 1], got["ours", 1]), "ours": (got["ours", 512], got["ours", 1])}
    return {k: dict(compare_logits(*v), decisive_top1=decisive_top1(*v)) for k, v in pairs.items()}


def agreements(folder, cases: dict, write) -> dict:
    """agreement_of each case, its file written by write(path, case)"""
    return {name: agreement_of(write(folder / f"{name}.gguf", case)) for name, case in cases.items()}


def assert_agreement(name: str, r: dict) -> None:
    """agreement_of's figures within [models-2]'s bounds: on both paths our KL to llama.cpp at most
    1.5x llama.cpp's own batched / one-token KL + 1e-4, and top-1 within a point of its own. Our
    one-token path sums as llama.cpp's does (kernels.h's pi_dot_order, vec.c's ggml-order ops), so
    there the KL is 0 or nearly; our batched path is our one-token path to the bit, so against
    llama.cpp's batched one it is llama.cpp's own floor."""
    print(f"\n{name}: " + "; ".join(f"{k} top1 {v['top1']:.2%} ({v['decisive_top1']:.2%} decisive) KL mean "
                                    f"{v['kl_mean']:.2e} median {v['kl_median']:.2e}" for k, v in r.items()))
    own = r["self"]
    for path in ("batched", "one-token"):
        got = r[path]
        assert got["kl_mean"] <= 1.5 * own["kl_mean"] + 1e-4, (path, got, own)
        assert got["top1"] >= own["top1"] - 0.01, (path, got, own)


@pytest.fixture(scope="module")
def agreement(tmp_path_factory):
    return agreements(tmp_path_factory.mktemp("qwen3"), CASES,
                      lambda path, case: write_llama_gguf(path, **DIMS, **case))


@pytest.mark.parametrize("name", CASES)
def test_teacher_forced_logits_match_llama_cpp(agreement, name):
    assert_agreement(name, agreement[name])


@pytest.mark.parametrize("name", CASES)
def test_batched_equals_one_token(agreement, name):
    r = agreement[name]["ours"]
    assert r["top1"] == 1.0 and r["kl_mean"] < 1e-6, r


def test_describe_shows_the_experts(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **CASES["qwen3moe-q4_0-top2"])
    text = NativeModel(path).describe()
    assert "experts: 8 per layer of 96 neurons, 2 routed per token" in text
    assert "blk.0.ffn_up_exps.weight" in text and "[256 x 96 x 8 experts]" in text


def assert_exact(path) -> None:
    """Teacher-forced logits of llama.cpp and ours on 100 tokens agree to float rounding."""
    import llama_cpp

    tokens = list(range(10, 110))
    ref = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, n_threads=2, verbose=False)
    with Llama(str(path), n_ctx=256, logits_all=True, n_threads=2, verbose=False) as ours:
        stats = compare_logits(teacher_forced(ref, tokens), teacher_forced(ours, tokens))
    ref.close()
    assert stats["top1"] == 1.0 and stats["kl_mean"] < 1e-6, stats


def test_f32_moe_matches_llama_cpp_exactly(tmp_path):
    """Float weights leave no quantization between the engines: the routing and the weighted sum match."""
    assert_exact(write_llama_gguf(tmp_path / "m.gguf", **DIMS, **dict(CASES["qwen3moe-q8_0-top3"], weight_type="F32")))


# ---- bad input ----

MOE = CASES["qwen3moe-q8_0-top1"]


@pytest.mark.parametrize("kv, words", [
    ({"qwen3moe.expert_count": 0}, "qwen3moe.expert_count"),
    ({"qwen3moe.expert_used_count": 0}, "qwen3moe.expert_used_count"),
    ({"qwen3moe.expert_used_count": 5}, "qwen3moe.expert_used_count"),
])
def test_bad_expert_counts_are_refused(tmp_path, kv, words):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **MOE, extra_kv=kv)
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        Llama(str(path), verbose=False)


def test_missing_expert_count_is_refused(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **MOE, omit_key="qwen3moe.expert_count")
    with pytest.raises(ValueError, match=r"qwen3moe\.expert_count"):
        Llama(str(path), verbose=False)


@pytest.mark.parametrize("n_ff_exp", [32, 128])
def test_expert_tensors_of_the_wrong_shape_are_refused(tmp_path, n_ff_exp):
    """The file says 64 neurons per expert; its tensors hold another number."""
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **dict(MOE, n_ff_exp=n_ff_exp),
                           extra_kv={"qwen3moe.expert_feed_forward_length": 64})
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_gate_exps\.weight"):
        Llama(str(path), verbose=False)


def test_wrong_q_norm_size_is_refused(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **CASES["qwen3-q8_0-tied"],
                            extra_kv={"qwen3.attention.key_length": 32, "qwen3.attention.value_length": 32,
                                      "qwen3.rope.dimension_count": 32})
    with pytest.raises(ValueError, match=r"blk\.0\.attn_q\.weight"):
        Llama(str(path), verbose=False)


def test_missing_q_norm_is_refused(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **CASES["qwen3-q8_0-tied"],
                            omit_tensor="blk.1.attn_k_norm.weight")
    with pytest.raises(ValueError, match=r"blk\.1\.attn_k_norm\.weight"):
        Llama(str(path), verbose=False)


def test_unsupported_architecture_is_named(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **dict(MOE, arch="olmoe"))
    with pytest.raises(NotImplementedError, match="olmoe"):
        Llama(str(path), verbose=False)


def test_an_moe_model_refuses_layer_offload(tmp_path):
    """Layer offload does not take experts (vram_budget's expert split does, test_expert_split.py):
    n_gpu_layers runs on the CPU with a warning, as for any model the device cannot run."""
    path = write_llama_gguf(tmp_path / "m.gguf", **DIMS, **MOE)
    with pytest.warns(UserWarning, match="qwen3moe"):
        llm = Llama(str(path), n_gpu_layers=2, hybrid_device="host", verbose=False)
    llm.eval([1, 2, 3])
    llm.close()
