"""`Llama`: llama-cpp-python's high-level API over the native runtime.

A thin facade: native handles live in model.py, device policy in placement.py, tokenization in
tokenizer.py, sampling in sampling.py, one sequence's generation in generator.py, the completion
methods and response assembly in completion.py, chat formats in chat.py and embedding pooling in
pooling.py.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import threading
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from ._logger import log_info, set_verbose
from .chat import ChatFormats
from .completion import CompletionAPI, CompletionRequest, run_completion
from .generator import Drafter, Sampling, TokenPicker
from .kv_cache import describe as describe_kv_cache, kv_cache_type
from .llama_speculative import LlamaDraftModel
from .llama_tokenizer import LlamaTokenizer
from .model import NativeAdapter, NativeContext, NativeModel, moe_skip_policy, sparse_policy
from .placement import open_context
from .pooling import check_pooling, pool, pooling_of
from .state import BaseLlamaCache, LlamaState, longest_token_prefix
from .sampling import (COMPLETION, LLAMA_DEFAULT_SEED, LogitsProcessorList, Sampler, SamplingParams,
                       StoppingCriteriaList, logits_to_logprobs)
from .tokenizer import Tokenizer



def _refuse_unsupported(options: Dict[str, Any]) -> None:
    """Options of llama-cpp-python's Llama that change results and are not implemented: refused,
    never silently ignored (the others, such as use_mlock or rope settings read from the file,
    are accepted and ignored)."""
    missing = {"tokenizer": "a tokenizer other than the model's"}
    for name, what in missing.items():
        if options.get(name) is not None:
            raise NotImplementedError(f"Llama({name}=...): {what} not implemented in pypowerinfer yet")


def _meta_str(value: object) -> str:
    """A metadata value as llama.cpp prints it (std::to_string for numbers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:f}"
    return str(value)


class Llama(CompletionAPI):
    """Load a GGUF model and run it; the constructor and methods follow llama-cpp-python 0.3.36
    (the completion methods are completion.CompletionAPI's)."""

    def __init__(
        self,
        model_path: str,
        *,
        n_gpu_layers: int = 0,
        vocab_only: bool = False,
        use_mmap: bool = True,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_threads: Optional[int] = None,
        n_threads_batch: Optional[int] = None,
        logits_all: bool = False,
        embedding: bool = False,
        pooling_type: int = -1,  # LLAMA_POOLING_TYPE_UNSPECIFIED: the model's
        last_n_tokens_size: int = COMPLETION.penalty_last_n,
        chat_format: Optional[str] = None,
        verbose: bool = True,
        kernel_impl: int = 0,
        ffn_act: Optional[str] = None,
        sparse: Union[bool, str, None] = None,
        sparse_threshold_shift: float = 0.0,
        moe_skip_rows: Optional[bool] = None,
        vram_budget: Union[int, str, None] = None,
        hybrid_device: str = "auto",
        lora_base: Optional[str] = None,
        lora_scale: float = 1.0,
        lora_path: Optional[str] = None,
        draft_model: Optional[LlamaDraftModel] = None,
        repack: bool = True,
        **kwargs: Any,  # llama-cpp-python's other options are accepted and ignored, as LangChain expects
    ):
        _refuse_unsupported(kwargs)
        # the KV cache's types (kv_cache.py), checked before the model loads
        self._type_k = kv_cache_type("type_k", kwargs.get("type_k"))
        self._type_v = kv_cache_type("type_v", kwargs.get("type_v"))
        self.kv_cache_bytes = 0  # the KV cache's bytes, K and V (0 with vocab_only)
        self.verbose = verbose
        set_verbose(verbose)  # as llama-cpp-python: the library's logger follows the last Llama made
        self.model_path = model_path
        self._lock = threading.RLock()  # one native call and its bookkeeping at a time
        # one completion at a time: held from a completion's start to its last chunk, released by
        # whichever thread consumes that chunk (so a plain Lock, which has no owner)
        self._session = threading.Lock()
        self._session_thread: Optional[int] = None
        # pypowerinfer's own options: kernel_impl (0 auto, 1 scalar reference, 2 AVX2, 3 AVX-512);
        # ffn_act overrides the architecture's FFN activation (silu_glu, relu_glu, relu_relu_glu);
        # sparse: with a profiled model, None (the default) follows the file's decision
        # (powerinfer.sparse_default, which the converter measured; sparse decode where a file has
        # no such key), True runs the predicted neurons only for generated tokens, "all" for
        # prompts too, False always dense; sparse_threshold_shift > 0 is sparser. sparse_mode
        # ("dense", "decode", "all") and sparse_reason say what runs and why.
        # moe_skip_rows: ReGLU experts (smallthinker) skip a one-token expert's dead neurons' rows
        # (True) or compute every row (False); None (the default) follows the file's decision
        # (powerinfer.moe_skip_rows, which the converter measured; skipping where a file has no such
        # key). expert_mode ("skip", "dense", None without ReGLU experts) and expert_reason say
        # what runs and why.
        # vram_budget (bytes, "2G", "25%" of the model's bytes, "auto"): the hot/cold split of a
        # profiled model; hybrid_device "auto" (CUDA when a device exists), "cuda", "host" (the
        # stand-in device that runs the split on a host thread), "none".
        # repack: the dense matmuls' Q4_0 and Q4_K/Q5_K/Q6_K weights in groups of 16 rows at load, the
        # layout the grouped GEMM streams (native/src/kernels/row_groups.c); False keeps the file's
        self._model = NativeModel(model_path, vocab_only=vocab_only, ffn_act=ffn_act, repack=repack,
                                  moe_skip_rows=moe_skip_rows)
        self._ctx: Optional[NativeContext] = None
        self._adapter: Optional[NativeAdapter] = None
        # lora_path: a LoRA adapter (llama.cpp's GGUF) applied at run time with lora_scale; as in
        # llama-cpp-python 0.3.36, lora_base is kept and not read
        self.lora_base, self.lora_scale, self.lora_path = lora_base, lora_scale, lora_path
        self.placement = None  # the hot/cold split's Placement when vram_budget places neurons
        meta = self._model.metadata()
        self.metadata: Dict[str, str] = {k: _meta_str(v) for k, v in meta.items()
                                         if not isinstance(v, (list, np.ndarray))}
        self.tokenizer_ = Tokenizer.from_metadata(meta)
        self._n_vocab = self.tokenizer_.n_vocab
        if draft_model is not None:
            self._check_draft_vocabulary(draft_model)
        self.chat_format = chat_format
        self._chat_formats = ChatFormats(self.metadata, self.tokenizer_)
        mode, self.sparse_reason = sparse_policy(sparse, meta, self._model.has_predictors)
        self.sparse_mode = mode.label
        self.expert_mode, self.expert_reason = moe_skip_policy(moe_skip_rows, meta, self._model.info)
        self.last_n_tokens_size = last_n_tokens_size
        self._seed = seed or LLAMA_DEFAULT_SEED
        self._logits_all = logits_all
        # speculative decoding: draft_model proposes tokens after each sampled one; one step
        # verifies them all, so a context without logits_all keeps rows for the last draft_cap + 1
        # tokens of a step (the peer turns logits_all on instead)
        if draft_model is not None and not isinstance(draft_model, LlamaDraftModel):
            raise TypeError(f"draft_model must be a LlamaDraftModel, not {type(draft_model).__name__}")
        self.draft_model = draft_model
        draft_cap = max(1, min(int(getattr(draft_model, "num_pred_tokens", 16)), max(n_batch, 2) - 1))
        self._drafter = Drafter(draft_model, draft_cap) if draft_model is not None else None
        self._n_logits = draft_cap + 1 if draft_model is not None and not logits_all else 1
        self._logits_from = 0  # without logits_all: the position whose logits are in row 0
        self._pooling_override = None if pooling_type == -1 else pooling_type
        self.cache = None
        self.n_tokens = 0
        self._history_start: Optional[int] = None  # where generate()'s sampled tokens begin
        self.n_threads = n_threads or max(multiprocessing.cpu_count() // 2, 1)
        self.n_threads_batch = n_threads_batch or multiprocessing.cpu_count()
        if vocab_only:
            self._n_ctx = n_ctx or 0
            self.n_batch = n_batch
            self.input_ids = np.zeros(0, dtype=np.intc)
            self.scores = np.zeros((0, self._n_vocab), dtype=np.single)
            return
        info = self._model.info
        if info.n_vocab != self._n_vocab:
            raise ValueError(f"token_embd has {info.n_vocab} rows but the vocabulary has {self._n_vocab} tokens")
        n_ctx = n_ctx if n_ctx > 0 else info.n_ctx_train
        self.n_batch = max(1, min(n_ctx, n_batch))
        options = dict(n_ctx=n_ctx, n_batch=self.n_batch, n_threads=self.n_threads,
                       n_threads_batch=self.n_threads_batch, logits_all=logits_all, kernel_impl=kernel_impl,
                       sparse=mode, sparse_threshold_shift=sparse_threshold_shift,
                       embeddings=embedding, n_logits=min(self._n_logits, self.n_batch),
                       type_k=self._type_k, type_v=self._type_v)
        if lora_path is not None:
            self._adapter = NativeAdapter(self._model, lora_path)  # checked against the model before a context exists
            if n_gpu_layers or vram_budget:
                log_info("pypowerinfer: LoRA adapters run on the CPU: n_gpu_layers and vram_budget ignored")
                n_gpu_layers, vram_budget = 0, None
        self._ctx, self.placement = open_context(self._model, options, n_gpu_layers=n_gpu_layers,
                                                 vram_budget=vram_budget, hybrid_device=hybrid_device)
        self._context_options = options  # what a BatchEngine's context of many sequences shares
        self._n_gpu_layers = n_gpu_layers
        if self._adapter is not None:
            self._ctx.set_adapter(self._adapter, lora_scale)
            log_info(f"pypowerinfer: LoRA adapter {os.path.basename(lora_path)}: {self._adapter.n_pairs} weights, "
                     f"scale {lora_scale}")
        self._n_ctx = self._ctx.n_ctx
        self.kv_cache_bytes = self._ctx.kv_bytes
        self.input_ids = np.zeros(self._n_ctx, dtype=np.intc)
        # zero-copy view of the native logits: [n_ctx][n_vocab] with logits_all, else [n_logits][n_vocab]
        # (one row, or a draft's rows: _last_logits maps a position to its row)
        self.scores = self._ctx.logits
        self._sampler = Sampler(self._n_vocab, self._seed)
        log_info(f"pypowerinfer: {os.path.basename(model_path)}: {info.n_layer} layers, n_embd {info.n_embd}, "
                 f"n_ctx {self._n_ctx}, {self.n_threads} threads, kernels {self._ctx.kernels}; "
                 f"{describe_kv_cache(self.kv_cache_bytes, self._type_k, self._type_v)}")

    # ---- properties llama-cpp-python exposes ----
    @property
    def model(self) -> SimpleNamespace:
        """What the peer's `Llama.model` (a llama_model pointer) is for here: the handle that the
        alias's low-level functions (llama_cpp.llama_model_get_vocab, llama_token_to_piece) take."""
        return SimpleNamespace(native=self._model, vocab=self.tokenizer_)

    def tokenizer(self) -> "LlamaTokenizer":
        return LlamaTokenizer(self)

    @property
    def context_params(self) -> SimpleNamespace:
        """The peer's llama_context_params fields that clients read (LlamaIndex reads n_ctx), as
        this Llama has them; changing them changes nothing."""
        return SimpleNamespace(n_ctx=self._n_ctx, n_batch=self.n_batch, n_ubatch=self.n_batch,
                               n_threads=self.n_threads, n_threads_batch=self.n_threads_batch,
                               embeddings=self._ctx is not None and self._ctx.embeddings is not None,
                               type_k=self._type_k, type_v=self._type_v, seed=self._seed)

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[: self.n_tokens] if self._logits_all else self.scores

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self._n_vocab

    def n_embd(self) -> int:
        self._require_ctx()
        return self._model.info.n_embd

    def token_bos(self) -> int:
        return self.tokenizer_.bos_id

    def token_eos(self) -> int:
        return self.tokenizer_.eos_id

    def token_nl(self) -> int:
        ids = self.tokenizer_.encode(b"\n", add_bos=False, special=False)
        return ids[0] if ids else -1

    # ---- tokens ----
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.tokenizer_.encode(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        return self.tokenizer_.decode(tokens, special=special)

    # ---- evaluation ----
    def _require_ctx(self) -> NativeContext:
        if self._ctx is None:
            raise ValueError("this Llama was created with vocab_only=True, or has been closed")
        return self._ctx

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    def set_cache(self, cache: Optional[BaseLlamaCache]) -> None:
        self.cache = cache

    def _load_cached_prefix(self, prompt_tokens: List[int]) -> None:
        """With a cache: resume from its state sharing the longest prefix with the prompt, when
        that prefix is longer than what the context already holds."""
        if self.cache is None:
            return
        try:
            item = self.cache[prompt_tokens]
        except KeyError:
            return
        cached = longest_token_prefix(item.input_ids[: item.n_tokens].tolist(), prompt_tokens)
        if cached > longest_token_prefix(self._input_ids.tolist(), prompt_tokens):
            self.load_state(item)

    def save_state(self) -> LlamaState:
        """The sequence so far: KV cache, token ids, logits rows in use and seed."""
        ctx = self._require_ctx()
        with self._lock:
            blob = ctx.get_state()
            last = max(self.n_tokens - 1 - self._logits_from, 0)  # the last position's row (row 0 when none)
            rows = self.scores[: self.n_tokens] if self._logits_all else self.scores[last: last + 1]
            return LlamaState(input_ids=self.input_ids.copy(), scores=np.array(rows, copy=True), n_tokens=self.n_tokens,
                              llama_state=blob, llama_state_size=len(blob), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        """Resume a saved sequence; ValueError for a state of another model or one n_ctx cannot hold."""
        ctx = self._require_ctx()
        with self._lock:
            ctx.set_state(state.llama_state)
            self.input_ids[:] = 0
            n = min(len(state.input_ids), len(self.input_ids))
            self.input_ids[:n] = state.input_ids[:n]
            self.n_tokens = state.n_tokens
            if self._logits_all:
                self.scores[: state.n_tokens] = state.scores[: state.n_tokens]
            else:
                self.scores[0] = state.scores[-1]  # the last position's, as save_state keeps them
                self._logits_from = self.n_tokens - 1
            self._seed = state.seed

    def reset(self) -> None:
        self.n_tokens = 0
        if self._ctx is not None:
            self._ctx.reset_stats()

    def sparse_stats(self) -> Dict[str, float]:
        """What the sparse FFN saved, per generated token since the last reset (NativeContext.sparse_stats)."""
        return self._require_ctx().sparse_stats()

    def _require_decoder(self) -> NativeContext:
        ctx = self._require_ctx()
        if not self._model.info.causal:
            raise RuntimeError(f"{os.path.basename(self.model_path)} is an embedding model (encoder-only "
                               f"{self.metadata.get('general.architecture')}): it has no logits to generate from; "
                               "create it with embedding=True and call embed() or create_embedding()")
        return ctx

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate tokens after the n_tokens already in the context."""
        ctx = self._require_decoder()
        if self.n_tokens + len(tokens) > self._n_ctx:
            raise ValueError(f"Requested tokens ({self.n_tokens + len(tokens)}) exceed context window of {self._n_ctx}")
        if len(tokens) == 0:
            return
        batch = np.asarray(tokens, dtype=np.int32)
        tail = min(len(batch), self._n_logits)
        with self._lock:
            ctx.decode(batch, self.n_tokens, tail)
            self.input_ids[self.n_tokens: self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)
            self._logits_from = self.n_tokens - tail

    def _last_logits(self, idx: Optional[int] = None) -> np.ndarray:
        idx = self.n_tokens - 1 if idx is None else idx
        if self._logits_all:
            return self.scores[idx]
        if not self._logits_from <= idx < self.n_tokens:
            raise ValueError(f"the logits of position {idx} are not kept (the last step's rows hold positions "
                             f"{self._logits_from}..{self.n_tokens - 1}); use logits_all=True")
        return self.scores[idx - self._logits_from]

    def sample(self, top_k: int = COMPLETION.top_k, top_p: float = COMPLETION.top_p, min_p: float = COMPLETION.min_p,
               typical_p: float = COMPLETION.typical_p, temp: float = COMPLETION.temperature,
               repeat_penalty: float = COMPLETION.repeat_penalty,
               frequency_penalty: float = COMPLETION.frequency_penalty,
               presence_penalty: float = COMPLETION.presence_penalty, tfs_z: float = COMPLETION.tfs_z,
               mirostat_mode: int = COMPLETION.mirostat_mode, mirostat_eta: float = COMPLETION.mirostat_eta,
               mirostat_tau: float = COMPLETION.mirostat_tau, penalize_nl: bool = True,
               logits_processor: Optional[LogitsProcessorList] = None, grammar=None,
               idx: Optional[int] = None, logit_bias: Optional[Dict[int, float]] = None) -> int:
        """Sample the next token from the logits of position idx (default: the last evaluated)."""
        if self.n_tokens == 0:
            raise ValueError("sample() needs evaluated tokens: call eval() first")
        params = SamplingParams.from_arguments(locals(), self.last_n_tokens_size)
        # as llama-cpp-python: penalties see only what generate() sampled; a standalone call, nothing
        picker = TokenPicker(self._sampler, Sampling(params, logits_processor, grammar=grammar), self.tokenizer_,
                             first=self._history_start)
        end = self.n_tokens if idx is None else idx + 1
        return picker.next(self._last_logits(idx), self.input_ids, end)

    def generate(self, tokens: Sequence[int], top_k: int = COMPLETION.top_k, top_p: float = COMPLETION.top_p,
                 min_p: float = COMPLETION.min_p, typical_p: float = COMPLETION.typical_p,
                 temp: float = COMPLETION.temperature, repeat_penalty: float = COMPLETION.repeat_penalty,
                 reset: bool = True, frequency_penalty: float = COMPLETION.frequency_penalty,
                 presence_penalty: float = COMPLETION.presence_penalty, tfs_z: float = COMPLETION.tfs_z,
                 mirostat_mode: int = COMPLETION.mirostat_mode, mirostat_tau: float = COMPLETION.mirostat_tau,
                 mirostat_eta: float = COMPLETION.mirostat_eta, penalize_nl: bool = True,
                 logits_processor: Optional[LogitsProcessorList] = None,
                 stopping_criteria: Optional[StoppingCriteriaList] = None, grammar=None,
                 logit_bias: Optional[Dict[int, float]] = None) -> Iterator[int]:
        """Yield sampled tokens forever; the KV cache is reused for the prefix shared with the last call."""
        params = SamplingParams.from_arguments(locals(), self.last_n_tokens_size)
        yield from self._generate(tokens, Sampling(params, logits_processor, stopping_criteria, grammar), reset)

    def _generate(self, tokens: Sequence[int], sampling: Sampling, reset: bool) -> Iterator[int]:
        """This Llama's one sequence: evaluate what is new (the prompt's tail, then each sampled
        token with the draft's guesses after it), sample from each position's logits, and keep
        the guesses that held. A caller may send tokens in (generate's `send`) to follow a token."""
        tokens = list(tokens)
        if reset and self.n_tokens > 0:
            prefix = longest_token_prefix(self._input_ids.tolist(), tokens)
            # re-evaluate at least the last prompt token so its logits are fresh
            prefix = min(prefix, len(tokens) - 1)
            self.n_tokens = max(prefix, 0)
            tokens = tokens[self.n_tokens:]
        elif reset:
            self.reset()
        picker = TokenPicker(self._sampler, sampling, self.tokenizer_)
        picker.start(self._seed, first=self.n_tokens + len(tokens))
        self._history_start = picker.first
        try:
            while True:
                # tokens: what was sampled (and sent in) since the last step, then the draft's guesses
                first = self.n_tokens + len(tokens) - 1  # the first position to sample after
                guesses = self._draft(tokens)
                self.eval(tokens + guesses)
                accepted = len(guesses)
                for idx in range(first, self.n_tokens):
                    token = picker.next(self._last_logits(idx), self.input_ids, idx + 1)
                    if token is None:  # the stopping criteria
                        return
                    extra = yield token
                    tokens = [token] + (list(extra) if extra else [])
                    # the next guess is wrong, or the caller sent tokens: drop the rest of the draft
                    if idx + 1 < self.n_tokens and (extra or token != self.input_ids[idx + 1]):
                        self.n_tokens = idx + 1  # the next eval overwrites the cache from here
                        accepted = idx - first
                        break
                    if idx + 1 < self.n_tokens:
                        tokens = []  # the guess is in the cache already
                if self._drafter is not None:
                    self._drafter.adapt(len(guesses), accepted)
        finally:
            self._history_start = None

    def _check_draft_vocabulary(self, draft: LlamaDraftModel) -> None:
        """A draft that wraps a model guesses that model's token ids: its vocabulary must be this
        one's (any attribute of the draft with an n_vocab() is taken for such a model)."""
        for name, value in vars(draft).items():
            n_vocab = getattr(value, "n_vocab", None)
            if not callable(n_vocab):
                continue
            other = getattr(value, "tokenizer_", None)
            same = n_vocab() == self._n_vocab and (not isinstance(other, Tokenizer) or
                                                   other.same_vocabulary(self.tokenizer_))
            if not same:
                raise ValueError(f"draft_model.{name} has another vocabulary ({n_vocab()} tokens) than the model "
                                 f"({self._n_vocab}): its guesses would be other tokens")

    def _draft(self, tokens: List[int]) -> List[int]:
        """The draft model's guesses after the sequence and `tokens`, as many as the draft length
        and the context allow."""
        end = self.n_tokens + len(tokens)
        if self._drafter is None or end >= self._n_ctx:
            return []
        self.input_ids[self.n_tokens: end] = tokens
        return self._drafter.guesses(self.input_ids[:end], self._n_ctx - end)

    # ---- completions (CompletionAPI's methods generate here) ----
    def _run(self, req: CompletionRequest) -> Iterator[dict]:
        """The completion's chunks, generated on this Llama's one sequence."""
        return self._exclusive(req, lambda: self._generate(req.prompt_tokens, req.sampling, reset=True))

    def _exclusive(self, req: CompletionRequest, generate: Callable[[], Iterator[int]]) -> Iterator[dict]:
        """The completion's chunks, with the model to itself: a completion from another thread
        waits for this one to finish; one from the thread that is consuming it is refused."""
        me = threading.get_ident()
        if self._session.locked() and self._session_thread == me:
            raise RuntimeError("this thread is still reading another completion of this Llama: finish or close "
                               "that stream first")
        self._session.acquire()
        self._session_thread = me
        try:
            self._load_cached_prefix(req.prompt_tokens)
            self.set_seed(req.seed if req.seed is not None else random.Random(self._seed).randint(0, 2**32))
            yield from run_completion(self, req, generate)
        finally:
            self._session_thread = None
            self._session.release()

    def batch_context(self, n_seq_max: int, n_ctx: int) -> NativeContext:
        """A context of `n_seq_max` sequences sharing `n_ctx` positions on this Llama's model,
        options and LoRA adapter, one logits row per sequence (what batching.BatchEngine runs)."""
        self._require_decoder()
        if self.placement is not None or self._n_gpu_layers:
            raise NotImplementedError("BatchEngine runs its sequences on the CPU: n_gpu_layers and vram_budget "
                                      "with more than one sequence are not supported yet")
        if self.draft_model is not None:
            raise NotImplementedError("BatchEngine does not run speculative decoding (draft_model): use Llama")
        if n_seq_max > min(n_ctx, self.n_batch):
            raise ValueError(f"n_parallel {n_seq_max} is more than n_ctx {n_ctx} or n_batch {self.n_batch}")
        options = {**self._context_options, "n_ctx": n_ctx, "logits_all": False, "embeddings": False,
                   "n_logits": n_seq_max}
        ctx = NativeContext(self._model, n_seq_max=n_seq_max, **options)
        if self._adapter is not None:
            ctx.set_adapter(self._adapter, self.lora_scale)
        return ctx

    # ---- embeddings ----
    def pooling_type(self) -> int:
        """The pooling embed() applies (llama.cpp's LLAMA_POOLING_TYPE_*): Llama(pooling_type=...), else
        the model's {arch}.pooling_type, 0 none when absent."""
        return pooling_of(self.metadata) if self._pooling_override is None else self._pooling_override

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """Embeddings of a string (or of each of a list): per token with pooling none, else one
        vector pooled as the model asks (mean, first token, last token); L2-normalised with normalize."""
        ctx = self._require_ctx()
        if ctx.embeddings is None:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        pooling = self.pooling_type()
        check_pooling(pooling)
        texts = [input] if isinstance(input, str) else list(input)
        out, total = [], 0
        with self._lock:
            for text in texts:
                tokens = self.tokenize(text.encode("utf-8"))
                if truncate:
                    tokens = tokens[: self.n_batch]
                if len(tokens) > self.n_batch:
                    raise ValueError(f"Requested tokens ({len(tokens)}) exceed batch size of {self.n_batch}")
                total += len(tokens)
                if tokens:
                    ctx.decode(np.asarray(tokens, dtype=np.int32), 0)  # each text alone, from position 0
                out.append(pool(ctx.embeddings[: len(tokens)], pooling, normalize))
            self.reset()
        result = out[0] if isinstance(input, str) else out
        return (result, total) if return_count else result

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        embeds, total = self.embed(input if isinstance(input, list) else [input], return_count=True)
        return {"object": "list", "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": total, "total_tokens": total}}

    # ---- chat ----
    def _chat_format(self):
        """The formatter of chat_format (chat.ChatFormats)."""
        return self._chat_formats.get(self.chat_format)

    longest_token_prefix = staticmethod(longest_token_prefix)

    @staticmethod
    def logits_to_logprobs(logits, axis: int = -1) -> np.ndarray:
        return logits_to_logprobs(np.asarray(logits, dtype=np.single), axis=axis)

    # ---- lifetime ----
    def close(self) -> None:
        """Free the context and the model; views of `scores` must not be used afterwards."""
        if self._ctx is not None:
            self.scores = np.zeros((0, self._n_vocab), dtype=np.single)
            self._ctx.close()
            self._ctx = None
        if getattr(self, "_adapter", None) is not None:  # after the context that borrows it
            self._adapter.close()
            self._adapter = None
        if getattr(self, "_model", None) is not None:
            self._model.close()
            self._model = None

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
