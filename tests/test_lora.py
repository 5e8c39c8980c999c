"""LoRA adapters (llama.cpp's GGUF adapter format) against llama-cpp-python with the same adapter,
teacher-forced on synthetic models: KL at most 1.5x llama.cpp's own batched-against-one-token
KL + 1e-4 (issue #15's bound); and a wrong base refused with a ValueError."""
from __future__ import annotations

import numpy as np
import pytest

from reference import compare_logits
from synthetic import write_llama_gguf, write_profiled_relu_gguf
from synthetic_lora import ATTENTION, FFN, base_shapes, write_lora_gguf

from pypowerinfer import Llama

N_TOKENS = 48
TOKENS = [int(t) for t in np.random.default_rng(3).integers(3, 280, N_TOKENS)]


def logits(engine, path, n_batch=64, **options) -> np.ndarray:
    llm = engine(str(path), n_ctx=64, n_batch=n_batch, n_threads=2, logits_all=True, verbose=False, **options)
    try:
        llm.eval(TOKENS)
        return np.array(llm.scores[:N_TOKENS], dtype=np.float64)
    finally:
        llm.close()


# base weights (quantized: the adapter runs beside them; float: what a merge would also fit),
# adapter type, what it adapts, alpha
CASES = {
    "f32-base-f32-all": ("F32", "F32", dict(output=True), 16.0),
    "f16-base-f16-attention": ("F16", "F16", dict(targets=ATTENTION), 4.0),
    "q8_0-base-f16-ffn-embd": ("Q8_0", "F16", dict(targets=FFN, token_embd=True), 16.0),
    "q4_0-base-f32-no-alpha": ("Q4_0", "F32", dict(output=True), None),
    "q4_0-base-f16-rank32": ("Q4_0", "F16", dict(rank=32), 64.0),
}


@pytest.mark.parametrize("case", CASES)
def test_logits_match_llama_cpp_with_the_same_adapter(tmp_path, llama_cpp, case):
    base_type, lora_type, what, alpha = CASES[case]
    base = write_llama_gguf(tmp_path / "base.gguf", weight_type=base_type, output_type=base_type, seed=1)
    adapter = write_lora_gguf(tmp_path / "adapter.gguf", base, type_name=lora_type, alpha=alpha, **what)
    lora = dict(lora_path=adapter, lora_scale=0.7)
    theirs, their_base = logits(llama_cpp.Llama, base, **lora), logits(llama_cpp.Llama, base)
    floor = compare_logits(theirs, logits(llama_cpp.Llama, base, n_batch=1, **lora))["kl_mean"]
    ours = compare_logits(theirs, logits(Llama, base, **lora))
    effect = compare_logits(theirs, their_base)["kl_mean"]
    # On a quantized base the two engines already differ without an adapter (their 8-bit
    # activations round differently where the sums' order differs, ~1e-3 on these random
    # models): the adapter must add nothing beyond that, or beyond llama.cpp's own floor.
    base_kl = compare_logits(their_base, logits(Llama, base))["kl_mean"]
    bound = 1.5 * max(floor, base_kl) + 1e-4
    print(f"\n{case}: KL {ours['kl_mean']:.2e} (bound {bound:.2e}, llama.cpp's own {floor:.2e}, the bases' "
          f"{base_kl:.2e}), top-1 {ours['top1']:.1%}; the adapter's own effect KL {effect:.3f}")
    assert effect > 100 * bound  # the adapter changes the logits far beyond the tolerance
    assert ours["kl_mean"] <= bound


def test_quantized_factors_differ_from_llama_cpp_as_its_quantized_weights_do(tmp_path, llama_cpp):
    """Q8_0 factors are dotted with 8-bit activations as any Q8_0 weight is, their sums taken in
    another order than llama.cpp's: the bound is the Q8_0 base model's own KL against llama.cpp,
    on an F32 base that adds none of its own."""
    base = write_llama_gguf(tmp_path / "base.gguf", weight_type="F32", output_type="F32", seed=1)
    q8_base = write_llama_gguf(tmp_path / "q8.gguf", weight_type="Q8_0", output_type="Q8_0", seed=1)
    adapter = write_lora_gguf(tmp_path / "adapter.gguf", base, type_name="Q8_0", rank=32, alpha=64.0)
    lora = dict(lora_path=adapter, lora_scale=0.7)
    ours = compare_logits(logits(llama_cpp.Llama, base, **lora), logits(Llama, base, **lora))["kl_mean"]
    q8_kl = compare_logits(logits(llama_cpp.Llama, q8_base), logits(Llama, q8_base))["kl_mean"]
    print(f"\nQ8_0 factors: KL {ours:.2e}; a Q8_0 base model's {q8_kl:.2e}")
    assert ours <= 1.5 * q8_kl + 1e-4


def test_scale_zero_is_the_base_model(tmp_path):
    base = write_llama_gguf(tmp_path / "base.gguf", weight_type="Q8_0", seed=2)
    adapter = write_lora_gguf(tmp_path / "adapter.gguf", base, token_embd=True)
    np.testing.assert_array_equal(logits(Llama, base, lora_path=adapter, lora_scale=0.0), logits(Llama, base))


@pytest.fixture
def base(tmp_path):
    return write_llama_gguf(tmp_path / "base.gguf", weight_type="Q8_0")


def refused(base, adapter, match):
    with pytest.raises(ValueError, match=match):
        Llama(str(base), n_ctx=64, lora_path=adapter, verbose=False)


def test_another_architecture_is_refused(tmp_path, base):
    refused(base, write_lora_gguf(tmp_path / "a.gguf", base, arch="qwen2"), "architecture 'qwen2'.*'llama'")


def test_another_shape_is_refused(tmp_path, base):
    other = write_llama_gguf(tmp_path / "wide.gguf", n_embd=128, weight_type="Q8_0")
    refused(base, write_lora_gguf(tmp_path / "a.gguf", other), "blk.0.attn_q.weight.*shapes.*wrong base model")


def test_a_layer_the_base_lacks_is_refused(tmp_path, base):
    refused(base, write_lora_gguf(tmp_path / "a.gguf", base, layers=[0, 5]),
            "'blk.5.attn_q.weight' does not exist in the base model")


def test_half_a_pair_is_refused(tmp_path, base):
    refused(base, write_lora_gguf(tmp_path / "a.gguf", base, omit="blk.1.ffn_up.weight.lora_a"),
            "'blk.1.ffn_up.weight' has no lora_a")


def test_a_model_is_not_an_adapter(base):
    refused(base, str(base), "general.type")


def test_a_missing_adapter_file(base, tmp_path):
    with pytest.raises(FileNotFoundError):
        Llama(str(base), n_ctx=64, lora_path=str(tmp_path / "none.gguf"), verbose=False)


def test_an_adapted_ffn_runs_dense_in_a_sparse_model(tmp_path):
    """The predictors were trained on the base FFN, so a layer whose FFN the adapter changes runs
    every neuron; with attention adapted only, the sparse FFN still runs."""
    model = write_profiled_relu_gguf(tmp_path, "Q8_0")
    share = {}
    for name, targets in (("ffn", FFN), ("attention", ATTENTION)):
        adapter = write_lora_gguf(tmp_path / f"{name}.gguf", model, targets=targets)
        with Llama(model, n_ctx=64, sparse=True, lora_path=adapter, verbose=False) as llm:
            llm.eval(TOKENS[:8])
            for t in TOKENS[8:16]:  # one-token steps: where sparse decode runs
                llm.eval([t])
            stats = llm._ctx.sparse_stats()
        share[name] = stats["ffn_rows_done"] / stats["ffn_rows_dense"]
    print(f"\nFFN rows computed per generated token: {share}")
    assert share["ffn"] == 1.0
    assert share["attention"] < 0.9


def test_the_hybrid_split_is_dropped_for_an_adapter(tmp_path, capfd):
    model = write_profiled_relu_gguf(tmp_path, "Q8_0")
    adapter = write_lora_gguf(tmp_path / "a.gguf", model)
    with Llama(model, n_ctx=64, lora_path=adapter, vram_budget="50%", hybrid_device="host", verbose=True) as llm:
        assert llm.placement is None
    assert "LoRA adapters run on the CPU" in capfd.readouterr().err


def test_a_context_on_a_device_refuses_an_adapter(tmp_path):
    from pypowerinfer.model import Device, NativeAdapter, NativeContext, NativeModel

    model = NativeModel(write_profiled_relu_gguf(tmp_path, "Q8_0"))
    ctx = NativeContext(model, n_ctx=64, n_batch=64, n_threads=1, n_threads_batch=1, logits_all=False,
                        device=Device.HOST, vram_budget=model.device_bytes() // 2)
    with pytest.raises(NotImplementedError, match="run on the CPU only"):
        ctx.set_adapter(NativeAdapter(model, write_lora_gguf(tmp_path / "a.gguf", model.path)), 1.0)
    ctx.close()


def test_the_adapter_shapes_come_from_the_base(tmp_path, base):
    shapes = base_shapes(base)
    assert shapes["blk.0.attn_k.weight"] == (32, 64)  # n_head_kv 2 x head_dim 16, n_embd 64


def test_the_server_takes_an_adapter_and_names_a_wrong_one(tmp_path, base, capsys):
    from pypowerinfer.server import main, parse_args

    args = parse_args(["--lora-path", "a.gguf", "--lora-scale", "0.5"])
    assert (args.lora_path, args.lora_scale) == ("a.gguf", 0.5)
    wrong = write_lora_gguf(tmp_path / "a.gguf", base, arch="qwen2")
    assert main(["--model", str(base), "--lora-path", wrong, "--port", "0"]) == 1
    assert "architecture 'qwen2'" in capsys.readouterr().err
