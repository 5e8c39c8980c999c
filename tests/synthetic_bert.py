"""Small synthetic `bert` and `nomic-bert` GGUFs (encoder-only embedding models), laid out as
llama.cpp's converter (conversion/bert.py) writes real ones: a WordPiece vocab in the
phantom-space convention, token types, learned positions (bert) or rope (nomic-bert), and the
post-norms of each layer. The tensor generation is synthetic.py's.
"""
from __future__ import annotations

import os

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, TokenType

from synthetic import _TensorPlan, _typed, write_plan

ARCHS = ("bert", "nomic-bert")
# BERT's own layout of the specials: the ids llama.cpp defaults to for a "bert" vocab
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
WORDS = ("the quick brown fox jumps over lazy dog hello world embedding model is a of and to in it "
         "that for on with as was he at by this be from or an are not but what all were when we there "
         "can you your which their said if do will each about how up out them then she many some so "
         "these would other into has more her two like him see time could no make than first been its "
         "who now people my made over did down only way find use may water long little very after "
         "words called just where most know get through back much before go good new write our used "
         "me man too any day same right look think also around another came come work three word must "
         "because does part even place well such here take why things help put years different away "
         "again off went old number great tell men say small every found still between name should "
         "home big give air line set own under read last never us left end along while might next "
         "sound below saw something thought both few those always looked show large often together "
         "asked house don world going want school important until form food keep children feet land "
         "side without boy once animals life enough took sometimes four head above kind began almost "
         "live page got earth need far hand high year mother light parts country father let night "
         "following picture being study second eyes soon times story boys since white days ever paper "
         "hard near sentence better best across during today others however sure means knew its try "
         "told young miles sun ways thing whole hear example heard several change answer room sea "
         "against top turned learn point city play toward five using himself usually café naïve").split()
PIECES = ("s ing ed er ly es tion al ness ment able ful less est ous ive ize ity ism ist y n t e r a o "
          "i l d c m p h u g b f k w v j x q z").split()
PUNCT = list(".,!?;:'\"()[]{}-_/\\@#$%^&*+=<>|~`") + ["中", "文", "日"]


def wordpiece_vocab() -> tuple[list[str], list[int]]:
    """[PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK] as in BERT's vocab, then word-start
    pieces ("▁word"), continuation pieces (a WordPiece "##ing" is stored as "ing") and
    punctuation, digits and a few CJK characters as word starts."""
    specials = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [TokenType.CONTROL if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") else TokenType.NORMAL
             for t in specials]
    # the converter keeps control tokens as they are and prefixes the other whole words with ▁
    tokens = [t if ty == TokenType.CONTROL else "\u2581" + t for t, ty in zip(specials, types)]
    starts = ["\u2581" + w for w in dict.fromkeys(WORDS + PUNCT + list("0123456789"))]
    tokens += starts + PIECES
    types += [TokenType.NORMAL] * (len(starts) + len(PIECES))
    return tokens, [int(t) for t in types]


def _tensor_plan(arch: str, n_vocab: int, n_embd: int, n_layer: int, n_ff: int, n_ctx_train: int,
                 weight_type: str, n_token_types: int, fused_qkv: bool, qkv_bias: bool) -> list[_TensorPlan]:
    wtype, f32 = GGMLQuantizationType[weight_type], GGMLQuantizationType.F32

    def linear(name, n_out, n_in):
        return _TensorPlan(name, (n_out, n_in), wtype, 1.0 / np.sqrt(n_in))

    def layer_norm(name):
        return [_TensorPlan(name + ".weight", (n_embd,), f32, 0.1, is_norm=True),
                _TensorPlan(name + ".bias", (n_embd,), f32, 0.1)]

    def bias(name, n):
        return _TensorPlan(name, (n,), f32, 0.1)

    plan = [_TensorPlan("token_embd.weight", (n_vocab, n_embd), wtype, 1.0),
            _TensorPlan("token_types.weight", (n_token_types, n_embd), f32, 1.0),
            *layer_norm("token_embd_norm")]
    if arch == "bert":
        plan.append(_TensorPlan("position_embd.weight", (n_ctx_train, n_embd), f32, 1.0))
    for i in range(n_layer):
        blk = f"blk.{i}."
        if fused_qkv:
            plan += [linear(blk + "attn_qkv.weight", 3 * n_embd, n_embd)]
            plan += [bias(blk + "attn_qkv.bias", 3 * n_embd)] if qkv_bias else []
        else:
            for t in ("attn_q", "attn_k", "attn_v"):
                plan += [linear(blk + t + ".weight", n_embd, n_embd)] + ([bias(blk + t + ".bias", n_embd)] if qkv_bias else [])
        if arch == "bert":  # BertModel: every bias, GELU FFN
            plan += [linear(blk + "attn_output.weight", n_embd, n_embd), bias(blk + "attn_output.bias", n_embd),
                     *layer_norm(blk + "attn_output_norm"),
                     linear(blk + "ffn_up.weight", n_ff, n_embd), bias(blk + "ffn_up.bias", n_ff),
                     linear(blk + "ffn_down.weight", n_embd, n_ff), bias(blk + "ffn_down.bias", n_embd),
                     *layer_norm(blk + "layer_output_norm")]
        else:  # nomic-embed-text: no biases, SwiGLU FFN
            plan += [linear(blk + "attn_output.weight", n_embd, n_embd),
                     *layer_norm(blk + "attn_output_norm"),
                     linear(blk + "ffn_up.weight", n_ff, n_embd), linear(blk + "ffn_gate.weight", n_ff, n_embd),
                     linear(blk + "ffn_down.weight", n_embd, n_ff),
                     *layer_norm(blk + "layer_output_norm")]
    return plan


def write_bert_gguf(path, *, arch: str = "bert", n_embd: int = 64, n_layer: int = 2, n_head: int = 4,
                    n_ff: int = 128, n_ctx_train: int = 512, weight_type: str = "F32", pooling: int | None = 1,
                    n_token_types: int = 2, lowercase: bool | None = True, seed: int = 0,
                    fused_qkv: bool | None = None, qkv_bias: bool | None = None, omit_tensor: str | None = None,
                    extra_tensors: dict[str, int] | None = None, extra_kv=None) -> str:
    """Write a random-weight encoder GGUF of `arch` and return its path.

    fused_qkv, qkv_bias: one attn_qkv instead of attn_q/k/v, with biases; None: as the converter
    writes the arch (bert: separate, with biases; nomic-bert: fused, without);
    pooling: {arch}.pooling_type (llama.cpp's 1 mean, 2 cls, 3 last; None leaves the key out);
    lowercase: tokenizer.ggml.normalizer.lowercase (None leaves it out, as older converters did);
    omit_tensor: leave that tensor out; extra_tensors: {name: length} F32 vectors added (loader
    tests); extra_kv: keys added or overriding.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}")
    tokens, types = wordpiece_vocab()
    fused_qkv = arch == "nomic-bert" if fused_qkv is None else fused_qkv
    qkv_bias = arch == "bert" if qkv_bias is None else qkv_bias
    plan = _tensor_plan(arch, len(tokens), n_embd, n_layer, n_ff, n_ctx_train, weight_type, n_token_types,
                        fused_qkv, qkv_bias)
    if omit_tensor is not None:
        kept = [t for t in plan if t.name != omit_tensor]
        if len(kept) == len(plan):
            raise KeyError(f"omit_tensor: no tensor {omit_tensor!r}")
        plan = kept
    plan += [_TensorPlan(name, (n,), GGMLQuantizationType.F32, 0.1) for name, n in (extra_tensors or {}).items()]
    u32, f32, s, arr = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING, GGUFValueType.ARRAY
    kv = {
        "general.name": ("synthetic", s),
        f"{arch}.context_length": (n_ctx_train, u32),
        f"{arch}.embedding_length": (n_embd, u32),
        f"{arch}.block_count": (n_layer, u32),
        f"{arch}.feed_forward_length": (n_ff, u32),
        f"{arch}.attention.head_count": (n_head, u32),
        f"{arch}.attention.layer_norm_epsilon": (1e-12, f32),
        f"{arch}.attention.causal": (False, GGUFValueType.BOOL),
        "tokenizer.ggml.model": ("bert", s),
        "tokenizer.ggml.pre": ("default", s),
        "tokenizer.ggml.tokens": (tokens, arr),
        "tokenizer.ggml.token_type": (types, arr),
        "tokenizer.ggml.token_type_count": (n_token_types, u32),
        "tokenizer.ggml.unknown_token_id": (UNK, u32),
        "tokenizer.ggml.seperator_token_id": (SEP, u32),
        "tokenizer.ggml.padding_token_id": (PAD, u32),
        "tokenizer.ggml.cls_token_id": (CLS, u32),
        "tokenizer.ggml.mask_token_id": (MASK, u32),
    }
    if arch == "nomic-bert":
        kv[f"{arch}.rope.freq_base"] = (1000.0, f32)
    if pooling is not None:
        kv[f"{arch}.pooling_type"] = (pooling, u32)
    if lowercase is not None:
        kv["tokenizer.ggml.normalizer.lowercase"] = (lowercase, GGUFValueType.BOOL)
    kv.update({k: _typed(v) for k, v in (extra_kv or {}).items()})

    writer = GGUFWriter(os.fspath(path), arch)
    for key, (value, vtype) in kv.items():
        writer.add_key_value(key, value, vtype)
    write_plan(writer, plan, seed)
    return path
