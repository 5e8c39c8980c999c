"""Numpy reference forward pass for GGUF `llama` models, the yardstick the native runtime is checked against.

Weights are read with gguf.GGUFReader and dequantized once with gguf.quants to
float32; matmuls run in float32, norms, RoPE angles and softmax in float64.
It follows llama.cpp's llama graph (src/models/llama.cpp):

    x = token_embd[tokens]
    per layer:  h = rmsnorm(x) * attn_norm
                x += attn_output @ attention(rope(attn_q @ h), rope(attn_k @ h), attn_v @ h)
                f = rmsnorm(x) * ffn_norm
                x += ffn_down @ act(ffn_gate @ f, ffn_up @ f)
    logits = output @ (rmsnorm(x) * output_norm)      (output = token_embd when tied)

Other architectures, each from its own definition: qwen2 (biases, NeoX rope), phi3 (fused
qkv and gate-up), llama with a sliding window, falcon (LayerNorm, fused qkv, parallel block
x + attn(ln(x)) + ffn(ln(x)), GELU without a gate) and PowerInfer's opt (LayerNorm, learned
positions, biases, ReLU without a gate, no rope).

RoPE is llama.cpp's "normal" mode, which rotates adjacent pairs (x[2i], x[2i+1]).
No Q/K permutation is needed here: convert_hf_to_gguf already permutes HF's
rotate-half Q/K rows so that adjacent-pair rope on the GGUF tensors is right.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize

ACTIVATIONS = {
    # sigmoid(x) = (1 + tanh(x/2)) / 2 cannot overflow, unlike 1 / (1 + exp(-x)).
    "silu_glu": lambda gate, up: gate * 0.5 * (1.0 + np.tanh(0.5 * gate)) * up,  # SwiGLU, llama's own
    "relu_glu": lambda gate, up: np.maximum(gate, 0) * up,           # ReluLLaMA, ProSparse
    "relu_relu_glu": lambda gate, up: np.maximum(gate, 0) * np.maximum(up, 0),  # dReLU (bamboo)
    # FFNs without a gate: act(up)
    "relu": lambda up, _: np.maximum(up, 0),                         # OPT, ReluFalcon
    # tanh GELU, which llama.cpp's falcon takes (HF's Falcon uses the erf form)
    "gelu": lambda up, _: 0.5 * up * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (up + 0.044715 * up**3))),
}


@dataclass
class Layer:
    """One block's weights, float32, [n_out, n_in] like the GGUF rows; biases may be None."""
    attn_norm: np.ndarray    # [n_embd]
    attn_q: np.ndarray       # [n_head * head_dim, n_embd]
    attn_k: np.ndarray       # [n_head_kv * head_dim, n_embd]
    attn_v: np.ndarray       # [n_head_kv * head_dim, n_embd]
    attn_output: np.ndarray  # [n_embd, n_head * head_dim]
    ffn_norm: np.ndarray     # [n_embd]
    ffn_gate: np.ndarray | None  # [n_ff, n_embd]; None without a gate (opt, falcon)
    ffn_up: np.ndarray       # [n_ff, n_embd]
    ffn_down: np.ndarray     # [n_embd, n_ff]
    attn_norm_b: np.ndarray | None = None  # LayerNorm biases
    ffn_norm_b: np.ndarray | None = None
    attn_q_b: np.ndarray | None = None
    attn_k_b: np.ndarray | None = None
    attn_v_b: np.ndarray | None = None
    attn_output_b: np.ndarray | None = None
    ffn_gate_b: np.ndarray | None = None
    ffn_up_b: np.ndarray | None = None
    ffn_down_b: np.ndarray | None = None


ARCHS = ("llama", "qwen2", "phi3", "opt", "falcon")
DEFAULT_ACT = {"opt": "relu", "falcon": "gelu"}  # the rest: silu_glu
LAYER_WEIGHTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
LAYER_BIASES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def dequantize_tensor(t: ReaderTensor) -> np.ndarray:
    """float32 array in numpy order, i.e. GGUF ne reversed: [n_out, n_in] for weights."""
    return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * weight).astype(np.float32)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(axis=-1, keepdims=True)
    return (centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps) * weight + bias).astype(np.float32)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y if b is None else y + b


def softcap(z: np.ndarray, cap: float) -> np.ndarray:
    return cap * np.tanh(z / cap) if cap else z


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


class ReferenceModel:
    def __init__(self, path, act: str | None = None):
        reader = GGUFReader(path)
        # Tokenizer arrays are skipped: slow to unpack and not needed for logits.
        self._kv = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("tokenizer.")}
        arch = self._kv["general.architecture"]
        if arch not in ARCHS:
            raise ValueError(f"reference supports arch {', '.join(ARCHS)}, not {arch!r}")
        self.arch = arch
        self.neox = arch in ("qwen2", "phi3", "falcon")  # NeoX rope (pairs i, i + n_rot/2)
        self.rope = arch != "opt"  # OPT has learned positions instead
        # falcon: attention and FFN both read the block's input: x + attn(ln(x)) + ffn(ln(x))
        self.parallel = arch == "falcon"
        self.layer_norm = arch in ("opt", "falcon")
        self.act = ACTIVATIONS[act or DEFAULT_ACT.get(arch, "silu_glu")]
        self.n_layer = self._hp("block_count")
        self.n_head = self._hp("attention.head_count")
        self.n_head_kv = self._hp("attention.head_count_kv", self.n_head)
        self.head_dim = self._hp("attention.key_length", self._hp("embedding_length") // self.n_head)
        self.n_rot = self._hp("rope.dimension_count", self.head_dim)
        # LayerNorm's epsilon; OPT's is 1e-5, which PowerInfer's converter does not write
        self.eps = self._hp("attention.layer_norm_epsilon", 1e-5) if self.layer_norm else \
            self._hp("attention.layer_norm_rms_epsilon")
        self.freq_base = self._hp("rope.freq_base", 10000.0)
        self.freq_scale = self._rope_freq_scale()
        # Mistral-style llama: each position sees itself and the window - 1 before it (0: no window)
        self.window = self._hp("attention.sliding_window", 0) if arch == "llama" else 0
        # soft-capping (Gemma 2's keys; any arch here): cap * tanh(z / cap) of the attention
        # scores and of the final logits, when the metadata gives a cap
        self.attn_softcap = self._hp("attn_logit_softcapping", 0.0)
        self.final_softcap = self._hp("final_logit_softcapping", 0.0)

        tensors = {t.name: t for t in reader.tensors}

        def get(name: str, required: bool = True) -> np.ndarray | None:
            if name in tensors:
                return dequantize_tensor(tensors[name])
            if required:
                raise ValueError(f"missing tensor {name!r}")
            return None

        self.token_embd = get("token_embd.weight")                 # [n_vocab, n_embd]
        self.output_norm = get("output_norm.weight")               # [n_embd]
        self.output_norm_b = get("output_norm.bias", required=self.layer_norm)
        # OPT's learned positions: HF's OPTLearnedPositionalEmbedding reads row pos + 2
        self.position_embd = get("position_embd.weight") if arch == "opt" else None
        self.output = get("output.weight", required=False)         # [n_vocab, n_embd]
        if self.output is None:
            self.output = self.token_embd                          # tied
        self.rope_freqs = get("rope_freqs.weight", required=False)  # [n_rot/2] llama3 factors
        self.output_b = get("output.bias", required=False)           # [n_vocab]
        self.layers = [self._layer(get, i) for i in range(self.n_layer)]

    def _layer(self, get, i: int) -> Layer:
        w = {f: get(f"blk.{i}.{f}.weight", required=False) for f in LAYER_WEIGHTS + ("attn_qkv",)}
        if self.arch == "phi3":
            # Phi-3's qkv_proj rows are [q; k; v], and its gate_up_proj rows [gate; up].
            q_dim, kv_dim = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
            if w["attn_q"] is None:
                w["attn_q"], w["attn_k"], w["attn_v"] = np.split(get(f"blk.{i}.attn_qkv.weight"), [q_dim, q_dim + kv_dim])
            w["ffn_gate"], w["ffn_up"] = np.split(get(f"blk.{i}.ffn_up.weight"), 2)
        if self.arch == "falcon":
            # q, k, v rows [q; k; v] (the converter regroups HF's per-kv-group layout); the FFN's
            # norm is attn_norm (falcon-7b's input_layernorm, falcon-40b's ln_mlp), and the
            # attention's is attn_norm_2 (falcon-40b's ln_attn) when present
            q_dim, kv_dim = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
            w["attn_q"], w["attn_k"], w["attn_v"] = np.split(get(f"blk.{i}.attn_qkv.weight"), [q_dim, q_dim + kv_dim])
            w["ffn_norm"] = w["attn_norm"]
            w["attn_norm"] = get(f"blk.{i}.attn_norm_2.weight", required=False)
            norm_b = {"ffn_norm_b": get(f"blk.{i}.attn_norm.bias"), "attn_norm_b": get(f"blk.{i}.attn_norm_2.bias", False)}
            if w["attn_norm"] is None:
                w["attn_norm"], norm_b["attn_norm_b"] = w["ffn_norm"], norm_b["ffn_norm_b"]
        else:
            norm_b = {f + "_b": get(f"blk.{i}.{f}.bias", required=self.layer_norm) for f in ("attn_norm", "ffn_norm")}
        del w["attn_qkv"]
        missing = [f for f in LAYER_WEIGHTS if w[f] is None and not (f == "ffn_gate" and self.arch in DEFAULT_ACT)]
        if missing:
            raise ValueError(f"missing tensor blk.{i}.{missing[0]}.weight")
        return Layer(**w, **norm_b, **{f + "_b": get(f"blk.{i}.{f}.bias", required=False) for f in LAYER_BIASES})

    def _hp(self, key: str, default=None):
        return self._kv.get(f"{self.arch}.{key}", default)

    def _rope_freq_scale(self) -> float:
        # As llama.cpp: type defaults to linear; the factor key is optional (old name scale_linear).
        kind = self._hp("rope.scaling.type", "linear")
        if kind == "none":
            return 1.0
        if kind != "linear":
            raise NotImplementedError(f"rope scaling {kind!r}")
        factor = self._hp("rope.scaling.factor", self._hp("rope.scale_linear", 0.0))
        return 1.0 if factor == 0.0 else 1.0 / factor

    def _rope_tables(self, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin of theta[pos, i] = pos * freq_scale * base^(-2i/n_rot) / rope_freqs[i]; [T, n_rot/2]."""
        inv_freq = self.freq_base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        if self.rope_freqs is not None:
            inv_freq = inv_freq / self.rope_freqs
        theta = np.arange(n_tokens, dtype=np.float64)[:, None] * self.freq_scale * inv_freq[None, :]
        return np.cos(theta), np.sin(theta)

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Rotate pairs of the first n_rot dims of x [T, heads, head_dim]: adjacent ones, or
        (i, i + n_rot/2) in NeoX mode."""
        out = x.astype(np.float64)
        half = self.n_rot // 2
        first, second = (slice(0, half), slice(half, self.n_rot)) if self.neox else \
            (slice(0, self.n_rot, 2), slice(1, self.n_rot, 2))
        x0, x1 = out[..., first].copy(), out[..., second].copy()
        c, s = cos[:, None, :], sin[:, None, :]
        out[..., first] = x0 * c - x1 * s
        out[..., second] = x0 * s + x1 * c
        return out.astype(np.float32)

    def _norm(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        if self.layer_norm:
            return layer_norm(x, weight, bias, self.eps)
        return rms_norm(x, weight, self.eps)

    def _attention(self, layer: Layer, h: np.ndarray, cos, sin) -> np.ndarray:
        T, hd = h.shape[0], self.head_dim
        rope = self._rope if self.rope else lambda x, cos, sin: x
        q = rope(linear(h, layer.attn_q, layer.attn_q_b).reshape(T, self.n_head, hd), cos, sin)
        k = rope(linear(h, layer.attn_k, layer.attn_k_b).reshape(T, self.n_head_kv, hd), cos, sin)
        v = linear(h, layer.attn_v, layer.attn_v_b).reshape(T, self.n_head_kv, hd)
        # Grouped-query: query head j reads kv head j // (n_head / n_head_kv), as ggml's broadcast.
        group = self.n_head // self.n_head_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k, dtype=np.float64) / np.sqrt(hd)  # [H, T, T]
        scores = softcap(scores, self.attn_softcap)
        scores[:, self._masked(T)] = -np.inf
        out = np.einsum("hqk,khd->qhd", softmax(scores), v.astype(np.float64)).astype(np.float32)
        return linear(out.reshape(T, self.n_head * hd), layer.attn_output, layer.attn_output_b)

    def _masked(self, T: int) -> np.ndarray:
        """[T, T] True where query position i may not see key position j: j > i (causal), or
        j <= i - window with a sliding window."""
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        return (j > i) | ((i - j >= self.window) if self.window else False)

    def forward(self, tokens, capture: bool = False):
        """Logits [T, n_vocab] for every position; with capture also, per layer,
        {"ffn_in": [T, n_embd] normed FFN input (what gate/up multiply),
         "act": [T, n_ff] activation product fed to ffn_down}."""
        tokens = np.asarray(tokens, dtype=np.int64)
        x = self.token_embd[tokens]                     # [T, n_embd] residual stream
        if self.position_embd is not None:
            x = x + self.position_embd[np.arange(len(tokens)) + 2]
        cos, sin = self._rope_tables(len(tokens))
        captured = []
        for layer in self.layers:
            attn = self._attention(layer, self._norm(x, layer.attn_norm, layer.attn_norm_b), cos, sin)
            if not self.parallel:
                x = x + attn
            f = self._norm(x, layer.ffn_norm, layer.ffn_norm_b)
            up = linear(f, layer.ffn_up, layer.ffn_up_b)
            a = self.act(up, None) if layer.ffn_gate is None else self.act(linear(f, layer.ffn_gate, layer.ffn_gate_b), up)
            x = x + linear(a, layer.ffn_down, layer.ffn_down_b)
            if self.parallel:
                x = x + attn
            if capture:
                captured.append({"ffn_in": f, "act": a})
        logits = linear(self._norm(x, self.output_norm, self.output_norm_b), self.output, self.output_b)
        logits = softcap(logits, self.final_softcap)
        return (logits, captured) if capture else logits

    def logits(self, tokens) -> np.ndarray:
        return self.forward(tokens)


def compare_logits(ref: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """Top-1 agreement and KL(ref || other) per position (mean, median and max), for [T, n_vocab] logits."""
    logp = lambda z: np.log(softmax(np.asarray(z, dtype=np.float64)))  # noqa: E731
    lp, lq = logp(ref), logp(other)
    kl = np.sum(np.exp(lp) * (lp - lq), axis=-1)
    return {
        "top1": float(np.mean(ref.argmax(-1) == other.argmax(-1))),
        "kl_mean": float(kl.mean()),
        "kl_median": float(np.median(kl)),
        "kl_max": float(kl.max()),
    }
