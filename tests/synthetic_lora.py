"""LoRA adapters for synthetic base models, in llama.cpp's GGUF adapter format.

Each adapted weight W (GGUF ne [n_in, n_out]) gets `<name>.lora_a` (ne [n_in, rank]) and
`<name>.lora_b` (ne [rank, n_out]), as convert_lora_to_gguf.py writes them; the token embedding's
pair is the other way round (A: a row of rank per token, ne [rank, n_vocab]; B ne [rank, n_embd]).
"""
from __future__ import annotations

import os

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize

ATTENTION = ("attn_q", "attn_k", "attn_v", "attn_output")
FFN = ("ffn_gate", "ffn_up", "ffn_down")


def base_shapes(base_path) -> dict[str, tuple[int, int]]:
    """name -> (n_out, n_in) of every 2-D tensor of the base file."""
    reader = GGUFReader(os.fspath(base_path))
    return {t.name: (int(t.shape[1]), int(t.shape[0])) for t in reader.tensors if len(t.shape) == 2}


def _encoded(values: np.ndarray, type_name: str) -> tuple[np.ndarray, GGMLQuantizationType]:
    qtype = GGMLQuantizationType[type_name]
    if type_name == "F32":
        return values.astype(np.float32), qtype
    if type_name == "F16":
        return values.astype(np.float16), qtype
    return quantize(values.astype(np.float32), qtype), qtype


def write_lora_gguf(path, base_path, *, targets=ATTENTION + FFN, output=False, token_embd=False, rank=8,
                    alpha: float | None = 16.0, type_name="F32", arch="llama", layers=None, strength=0.5,
                    seed=0, shapes=None, omit=None) -> str:
    """An adapter of `targets` in every layer (or those in `layers`), output.weight and token_embd
    when asked; B A x has ~`strength` times the RMS of W x. alpha None leaves adapter.lora.alpha
    out (the scale then applies as given); shapes overrides the base's (a mismatched adapter);
    omit drops one tensor by name (a broken pair)."""
    shapes = shapes or base_shapes(base_path)
    rng = np.random.default_rng(seed)
    n_layer = 1 + max(int(n.split(".")[1]) for n in shapes if n.startswith("blk."))
    names = [f"blk.{i}.{t}.weight" for i in (layers if layers is not None else range(n_layer)) for t in targets]
    names += ["output.weight"] * output
    pairs = {}
    for name in names:
        # a layer the base lacks (a mismatched adapter) takes layer 0's shape
        n_out, n_in = shapes[name] if name in shapes else shapes["blk.0." + name.split(".", 2)[2]]
        a = rng.normal(0, 1 / np.sqrt(n_in), (rank, n_in))
        b = rng.normal(0, strength / np.sqrt(rank), (n_out, rank))
        pairs[name] = (a, b)
    if token_embd:
        n_vocab, n_embd = shapes["token_embd.weight"]
        embd_rms = 3.0 / np.sqrt(n_embd)  # tests/synthetic.py's token_embd scale
        pairs["token_embd.weight"] = (rng.normal(0, 1, (n_vocab, rank)),
                                      rng.normal(0, strength * embd_rms / np.sqrt(rank), (n_embd, rank)))
    writer = GGUFWriter(os.fspath(path), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    if alpha is not None:
        writer.add_float32("adapter.lora.alpha", alpha)
    for name, (a, b) in pairs.items():
        for suffix, values in ((".lora_a", a), (".lora_b", b)):
            if name + suffix == omit:
                continue
            data, qtype = _encoded(values, type_name)
            writer.add_tensor(name + suffix, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return os.fspath(path)
