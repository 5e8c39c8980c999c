"""Thin typed wrappers over the native handles: a loaded model and a run context, and the
typed results and options of their calls.

Ownership: each wrapper owns its handle through `ffi.gc` and also frees it on `close()`.
A context keeps a reference to its model so the model cannot be freed first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ._ffi import check, ffi, lib

# numpy dtypes of GGUF's numeric metadata types (PI_META_*)
_META_DTYPES = {
    lib.PI_META_UINT8: np.uint8, lib.PI_META_INT8: np.int8, lib.PI_META_UINT16: np.uint16,
    lib.PI_META_INT16: np.int16, lib.PI_META_UINT32: np.uint32, lib.PI_META_INT32: np.int32,
    lib.PI_META_FLOAT32: np.float32, lib.PI_META_BOOL: np.bool_, lib.PI_META_UINT64: np.uint64,
    lib.PI_META_INT64: np.int64, lib.PI_META_FLOAT64: np.float64,
}
_FLOAT_TYPES = (lib.PI_META_FLOAT32, lib.PI_META_FLOAT64)
_UNSIGNED_TYPES = (lib.PI_META_UINT8, lib.PI_META_UINT16, lib.PI_META_UINT32, lib.PI_META_UINT64)

ACTIVATIONS = {lib.PI_ACT_SILU_GLU: "silu_glu", lib.PI_ACT_RELU_GLU: "relu_glu",
               lib.PI_ACT_RELU_RELU_GLU: "relu_relu_glu", lib.PI_ACT_GELU_GLU: "gelu_glu",
               lib.PI_ACT_RELU: "relu", lib.PI_ACT_GELU: "gelu"}


class Device(IntEnum):
    """Where the device side of the hot/cold split, or of layer offload, runs (PI_DEVICE_*)."""
    NONE = lib.PI_DEVICE_NONE  # everything on the CPU
    HOST = lib.PI_DEVICE_HOST  # a stand-in on a host thread: the split without a GPU (tests, CI)
    CUDA = lib.PI_DEVICE_CUDA  # CUDA device 0


class Sparse(IntEnum):
    """Which tokens run only the FFN neurons the predictors pick (PI_SPARSE_*)."""
    OFF = lib.PI_SPARSE_OFF        # dense everywhere: the exact result
    DECODE = lib.PI_SPARSE_DECODE  # one-token steps only; prompts run dense
    ALL = lib.PI_SPARSE_ALL        # prompts too

    @classmethod
    def from_option(cls, sparse: bool | str) -> Sparse:
        """Llama's sparse=: True or "decode", "all", or False."""
        modes = {False: cls.OFF, True: cls.DECODE, "decode": cls.DECODE, "all": cls.ALL}
        if sparse not in modes:
            raise ValueError(f"sparse must be None, True, False, 'decode' or 'all', not {sparse!r}")
        return modes[sparse]

    @property
    def label(self) -> str:
        return {Sparse.OFF: "dense", Sparse.DECODE: "decode", Sparse.ALL: "all"}[self]


DEFAULT_KEY = "powerinfer.sparse_default"    # BOOL: the converter measured sparse decode to pay here
DECISION_KEY = "powerinfer.sparse_decision"  # STRING: why


def sparse_policy(option: bool | str | None, meta: dict, has_predictors: bool) -> tuple[Sparse, str]:
    """(mode, reason) of Llama's sparse= for a model: None follows the file's DEFAULT_KEY (sparse
    decode where it is absent, as for older converted files and PowerInfer's own); True, "decode",
    "all" and False override it. A model without predictors always runs dense. A decision key of
    the wrong type is a ValueError naming it."""
    default, decision = meta.get(DEFAULT_KEY), meta.get(DECISION_KEY)
    if default is not None and not isinstance(default, bool):
        raise ValueError(f"metadata key {DEFAULT_KEY} must be a BOOL, not {type(default).__name__} {default!r}")
    if decision is not None and not isinstance(decision, str):
        raise ValueError(f"metadata key {DECISION_KEY} must be a STRING, not {type(decision).__name__}")
    if option is not None:
        mode = Sparse.from_option(option)
        reason = f"sparse={option!r} given"
    elif default is None:
        mode, reason = Sparse.DECODE, f"the file has no {DEFAULT_KEY} key: sparse decode, the default"
    else:
        mode = Sparse.DECODE if default else Sparse.OFF
        reason = decision or f"{DEFAULT_KEY} = {str(default).lower()}"
    if not has_predictors:
        return Sparse.OFF, "the model has no predictors"
    return mode, reason


SKIP_KEY = "powerinfer.moe_skip_rows"               # BOOL: ReGLU experts measured faster skipping dead rows here
SKIP_DECISION_KEY = "powerinfer.moe_skip_decision"  # STRING: why


def moe_skip_option(option: bool | None) -> int:
    """pi_model_params.moe_skip_rows of Llama's moe_skip_rows=: None follows the file's SKIP_KEY
    (-1), True skips dead expert rows (1), False computes experts densely (0)."""
    if option is None:
        return -1
    if not isinstance(option, bool):
        raise ValueError(f"moe_skip_rows must be None, True or False, not {option!r}")
    return int(option)


def moe_skip_policy(option: bool | None, meta: dict, info: ModelInfo | None) -> tuple[str | None, str]:
    """(mode, reason) of what a model's ReGLU experts run, for the user: mode "skip" (the dead
    neurons' rows of a one-token expert are not read) or "dense", None for a model without ReGLU
    experts. `info` is the loaded model's (native chose the mode: info.moe_skip_rows); the reason
    is the file's SKIP_DECISION_KEY when the file chose. A decision key of the wrong type is a
    ValueError naming it (native refuses a SKIP_KEY of the wrong type)."""
    decision = meta.get(SKIP_DECISION_KEY)
    if decision is not None and not isinstance(decision, str):
        raise ValueError(f"metadata key {SKIP_DECISION_KEY} must be a STRING, not {type(decision).__name__}")
    if info is None or not info.n_expert or info.ffn_act != "relu_glu":
        return None, "the model has no ReGLU experts"
    mode = "skip" if info.moe_skip_rows else "dense"
    if option is not None:
        return mode, f"moe_skip_rows={option!r} given"
    if SKIP_KEY not in meta:
        return mode, f"the file has no {SKIP_KEY} key: dead expert rows skipped, the default"
    return mode, decision or f"{SKIP_KEY} = {str(meta[SKIP_KEY]).lower()}"


class KernelImpl(IntEnum):
    """The CPU kernels a context runs (pi_context_params.kernel_impl, which has no named constants)."""
    AUTO = 0    # the best the CPU supports
    SCALAR = 1  # the reference
    AVX2 = 2
    AVX512 = 3


@dataclass(frozen=True)
class ModelInfo:
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_rot: int
    norm_eps: float
    rope_freq_base: float
    rope_freq_scale: float
    ffn_act: str
    tied_output: bool
    causal: bool  # False: an encoder (bert, nomic-bert), embeddings only
    n_expert: int = 0       # an MoE FFN: experts per layer, routed per token, neurons each; 0 if dense
    n_expert_used: int = 0
    n_ff_exp: int = 0
    moe_skip_rows: bool = False  # ReGLU experts skip their dead neurons' rows (pi_model_params.moe_skip_rows)


@dataclass(frozen=True)
class LayerPlacement:
    n_hot: int           # positions [0, n_hot) of the layer's frequency order live on the device
    bytes: int
    coverage: float      # share of the layer's profiled activations those neurons serve
    fixed_on_device: bool  # the layer's attention (a parallel block's, and a model's routed from the layer's input (smallthinker), stays on the CPU), router and predictor fit first
    n_hot_expert_runs: int = 0  # an MoE layer's expert runs (PI_FFN_RUN neurons) on the device
    n_expert_runs: int = 0      # all its experts' runs; 0 in a dense layer
    expert_bytes: int = 0
    expert_coverage: float = 0.0  # share of the bytes a token is expected to read from its experts held


@dataclass(frozen=True)
class Placement:
    """Which FFN neurons and expert runs a device budget holds (pi_model_plan, native/src/placement.c).
    value: the FFN bytes a token is expected to read from the device; the greedy plan is within
    max_loss of the optimum, which is at most upper_bound_value (the LP relaxation)."""
    budget: int
    fixed_bytes: int
    neuron_bytes: int
    output_on_device: bool
    n_ff: int
    layers: list[LayerPlacement]
    expert_bytes: int = 0
    value: float = 0.0
    upper_bound_value: float = 0.0
    max_loss: float = 0.0

    @property
    def hot_neurons(self) -> int:
        return sum(x.n_hot for x in self.layers)

    @property
    def moe(self) -> bool:
        return any(x.n_expert_runs for x in self.layers)

    def table(self) -> str:
        """One line per layer: its hot neurons, or for an MoE model (whose FFNs are all experts:
        no predictors) its expert runs, of how many, their MiB and the share they cover."""
        mib = 1 << 20
        gap = self.upper_bound_value - self.value
        placed = f"experts {self.expert_bytes / mib:.1f} MiB" if self.moe else f"neurons {self.neuron_bytes / mib:.1f} MiB"
        lines = [f"device budget {self.budget / mib:.1f} MiB: output matrix {'on' if self.output_on_device else 'off'} "
                 f"the device, fixed {self.fixed_bytes / mib:.1f} MiB, {placed}",
                 f"reads {self.value / mib:.3f} MiB/token from the device, at most {gap / mib:.3f} below the LP bound",
                 f"{'layer':>5} {'attn':>5} {'exp runs' if self.moe else 'hot':>8} {'of':>6} {'MiB':>8} {'covers':>7}"]
        for i, x in enumerate(self.layers):
            hot, of, size, cover = ((x.n_hot_expert_runs, x.n_expert_runs, x.expert_bytes, x.expert_coverage)
                                    if self.moe else (x.n_hot, self.n_ff, x.bytes, x.coverage))
            lines.append(f"{i:>5} {'dev' if x.fixed_on_device else 'cpu':>5} {hot:>8} {of:>6} {size / mib:>8.2f} "
                         f"{100 * cover:>6.1f}%")
        return "\n".join(lines)


def _text(ptr, length: int, errors: str = "replace") -> str:
    return ffi.unpack(ptr, length).decode("utf-8", errors)


class _Owned:
    """A native object the wrapper owns: freed by close(), or at garbage collection."""

    _what = "object"  # for the message after close
    _handle = None

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError(f"the {self._what} has been closed")
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            ffi.release(self._handle)  # runs its *_free now instead of at garbage collection
            self._handle = None


class NativeModel(_Owned):
    """A memory-mapped GGUF model."""

    _what = "model"

    def __init__(self, path: str | os.PathLike, vocab_only: bool = False, ffn_act: str | None = None,
                 repack: bool = True, moe_skip_rows: bool | None = None):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"Model path does not exist: {self.path}")
        params = lib.pi_model_default_params()
        params.vocab_only = int(vocab_only)
        # repack: the dense matmuls' Q4_0/Q4_K/Q5_K/Q6_K weights in row groups (the file is not written)
        params.repack = int(repack)
        # ReGLU experts: skip dead neurons' rows (True), compute them (False), or the file's choice (None)
        params.moe_skip_rows = moe_skip_option(moe_skip_rows)
        if ffn_act is not None:
            codes = {name: code for code, name in ACTIVATIONS.items()}
            if ffn_act not in codes:
                raise ValueError(f"unknown FFN activation {ffn_act!r}; known: {', '.join(codes)}")
            params.ffn_act = codes[ffn_act]
        out = ffi.new("pi_model **")
        check(lib.pi_model_load(self.path.encode(), params, out))
        self._handle = ffi.gc(out[0], lib.pi_model_free)
        self.vocab_only = vocab_only
        self.info = None if vocab_only else self._read_info()

    def _read_info(self) -> ModelInfo:
        info = ffi.new("pi_model_info *")
        check(lib.pi_model_get_info(self.handle, info))
        return ModelInfo(
            n_vocab=info.n_vocab, n_ctx_train=info.n_ctx_train, n_embd=info.n_embd, n_layer=info.n_layer,
            n_head=info.n_head, n_head_kv=info.n_head_kv, n_ff=info.n_ff, n_rot=info.n_rot,
            norm_eps=info.norm_eps, rope_freq_base=info.rope_freq_base, rope_freq_scale=info.rope_freq_scale,
            ffn_act=ACTIVATIONS[info.ffn_act], tied_output=bool(info.tied_output),
            causal=bool(info.causal), n_expert=info.n_expert, n_expert_used=info.n_expert_used,
            n_ff_exp=info.n_ff_exp, moe_skip_rows=bool(info.moe_skip_rows),
        )

    def metadata(self) -> dict[str, object]:
        """Every key: scalars as Python values, string arrays as lists, numeric arrays as numpy copies."""
        meta = ffi.new("pi_meta *")
        out: dict[str, object] = {}
        for i in range(lib.pi_model_meta_count(self.handle)):
            check(lib.pi_model_meta_get(self.handle, i, meta))
            out[_text(meta.key, meta.key_len)] = self._meta_value(i, meta)
        return out

    def _meta_value(self, index: int, meta):
        kind = meta.type
        if kind == lib.PI_META_STRING:
            return _text(meta.str, meta.str_len)
        if kind == lib.PI_META_ARRAY:
            if meta.arr_type == lib.PI_META_STRING:
                return self._string_array(index, meta.arr_len)
            dtype = np.dtype(_META_DTYPES[meta.arr_type])
            raw = ffi.buffer(meta.arr_data, meta.arr_len * dtype.itemsize)
            return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
        if kind == lib.PI_META_BOOL:
            return bool(meta.i)
        if kind in _FLOAT_TYPES:
            return float(meta.f)
        return int(meta.u) if kind in _UNSIGNED_TYPES else int(meta.i)

    def _string_array(self, index: int, length: int) -> list[str]:
        s = ffi.new("const char **")
        n = ffi.new("uint64_t *")
        items = []
        for j in range(length):
            check(lib.pi_model_meta_array_str(self.handle, index, j, s, n))
            # surrogateescape keeps the exact bytes of tokens that are not valid UTF-8
            items.append(_text(s[0], n[0], "surrogateescape"))
        return items

    def describe(self) -> str:
        return ffi.string(lib.pi_model_describe(self.handle)).decode()

    @property
    def has_predictors(self) -> bool:
        """Every layer has a predictor (fc1/fc2) and ffn_down_t: the sparse FFN can run."""
        if self.info is None:
            return False
        return self.describe().count(": predictor rank ") == self.info.n_layer

    def device_bytes(self) -> int:
        """Bytes of every weight a token reads: what a device holding the whole model needs."""
        return int(lib.pi_model_device_bytes(self.handle))

    def plan_experts(self, budget: int) -> np.ndarray:
        """The same plan's expert runs: [n_layer, n_expert, runs] bool, True where placed
        (runs of 128 neurons in file order; empty for a dense model)."""
        info = self.info
        shape = (info.n_layer, info.n_expert, -(-info.n_ff_exp // 128) if info.n_expert else 0)
        hot = np.zeros(shape, np.uint8)
        check(lib.pi_model_plan_experts(self.handle, int(budget), ffi.from_buffer("uint8_t[]", hot), hot.size))
        return hot.astype(bool)

    def plan(self, budget: int) -> Placement:
        """The placement of `budget` device bytes."""
        n = self.info.n_layer
        layers = ffi.new("pi_layer_placement[]", n)
        totals = ffi.new("pi_placement_totals *")
        check(lib.pi_model_plan(self.handle, int(budget), layers, totals))
        return Placement(
            budget=int(totals.budget), fixed_bytes=int(totals.fixed_bytes), neuron_bytes=int(totals.neuron_bytes),
            output_on_device=bool(totals.output_on_device), n_ff=self.info.n_ff,
            layers=[LayerPlacement(int(x.n_hot), int(x.bytes), float(x.coverage), bool(x.fixed_on_device),
                                   int(x.n_hot_expert_runs), int(x.n_expert_runs), int(x.expert_bytes),
                                   float(x.expert_coverage)) for x in layers],
            expert_bytes=int(totals.expert_bytes), value=float(totals.value),
            upper_bound_value=float(totals.upper_bound_value), max_loss=float(totals.max_loss))


class NativeAdapter(_Owned):
    """A LoRA adapter file checked against the model it adapts (which it borrows)."""

    _what = "adapter"

    def __init__(self, model: NativeModel, path: str | os.PathLike):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"LoRA adapter path does not exist: {self.path}")
        out = ffi.new("pi_adapter **")
        check(lib.pi_adapter_load(model.handle, self.path.encode(), out))
        self._handle = ffi.gc(out[0], lib.pi_adapter_free)
        self._model = model
        self.n_pairs = int(lib.pi_adapter_n_pairs(self._handle))


class NativeContext:
    """KV cache, scratch and thread pool of one sequence, or of n_seq_max (decode_batch). Logits
    are a zero-copy numpy view."""

    def __init__(self, model: NativeModel, *, n_ctx: int, n_batch: int, n_threads: int,
                 n_threads_batch: int, logits_all: bool, kernel_impl: KernelImpl = KernelImpl.AUTO,
                 sparse: Sparse = Sparse.DECODE, sparse_threshold_shift: float = 0.0,
                 device: Device = Device.NONE, vram_budget: int = 0, embeddings: bool = False,
                 n_gpu_layers: int = 0, n_logits: int = 1, type_k: int = 1, type_v: int = 1,
                 n_seq_max: int = 1):
        params = lib.pi_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch
        params.logits_all = int(logits_all)
        params.kernel_impl = kernel_impl  # IntEnums, or their plain values; the library checks them
        params.sparse = sparse
        params.sparse_threshold_shift = sparse_threshold_shift
        params.device = device
        params.vram_budget = int(vram_budget)
        params.embeddings = int(embeddings)
        params.n_gpu_layers = int(n_gpu_layers)
        params.n_logits = int(n_logits)
        params.type_k = int(type_k)  # GGML type ids: 1 f16, 8 q8_0, 2 q4_0 (kv_cache.py)
        params.type_v = int(type_v)
        params.n_seq_max = int(n_seq_max)
        self._capture = None
        self._adapter = None
        out = ffi.new("pi_context **")
        check(lib.pi_context_new(model.handle, params, out))
        self._handle = ffi.gc(out[0], lib.pi_context_free)
        self._model = model  # the context borrows the model's weights
        self.n_ctx = int(lib.pi_context_n_ctx(self._handle))
        self.kernels = ffi.string(lib.pi_context_kernels(self._handle)).decode()
        self.kv_bytes = int(lib.pi_context_kv_bytes(self._handle))
        self.n_seq_max = max(int(n_seq_max), 1)
        self.seq_ctx = int(lib.pi_context_seq_ctx(self._handle))  # positions per sequence
        self._batch = ffi.new("pi_batch *")  # decode_batch's, made once
        rows = ffi.new("int32_t *")
        ptr = lib.pi_get_logits(self._handle, rows)
        n_vocab = model.info.n_vocab
        self.logits = np.frombuffer(ffi.buffer(ptr, rows[0] * n_vocab * 4), dtype=np.float32).reshape(rows[0], n_vocab)
        # with embeddings: [n_ctx][n_embd] final normed hidden states by position, zero-copy; else None
        self.embeddings = None
        ptr = lib.pi_get_embeddings(self._handle, rows)
        if ptr != ffi.NULL:
            d = model.info.n_embd
            self.embeddings = np.frombuffer(ffi.buffer(ptr, rows[0] * d * 4), dtype=np.float32).reshape(rows[0], d)

    def decode(self, tokens: np.ndarray, pos: int, n_logits: int = 1) -> None:
        """Evaluate int32 `tokens` at positions pos, pos+1, ...; the GIL is released meanwhile.
        Without logits_all, the logits of the last n_logits tokens land in rows 0.. of `logits`."""
        if self._handle is None:
            raise ValueError("the context has been closed")
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        check(lib.pi_decode_tail(self._handle, ffi.from_buffer("int32_t[]", tokens), len(tokens), pos, n_logits))

    def decode_batch(self, tokens: np.ndarray, pos: np.ndarray, seq: np.ndarray, logits: np.ndarray) -> None:
        """Evaluate a llama_batch-shaped step (pi_decode_batch): token i of sequence seq[i] at
        position pos[i]; the tokens where logits[i] is set get rows 0.. of `logits`, in order.
        The arrays must be C-contiguous, int32 (logits: int8), of one length."""
        if self._handle is None:
            raise ValueError("the context has been closed")
        n = len(tokens)
        if not (len(pos) == len(seq) == len(logits) == n):
            raise ValueError(f"decode_batch: tokens, pos, seq and logits differ in length "
                             f"({n}, {len(pos)}, {len(seq)}, {len(logits)})")
        batch = self._batch
        batch.n_tokens = n
        keep = [ffi.from_buffer("int32_t[]", tokens), ffi.from_buffer("int32_t[]", pos),
                ffi.from_buffer("int32_t[]", seq), ffi.from_buffer("int8_t[]", logits)]  # alive for the call
        batch.token, batch.pos, batch.seq, batch.logits = keep
        check(lib.pi_decode_batch(self._handle, batch))

    def seq_len(self, seq: int) -> int:
        """Positions sequence `seq` holds."""
        n = int(lib.pi_seq_len(self._handle, seq))
        if n < 0:
            raise ValueError(f"sequence {seq} is outside [0, {self.n_seq_max})")
        return n

    def seq_clear(self, seq: int = -1) -> None:
        """Forget sequence `seq` (-1: every sequence)."""
        check(lib.pi_seq_clear(self._handle, seq))

    def seq_truncate(self, seq: int, pos: int) -> None:
        """Keep positions [0, pos) of sequence `seq`."""
        check(lib.pi_seq_truncate(self._handle, seq, pos))

    def seq_copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Sequence dst becomes positions [0, n) of sequence src (a shared prompt prefix)."""
        check(lib.pi_seq_copy_prefix(self._handle, src, dst, n))

    def set_adapter(self, adapter: NativeAdapter | None, scale: float = 1.0) -> None:
        """Apply a LoRA adapter (None: none) to every later decode; the context keeps it alive."""
        check(lib.pi_context_set_adapter(self._handle, adapter.handle if adapter else ffi.NULL, float(scale)))
        self._adapter = adapter

    def set_capture(self, ffn_in: np.ndarray | None, act: np.ndarray | None,
                    experts: np.ndarray | None = None) -> None:
        """Record every layer's FFN input [n_layer, T, n_embd] and activation [n_layer, T, n_ff]
        (float32), or for an MoE model the input and each token's routed experts [n_layer, T,
        n_expert_used] (int32, act None), C-contiguous with T the same for all, for the tokens
        of each later decode call. set_capture(None, None) stops recording. The arrays must stay
        alive while recording."""
        if ffn_in is None:
            check(lib.pi_context_set_capture(self._handle, ffi.NULL, ffi.NULL, 0))
            check(lib.pi_context_set_expert_capture(self._handle, ffi.NULL, 0))
            self._capture = None
            return
        info = self._model.info
        t = ffn_in.shape[1] if ffn_in.ndim == 3 else -1
        second = ((experts, np.int32, (info.n_layer, t, info.n_expert_used)) if info.n_expert
                  else (act, np.float32, (info.n_layer, t, info.n_ff)))
        buffers = ((ffn_in, np.float32, (info.n_layer, t, info.n_embd)), second)
        if not info.n_expert and experts is not None:
            raise ValueError("a dense model has no experts to capture")
        if (info.n_expert and act is not None) or any(
                a is None or a.shape != shape or a.dtype != dtype or not (a.flags.c_contiguous and a.flags.writeable)
                for a, dtype, shape in buffers):
            raise ValueError("capture buffers must be C arrays " + " and ".join(
                f"{np.dtype(dtype).name} [{shape[0]}, T, {shape[2]}]" for _, dtype, shape in buffers)
                + (" (no act: an MoE FFN has none)" if info.n_expert else ""))
        self._capture = (ffn_in, act, experts)  # keep them alive while native code writes into them
        if info.n_expert:
            check(lib.pi_context_set_capture(self._handle, ffi.from_buffer("float[]", ffn_in), ffi.NULL, t))
            check(lib.pi_context_set_expert_capture(self._handle, ffi.from_buffer("int32_t[]", experts), t))
        else:
            check(lib.pi_context_set_capture(self._handle, ffi.from_buffer("float[]", ffn_in),
                                             ffi.from_buffer("float[]", act), t))

    def get_state(self) -> bytes:
        """The KV cache of the evaluated positions and their count (pi_context_get_state)."""
        n = int(lib.pi_context_state_size(self._handle))
        buf = ffi.new("uint8_t[]", n)
        check(lib.pi_context_get_state(self._handle, buf, n))
        return bytes(ffi.buffer(buf, n))

    def set_state(self, blob: bytes) -> None:
        check(lib.pi_context_set_state(self._handle, ffi.from_buffer("uint8_t[]", blob), len(blob)))

    def _stats(self):
        out = ffi.new("pi_stats *")
        check(lib.pi_context_get_stats(self._handle, out))
        return out

    def stats(self) -> dict[str, int]:
        """Tokens evaluated and FFN neurons computed since the last reset, and those of the split's hot runs."""
        out = self._stats()
        return {"tokens": out.tokens, "ffn_rows_dense": out.ffn_rows_dense, "ffn_rows_done": out.ffn_rows_done,
                "ffn_rows_hot": out.ffn_rows_hot}

    def sparse_stats(self) -> dict[str, float]:
        """Per generated token (the one-token steps since the last reset; prompts do not count):
        FFN rows a dense token computes and the rows computed, the weight bytes a dense token reads
        and the bytes read, and their ratio, the byte ceiling of the sparse FFN's speed-up."""
        out = self._stats()
        steps = out.decode_steps

        def per_token(total: int) -> float:
            return total / steps if steps else 0.0

        read = per_token(out.decode_weight_bytes)
        return {"tokens": steps, "ffn_rows_dense": per_token(out.decode_ffn_rows_dense),
                "ffn_rows_done": per_token(out.decode_ffn_rows_done),
                "bytes_per_token_dense": float(out.dense_token_bytes), "bytes_per_token": read,
                "ceiling": out.dense_token_bytes / read if read else 0.0}

    def device_traffic(self) -> dict[str, int]:
        """Transfers between the host and the device, and the host's waits for it, since the last reset."""
        out = self._stats()
        return {"copies": out.device_copies, "syncs": out.device_syncs}

    def reset_stats(self) -> None:
        lib.pi_context_reset_stats(self._handle)

    def close(self) -> None:
        if self._handle is not None:
            self.logits = None
            self.embeddings = None
            self._capture = None
            ffi.release(self._handle)  # runs pi_context_free now
            self._adapter = None
            self._handle = None


def build_info() -> str:
    """The backends compiled into the native library, e.g. "cpu x86 cuda"."""
    return ffi.string(lib.pi_build_info()).decode()


def cuda_device_count() -> int:
    """CUDA devices this build can use (0 without a GPU, driver or CUDA build)."""
    return int(lib.pi_cuda_device_count())
