"""Small synthetic `llama` GGUF files for tests, and corrupt variants for loader tests.

`write_llama_gguf` is the one writer for every synthetic model here, from the
tiny test models to the 1.1B benchmark file (bench/make_tinyllama.py): tensors
are declared first and then generated, quantized and written one at a time, so
memory stays at one tensor even for the big file.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, TokenType
from gguf.quants import quant_shape_to_byte_shape, quantize

WEIGHT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
# Types the runtime does not run, written as all-zero blocks: valid files for "unsupported type" tests.
ZERO_FILLED_TYPES = ("IQ4_NL",)
# gguf-py has no numpy quantizer for K-quants: their blocks are random bytes, with the fp16
# super-block scales (at these byte offsets of each block) set to small finite values.
K_SCALE_OFFSETS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
K_TYPES = tuple(K_SCALE_OFFSETS)

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
N_SPECIAL = 2
# Letters in rough English frequency order, so the first merges are the common ones.
LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


# --- tokenizer -------------------------------------------------------------------

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (printable bytes map to themselves)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    rest = [b for b in range(256) if b not in printable]
    # Insertion order is GPT-2's vocab order: printable bytes first, then the rest
    # shifted past U+00FF (so space, 0x20, becomes U+0120 'Ġ').
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(rest)}


def _merge_pairs():
    """Merges in rank order: letter pairs, space+letter, then 3-letter words with and without space."""
    space = bytes_to_unicode()[ord(" ")]
    by_rank = lambda cs: sum(LETTERS.index(c) for c in cs)  # noqa: E731
    pairs = sorted(product(LETTERS, repeat=2), key=by_rank)
    triples = sorted(product(LETTERS, repeat=3), key=by_rank)
    yield from pairs
    yield from ((space, c) for c in LETTERS)
    yield from ((space + a, b) for a, b in pairs)
    yield from ((a + b, c) for a, b, c in triples)
    yield from ((space + a + b, c) for a, b, c in triples)


MAX_VOCAB = 256 + N_SPECIAL + 2 * 26**2 + 26 + 2 * 26**3


def byte_bpe_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """A gpt2-style byte-level BPE vocab of exactly n_vocab tokens: 256 byte tokens,
    n_vocab - 258 merges, then BOS and EOS (control tokens, last as in GPT-2)."""
    if not 256 + N_SPECIAL <= n_vocab <= MAX_VOCAB:
        raise ValueError(f"n_vocab must be in [{256 + N_SPECIAL}, {MAX_VOCAB}], got {n_vocab}")
    tokens = list(bytes_to_unicode().values())
    merges = []
    for a, b in _merge_pairs():
        if len(tokens) == n_vocab - N_SPECIAL:
            break
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    types = [TokenType.NORMAL] * len(tokens) + [TokenType.CONTROL] * N_SPECIAL
    return tokens + [BOS, EOS], [int(t) for t in types], merges


# --- model -----------------------------------------------------------------------

@dataclass
class _TensorPlan:
    name: str
    shape: tuple[int, ...]  # numpy order: (n_out, n_in), i.e. GGUF ne reversed
    qtype: GGMLQuantizationType
    std: float              # weights ~ N(0, std); norms ~ 1 + N(0, std)
    is_norm: bool = False


def _tensor_plan(*, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, weight_type,
                 output_type, biases, arch="llama", n_ctx_train=256, attn_norm_2=False, head_dim=None,
                 n_expert=0, n_ff_exp=0) -> list[_TensorPlan]:
    head_dim = head_dim or n_embd // n_head
    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    wtype = GGMLQuantizationType[weight_type]
    f32 = GGMLQuantizationType.F32
    # Logits have std ~3 through the (tied or not) output matrix: peaked enough that
    # top-1 comparisons mean something, far from saturating the softmax.
    embd_std = 3.0 / np.sqrt(n_embd)

    def linear(name, n_out, n_in):
        # 1/sqrt(n_in) keeps every projection's output at unit RMS through the layers.
        return _TensorPlan(name, (n_out, n_in), wtype, 1.0 / np.sqrt(n_in))

    def norm(name, n=n_embd):
        return _TensorPlan(name, (n,), f32, 0.1, is_norm=True)

    def experts(name, n_out, n_in):  # n_expert matrices [n_out, n_in]
        return _TensorPlan(name, (n_expert, n_out, n_in), wtype, 1.0 / np.sqrt(n_in))

    def bias(name, n):
        return _TensorPlan(name, (n,), f32, 0.1)

    def layer_norm(name):  # LayerNorm archs: weight and bias
        return [norm(name + ".weight")] + ([bias(name + ".bias", n_embd)] if arch in LAYER_NORM_ARCHS else [])

    if arch == "phi3" and output_type is None:
        output_type = weight_type  # llama.cpp's phi3 requires output.weight
    plan = [_TensorPlan("token_embd.weight", (n_vocab, n_embd), wtype, embd_std), *layer_norm("output_norm")]
    if arch == "opt":  # as PowerInfer's converter: n_ctx_train rows, read from row pos + 2
        plan.append(_TensorPlan("position_embd.weight", (n_ctx_train, n_embd), wtype, embd_std))
    if output_type is not None:
        plan.append(_TensorPlan("output.weight", (n_vocab, n_embd), GGMLQuantizationType[output_type], embd_std))
    for i in range(n_layer):
        blk = f"blk.{i}."
        if arch in ("phi3", "falcon"):  # fused qkv rows [q; k; v]
            qkv = [linear(blk + "attn_qkv.weight", q_dim + 2 * kv_dim, n_embd)]
        else:
            qkv = [linear(blk + "attn_q.weight", q_dim, n_embd), linear(blk + "attn_k.weight", kv_dim, n_embd),
                   linear(blk + "attn_v.weight", kv_dim, n_embd)]
        if arch == "phi3":  # fused up rows [gate; up]
            gate_up = [linear(blk + "ffn_up.weight", 2 * n_ff, n_embd)]
        elif arch in UNGATED_ARCHS:
            gate_up = [linear(blk + "ffn_up.weight", n_ff, n_embd)]
        elif n_expert:  # the router (F32, as llama.cpp's quantizer leaves it) and the experts
            gate_up = [_TensorPlan(blk + "ffn_gate_inp.weight", (n_expert, n_embd), f32, ROUTER_STD / np.sqrt(n_embd)),
                       experts(blk + "ffn_gate_exps.weight", n_ff_exp, n_embd),
                       experts(blk + "ffn_up_exps.weight", n_ff_exp, n_embd)]
        else:
            gate_up = [linear(blk + "ffn_gate.weight", n_ff, n_embd), linear(blk + "ffn_up.weight", n_ff, n_embd)]
        down = experts(blk + "ffn_down_exps.weight", n_embd, n_ff_exp) if n_expert else \
            linear(blk + "ffn_down.weight", n_embd, n_ff)
        # falcon: one norm before the parallel attention and FFN, and falcon-40b's attn_norm_2
        norms = layer_norm(blk + "attn_norm") + (layer_norm(blk + "attn_norm_2") if attn_norm_2 else [])
        plan += [*norms, *qkv, linear(blk + "attn_output.weight", n_embd, q_dim),
                 *(layer_norm(blk + "ffn_norm") if arch != "falcon" else []), *gate_up, down]
        if arch in QK_NORM_ARCHS:
            plan += [norm(blk + "attn_q_norm.weight", head_dim), norm(blk + "attn_k_norm.weight", head_dim)]
        if arch == "opt":  # OPT has every bias
            plan += [bias(blk + f"{t}.bias", n) for t, n in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim),
                                                             ("attn_output", n_embd), ("ffn_up", n_ff), ("ffn_down", n_embd))]
        elif biases:
            plan += [bias(blk + f"{t}.bias", n)
                     for t, n in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim), ("attn_output", n_embd))]
    if biases and arch == "phi3":
        plan.append(bias("output.bias", n_vocab))
    return plan


def _encoded_shape(t: _TensorPlan) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the array handed to the writer (bytes for block formats)."""
    if t.qtype == GGMLQuantizationType.F32:
        return t.shape, np.dtype(np.float32)
    if t.qtype == GGMLQuantizationType.F16:
        return t.shape, np.dtype(np.float16)
    return tuple(quant_shape_to_byte_shape(t.shape, t.qtype)), np.dtype(np.uint8)


def random_k_blocks(type_name: str, byte_shape, rng, std: float = 0.02) -> np.ndarray:
    """Random K-quant blocks whose weights are of the order of std."""
    from gguf.constants import GGML_QUANT_SIZES

    block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][1]
    data = rng.integers(0, 256, size=byte_shape, dtype=np.uint8)
    blocks = data.reshape(-1, block_bytes)
    # sub-block scales reach ~63 and quants ~31: scale the super-block factor so w ~ std
    scale = (rng.uniform(0.2, 1.0, size=(blocks.shape[0], 1)) * std / 300.0).astype(np.float16)
    for at in K_SCALE_OFFSETS[type_name]:
        blocks[:, at:at + 2] = scale.view(np.uint8)
    return data


def _generate(t: _TensorPlan, seed: int) -> np.ndarray:
    shape, dtype = _encoded_shape(t)
    if t.qtype.name in ZERO_FILLED_TYPES:
        return np.zeros(shape, dtype)
    # Seeded by name, so omitting or adding a tensor leaves every other tensor unchanged.
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
    if t.qtype.name in K_SCALE_OFFSETS:
        return random_k_blocks(t.qtype.name, shape, rng, t.std)
    x = rng.standard_normal(t.shape, dtype=np.float32) * np.float32(t.std)
    if t.is_norm:
        x += 1.0
    return quantize(x, t.qtype)


LAYER_NORM_ARCHS = ("opt", "falcon")
QK_NORM_ARCHS = ("qwen3", "qwen3moe")
ROUTER_STD = 8.0  # router logits of std ~8: decisive, as trained routers are, so few experts are near-tied
UNGATED_ARCHS = ("opt", "falcon")


def _metadata(*, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx_train, arch,
              rope_freq_base, head_dim=None, n_expert=0, n_expert_used=0, n_ff_exp=0
              ) -> dict[str, tuple[Any, GGUFValueType]]:
    tokens, types, merges = byte_bpe_vocab(n_vocab)
    u32, f32, s, arr = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING, GGUFValueType.ARRAY
    # llama.cpp's falcon reads the LayerNorm epsilon; PowerInfer's OPT converter writes none
    eps = {"falcon": {f"{arch}.attention.layer_norm_epsilon": (1e-5, f32)}, "opt": {}}.get(
        arch, {f"{arch}.attention.layer_norm_rms_epsilon": (1e-5, f32)})
    return {
        **eps,
        # not naming the arch: llama.cpp sets token attributes by name, and for "phi3" looks up "</s>"
        "general.name": ("synthetic", s),
        f"{arch}.vocab_size": (n_vocab, u32),
        f"{arch}.context_length": (n_ctx_train, u32),
        f"{arch}.embedding_length": (n_embd, u32),
        f"{arch}.block_count": (n_layer, u32),
        f"{arch}.feed_forward_length": (n_ff, u32),
        f"{arch}.attention.head_count": (n_head, u32),
        f"{arch}.attention.head_count_kv": (n_head_kv, u32),
        f"{arch}.rope.freq_base": (rope_freq_base, f32),
        f"{arch}.rope.dimension_count": (head_dim or n_embd // n_head, u32),
        **({f"{arch}.attention.key_length": (head_dim, u32), f"{arch}.attention.value_length": (head_dim, u32)}
           if head_dim else {}),
        **({f"{arch}.expert_count": (n_expert, u32), f"{arch}.expert_used_count": (n_expert_used, u32),
            f"{arch}.expert_feed_forward_length": (n_ff_exp, u32)} if n_expert else {}),
        # softmax, as HF's converter always writes it (extra_kv for sigmoid, sliding windows)
        **({f"{arch}.expert_gating_func": (1, u32)} if arch == "smallthinker" else {}),
        "tokenizer.ggml.model": ("gpt2", s),
        "tokenizer.ggml.pre": ("gpt-2", s),
        "tokenizer.ggml.tokens": (tokens, arr),
        "tokenizer.ggml.token_type": (types, arr),
        "tokenizer.ggml.merges": (merges, arr),
        "tokenizer.ggml.bos_token_id": (tokens.index(BOS), u32),
        "tokenizer.ggml.eos_token_id": (tokens.index(EOS), u32),
        "tokenizer.ggml.add_bos_token": (True, GGUFValueType.BOOL),
    }


def _typed(value) -> tuple[Any, GGUFValueType]:
    """extra_kv values: a (value, GGUFValueType) pair, or a plain value typed the way
    llama.cpp's keys usually are (non-negative ints are u32: it checks types strictly)."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, GGUFValueType.UINT32
    return value, GGUFValueType.get_type(value)


def write_llama_gguf(path, *, n_vocab=288, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96,
                     n_ctx_train=256, weight_type="Q4_0", output_type=None, arch="llama", seed=0,
                     rope_freq_base=10000.0, extra_kv=None, omit_tensor=None, omit_key=None,
                     tensor_types=None, biases=False, attn_norm_2=False, head_dim=None, n_expert=0,
                     n_expert_used=0, n_ff_exp=0):
    """Write a random-weight llama-shaped GGUF and return its path.

    weight_type: type of every 2-D weight (norms and biases are always F32);
    output_type: None ties the output to token_embd, else output.weight of that type;
    extra_kv: {key: value or (value, GGUFValueType)} added or overriding;
    omit_tensor / omit_key: leave that tensor / key out (loader tests);
    tensor_types: {tensor name: type name} per-tensor overrides, K-quants written as zeros;
    biases: add llama.cpp's optional attn_q/k/v/output biases;
    arch: llama's tensor set, or another architecture's as llama.cpp names it (phi3: fused
    attn_qkv and gate-up ffn_up, and output.weight always; falcon: LayerNorms, fused attn_qkv,
    no gate, no ffn_norm) or PowerInfer's (opt: LayerNorms, every bias, position_embd, no gate);
    attn_norm_2: falcon-40b's separate attention norm;
    head_dim: the head size when it is not n_embd / n_head (written as key_length and value_length);
    n_expert, n_expert_used, n_ff_exp: an MoE FFN (qwen3moe, smallthinker: router ffn_gate_inp, 3-D expert
    tensors; smallthinker's expert_gating_func is 1, softmax).
    """
    dims = dict(n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff)
    plan = _tensor_plan(**dims, weight_type=weight_type, output_type=output_type, biases=biases, arch=arch,
                        n_ctx_train=n_ctx_train, attn_norm_2=attn_norm_2, head_dim=head_dim, n_expert=n_expert,
                        n_ff_exp=n_ff_exp)
    for name, type_name in (tensor_types or {}).items():
        next(t for t in plan if t.name == name).qtype = GGMLQuantizationType[type_name]
    if omit_tensor is not None:
        kept = [t for t in plan if t.name != omit_tensor]
        if len(kept) == len(plan):
            raise KeyError(f"omit_tensor: no tensor {omit_tensor!r}")
        plan = kept

    writer = GGUFWriter(os.fspath(path), arch)
    kv = _metadata(**dims, n_ctx_train=n_ctx_train, arch=arch, rope_freq_base=rope_freq_base, head_dim=head_dim,
                   n_expert=n_expert, n_expert_used=n_expert_used, n_ff_exp=n_ff_exp)
    kv.update({k: _typed(v) for k, v in (extra_kv or {}).items()})
    for key, (value, vtype) in kv.items():
        writer.add_key_value(key, value, vtype)
    if omit_key is not None:
        # Popped from the writer itself so keys it adds on its own (general.architecture) can go too.
        if writer.kv_data[0].pop(omit_key, None) is None:
            raise KeyError(f"omit_key: no key {omit_key!r}")

    write_plan(writer, plan, seed)
    return path


def write_plan(writer: GGUFWriter, plan: list[_TensorPlan], seed: int) -> None:
    """Declare the plan's tensors after the writer's keys, then generate and write them one at a
    time (memory stays at one tensor), and close the file."""
    for t in plan:
        shape, dtype = _encoded_shape(t)
        writer.add_tensor_info(t.name, shape, dtype, int(np.prod(shape)) * dtype.itemsize, raw_dtype=t.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in plan:
        writer.write_tensor_data(_generate(t, seed))
    writer.close()


def rewrite_gguf(src, dst, add_tensors=None, add_kv=None, drop=frozenset()) -> str:
    """Copy src to dst with GGUFWriter: every key and tensor (raw bytes), less the tensor names
    in drop, plus add_tensors {name: float array, or (float array, type name) to quantize} and
    add_kv {key: (value, type, sub_type)}."""
    from gguf import GGUFReader

    reader = GGUFReader(src)
    writer = GGUFWriter(os.fspath(dst), reader.fields["general.architecture"].contents())
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue  # header fields, and the key GGUFWriter writes itself
        sub_type = f.types[-1] if f.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)
    for key, (value, vtype, sub_type) in (add_kv or {}).items():
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    for t in reader.tensors:
        if t.name not in drop:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    for name, array in (add_tensors or {}).items():
        if isinstance(array, tuple):
            values, type_name = array
            qtype = GGMLQuantizationType[type_name]
            data = quantize(values, qtype)
            writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return os.fspath(dst)


# --- corrupt variants --------------------------------------------------------------

_SCALAR_SIZES = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}


@dataclass
class KVField:
    key: str
    start: int        # offset of the key's u64 length
    type_at: int      # offset of the u32 value type


@dataclass
class TensorField:
    name: str
    n_dims_at: int    # u32 n_dims, followed by n_dims u64 ne
    ne: list[int]
    type_at: int      # u32 ggml type
    offset_at: int    # u64 data offset, relative to the data section
    offset: int


@dataclass
class GGUFLayout:
    """Byte offsets of a GGUF v3 file's parts, parsed here rather than by gguf-py
    so that patches hit exactly the field they mean to."""
    size: int
    kv_start: int
    ti_start: int
    data_start: int
    kvs: list[KVField]
    tensors: list[TensorField]

    def tensor(self, name: str) -> TensorField:
        return next(t for t in self.tensors if t.name == name)


class _Cursor:
    def __init__(self, buf: bytes, pos: int = 0):
        self.buf, self.pos = buf, pos

    def take(self, fmt: str):
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return self.buf[self.pos - n:self.pos].decode("utf-8")

    def skip_value(self, vtype: GGUFValueType) -> None:
        if vtype == GGUFValueType.STRING:
            self.string()
        elif vtype == GGUFValueType.ARRAY:
            item_type, count = GGUFValueType(self.take("I")), self.take("Q")
            for _ in range(count):
                self.skip_value(item_type)
        else:
            self.pos += _SCALAR_SIZES[vtype]


def gguf_layout(path) -> GGUFLayout:
    buf = Path(path).read_bytes()
    cur = _Cursor(buf, 8)  # past magic and version
    n_tensors, n_kv = cur.take("Q"), cur.take("Q")
    kv_start = cur.pos
    kvs, alignment = [], 32
    for _ in range(n_kv):
        start, key = cur.pos, cur.string()
        type_at, vtype = cur.pos, GGUFValueType(cur.take("I"))
        value_at = cur.pos
        cur.skip_value(vtype)
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", buf, value_at)[0]
        kvs.append(KVField(key, start, type_at))
    ti_start = cur.pos
    tensors = []
    for _ in range(n_tensors):
        name, n_dims_at = cur.string(), cur.pos
        ne = [cur.take("Q") for _ in range(cur.take("I"))]
        type_at, _ = cur.pos, cur.take("I")
        offset_at, offset = cur.pos, cur.take("Q")
        tensors.append(TensorField(name, n_dims_at, ne, type_at, offset_at, offset))
    data_start = -(-cur.pos // alignment) * alignment
    return GGUFLayout(len(buf), kv_start, ti_start, data_start, kvs, tensors)


def _patch(buf: bytes, *edits: tuple[int, str, int]) -> bytes:
    out = bytearray(buf)
    for at, fmt, value in edits:
        struct.pack_into("<" + fmt, out, at, value)
    return bytes(out)


def _byte_variants(buf: bytes, lay: GGUFLayout) -> dict[str, bytes]:
    """Corruptions of one file's bytes: each breaks one rule, of GGUF or of a llama's shapes."""
    first, second, last = lay.tensors[0], lay.tensors[1], lay.tensors[-1]
    ffn_up = lay.tensor("blk.0.ffn_up.weight")
    huge = 1 << 60
    return {
        "truncated_header": buf[:12],
        "truncated_kv": buf[:(lay.kv_start + lay.ti_start) // 2],
        "truncated_tensor_info": buf[:(lay.ti_start + lay.data_start) // 2],
        "truncated_data": buf[:(lay.data_start + lay.size) // 2],
        "bad_magic": b"GGUX" + buf[4:],
        "version_99": _patch(buf, (4, "I", 99)),
        "n_tensors_huge": _patch(buf, (8, "Q", huge)),
        "n_kv_huge": _patch(buf, (16, "Q", huge)),
        "string_len_huge": _patch(buf, (lay.kvs[0].start, "Q", huge)),
        "kv_type_99": _patch(buf, (lay.kvs[0].type_at, "I", 99)),
        "n_dims_99": _patch(buf, (first.n_dims_at, "I", 99)),
        "dims_huge": _patch(buf, (first.n_dims_at + 4, "Q", 1 << 40)),
        # 2^32 * 2^32 wraps to 0 in 64 bits: an element count that looks harmless.
        "dims_overflow": _patch(buf, (first.n_dims_at + 4, "Q", 1 << 32), (first.n_dims_at + 12, "Q", 1 << 32)),
        "type_99": _patch(buf, (first.type_at, "I", 99)),
        "offset_past_end": _patch(buf, (last.offset_at, "Q", lay.size)),
        "offset_misaligned": _patch(buf, (second.offset_at, "Q", second.offset + 1)),
        "offset_overlap": _patch(buf, (second.offset_at, "Q", first.offset)),
        # ne swapped to {n_ff, n_embd}: same bytes, so the GGUF stays valid, but n_out is
        # n_embd where a llama needs n_ff (llama.cpp demands contiguous offsets, so
        # shrinking a tensor instead would already break the GGUF layer).
        "wrong_shape_ffn_up": _patch(buf, (ffn_up.n_dims_at + 4, "Q", ffn_up.ne[1]), (ffn_up.n_dims_at + 12, "Q", ffn_up.ne[0])),
    }


def corrupt_variants(good_path, out_dir, **write_kwargs) -> list[tuple[str, str]]:
    """Bad files derived from good_path, as [(name, path)].

    Byte-level corruptions patch good_path itself. Semantic ones (valid GGUF, not a
    loadable llama for this runtime) are rewritten with write_llama_gguf(**write_kwargs),
    so pass the kwargs good_path was written with. "type_iq4_nl" is valid for llama.cpp
    too; every other variant is rejected by it.
    """
    os.makedirs(out_dir, exist_ok=True)
    buf = Path(good_path).read_bytes()
    out = []
    for name, data in _byte_variants(buf, gguf_layout(good_path)).items():
        path = os.path.join(out_dir, name + ".gguf")
        Path(path).write_bytes(data)
        out.append((name, path))
    # IQ4_NL (a type llama.cpp runs and this runtime does not) on one weight
    semantic = {
        "missing_tensor": dict(omit_tensor="blk.0.ffn_up.weight"),
        "missing_key": dict(omit_key="llama.block_count"),
        "arch_mamba": dict(arch="mamba"),
        "type_iq4_nl": dict(tensor_types={"blk.0.ffn_down.weight": "IQ4_NL"}),
    }
    for name, overrides in semantic.items():
        path = os.path.join(out_dir, name + ".gguf")
        out.append((name, write_llama_gguf(path, **{**write_kwargs, **overrides})))
    return out



def write_profiled_relu_gguf(folder, weight_type: str, *, n_layer: int = 3, n_ff: int = 640, seed: int = 7) -> str:
    """A ReLU-GLU model as convert/add_profile.py would leave it, with an exact predictor:
    fc1 = [I; -I] and fc2 = [W_gate, -W_gate] give logits = W_gate x, so threshold 0 picks
    exactly the neurons whose gate fires. Also ffn_down_t (F32, from F32 ffn_down), a power-law
    ffn_freq over a random order of ids, and an up bias (firing depends on gate alone, so the
    oracle stays exact; a layout must still pick the right bias entries)."""
    from gguf import GGUFReader

    from reference import dequantize_tensor

    folder = Path(folder)
    plain = write_llama_gguf(folder / f"plain-{weight_type}.gguf", weight_type=weight_type, n_layer=n_layer,
                             n_ff=n_ff, tensor_types={f"blk.{i}.ffn_down.weight": "F32" for i in range(n_layer)})
    tensors = {t.name: t for t in GGUFReader(plain).tensors}
    rng = np.random.default_rng(seed)
    extra = {}
    for il in range(n_layer):
        gate = dequantize_tensor(tensors[f"blk.{il}.ffn_gate.weight"])
        eye = np.eye(gate.shape[1], dtype=np.float32)
        extra[f"blk.{il}.fc1.weight"] = np.concatenate([eye, -eye])
        extra[f"blk.{il}.fc2.weight"] = np.concatenate([gate, -gate], axis=1)
        extra[f"blk.{il}.ffn_down_t.weight"] = dequantize_tensor(tensors[f"blk.{il}.ffn_down.weight"]).T.copy()
        extra[f"blk.{il}.ffn_freq"] = rng.permutation((np.arange(n_ff) + 1.0) ** -0.8).astype(np.float32)
        extra[f"blk.{il}.ffn_up.bias"] = rng.standard_normal(n_ff).astype(np.float32) * 0.1
    kv = {"powerinfer.layer_thresholds": ([0.0] * n_layer, GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
          "powerinfer.activation": ("relu_glu", GGUFValueType.STRING, None)}
    return rewrite_gguf(plain, folder / f"profiled-{weight_type}.gguf", extra, kv)


def powerinfer_layout(src, dst, rank: int = 16, exact: bool = False) -> str:
    """src as PowerInfer's converter lays out an OPT or Falcon file: the magic PWRI, ffn_down
    transposed to ffn_down_t (its bias renamed with it), and random predictors fc1, fc2; with
    exact, the oracle instead (fc1 = [I; -I], fc2 = [W_up, -W_up]: the logit is up's value, so
    threshold 0 picks exactly the neurons a ReLU of up lets through, when up has no bias)."""
    from gguf import GGUFReader

    from reference import dequantize_tensor

    tensors = {t.name: t for t in GGUFReader(src).tensors}
    rng = np.random.default_rng(5)
    extra, drop = {}, set()
    for name, t in tensors.items():
        if ".ffn_down." in name:
            drop.add(name)
            extra[name.replace("ffn_down", "ffn_down_t")] = dequantize_tensor(t).T.copy()
        if name.endswith("ffn_up.weight"):
            n_ff, n_embd = dequantize_tensor(t).shape
            blk = name[:-len("ffn_up.weight")]
            if exact:
                up, eye = dequantize_tensor(t), np.eye(n_embd, dtype=np.float32)
                extra[blk + "fc1.weight"] = np.concatenate([eye, -eye])
                extra[blk + "fc2.weight"] = np.concatenate([up, -up], axis=1)
            else:
                extra[blk + "fc1.weight"] = rng.standard_normal((rank, n_embd)).astype(np.float32)
                extra[blk + "fc2.weight"] = rng.standard_normal((n_ff, rank)).astype(np.float32)
    path = rewrite_gguf(src, dst, extra, drop=frozenset(drop))
    with open(path, "r+b") as f:
        f.write(b"PWRI")
    return path


def write_profiled_ungated(folder, weight_type: str, *, arch: str = "falcon", n_ff: int = 256, n_layer: int = 2) -> str:
    """ReluFalcon or OPT (an FFN without a gate) in PowerInfer's layout with the exact predictor,
    and random profiled frequencies for placing its neurons."""
    folder = Path(folder)
    plain = write_llama_gguf(folder / f"{arch}-{weight_type}.gguf", arch=arch, weight_type=weight_type, n_ff=n_ff,
                             n_layer=n_layer)
    rng = np.random.default_rng(0)
    freqs = {f"blk.{il}.ffn_freq": rng.random(n_ff).astype(np.float32) for il in range(n_layer)}
    profiled = rewrite_gguf(plain, folder / f"{arch}-{weight_type}-freq.gguf", freqs)
    return powerinfer_layout(profiled, folder / f"{arch}-{weight_type}.powerinfer.gguf", exact=True)

