"""Token sampling with llama.cpp's semantics, in the chain llama-cpp-python 0.3.36 builds.

`llama_cpp.Llama._init_sampler` builds, per generation:

    logits processors (the caller's, then logit_bias) -> penalties -> grammar ->
        temperature <  0: dist over the whole vocabulary, no temperature applied
        temperature == 0: greedy
        mirostat 1 or 2:  mirostat (no temperature, no top-k/p)
        otherwise:        top_k -> typical -> top_p -> min_p -> temperature -> dist

Each stage below mirrors its `llama_sampler_*_apply` in vendor/llama.cpp/src/llama-sampler.cpp, candidate
order included, in float32 where llama.cpp uses float. The RNG is std::mt19937 seeded like llama.cpp and
read like std::uniform_real_distribution<double> (numpy's legacy RandomState is the same generator with the
same seeding), so equal logits and an equal seed give the tokens llama-cpp-python gives.

Only numpy and the standard library: no native code here.
"""
from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, List, Mapping, NamedTuple, Optional, Union

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHAT",
    "COMPLETION",
    "LLAMA_DEFAULT_SEED",
    "CompletionDefaults",
    "Candidates",
    "LogitsProcessor",
    "LogitsProcessorList",
    "MinTokensLogitsProcessor",
    "Sampler",
    "SamplingParams",
    "StoppingCriteria",
    "StoppingCriteriaList",
    "apply_penalties",
    "logits_to_logprobs",
    "min_p",
    "temperature",
    "top_k",
    "top_logprobs",
    "top_p",
    "typical",
]

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp: "pick a random seed"
MIROSTAT_M = 100  # llama-cpp-python hard-codes m = 100 for mirostat v1
RAW_BATCH = 512  # 32-bit RNG outputs fetched at a time (even: a uniform double takes two)
TOP_P_HEAD = 256  # llama.cpp's top-p first sorts only this many of a large unsorted set...
TOP_P_HEAD_MIN_SIZE = 1024  # ...when the set is larger than this

_NEG_INF = np.float32(-np.inf)



@dataclass(frozen=True)
class CompletionDefaults:
    """llama-cpp-python's defaults for a completion's arguments, in one place: Llama's signatures
    (create_completion, create_chat_completion, sample, generate), SamplingParams below and the
    server's request bodies all read them from COMPLETION or CHAT."""

    max_tokens: Optional[int] = 16  # None or <= 0: until the context is full
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    tfs_z: float = 1.0  # accepted, as llama-cpp-python 0.3.36 accepts it; no sampler reads it
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    penalty_last_n: int = 64  # Llama(last_n_tokens_size=...)


COMPLETION = CompletionDefaults()
CHAT = replace(COMPLETION, max_tokens=None, temperature=0.2)  # create_chat_completion's

@dataclass
class SamplingParams:
    temperature: float = COMPLETION.temperature
    top_k: int = COMPLETION.top_k
    top_p: float = COMPLETION.top_p
    min_p: float = COMPLETION.min_p
    typical_p: float = COMPLETION.typical_p
    repeat_penalty: float = COMPLETION.repeat_penalty
    frequency_penalty: float = COMPLETION.frequency_penalty
    presence_penalty: float = COMPLETION.presence_penalty
    penalty_last_n: int = COMPLETION.penalty_last_n  # llama-cpp-python's last_n_tokens_size
    logit_bias: Optional[dict[int, float]] = None
    mirostat_mode: int = COMPLETION.mirostat_mode
    mirostat_tau: float = COMPLETION.mirostat_tau
    mirostat_eta: float = COMPLETION.mirostat_eta
    min_keep: int = 1  # llama-cpp-python passes max(1, n_probs) with n_probs fixed at 0

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], penalty_last_n: int) -> SamplingParams:
        """The fields among the arguments (locals()) of a Llama method: llama-cpp-python names them
        as the fields are named, except that sample and generate call the temperature `temp`. One
        builder, so that the four methods, whose signatures must stay llama-cpp-python's, do not
        each spell out every field."""
        names = {f.name for f in fields(cls)} - {"penalty_last_n", "min_keep"}
        values = {name: arguments[name] for name in names if name in arguments}
        if "temp" in arguments:
            values["temperature"] = arguments["temp"]
        return cls(penalty_last_n=penalty_last_n, **values)


# --- llama-cpp-python's callback containers -------------------------------------------------------

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any([criterion(input_ids, logits) for criterion in self])


class MinTokensLogitsProcessor:
    """A logits processor that forbids `token_eos` until `min_tokens` tokens follow the prompt
    (the length of input_ids at its first call)."""

    def __init__(self, min_tokens: int, token_eos: int):
        self.min_tokens = min_tokens
        self.token_eos = token_eos
        self.prompt_tokens: Optional[int] = None

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


# --- candidate sets and selection helpers ---------------------------------------------------------


class Candidates(NamedTuple):
    """A llama_token_data_array: token ids and their logits in chain order."""

    ids: np.ndarray  # [n] token ids
    logits: np.ndarray  # [n] float32
    sorted: bool  # descending by logit, as llama.cpp's `sorted` flag

    @property
    def size(self) -> int:
        return self.ids.size

    def take(self, positions: np.ndarray, is_sorted: bool) -> "Candidates":
        return Candidates(self.ids[positions], self.logits[positions], is_sorted)


def _superset_of_best(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of every value of x that is >= some threshold at most its k-th largest: the k best, all
    ties of the k-th, and a few others. About one pass over x: at vocabulary sizes an order of magnitude
    faster than np.argpartition.

    x is viewed as a rows x cols grid. At least k values reach the k-th largest column maximum (the
    maxima of k columns do), so it is such a threshold, and every value reaching it lies in a column
    whose maximum reaches it. rows ~ sqrt(n / k) balances partitioning the cols maxima against
    filtering the rows * k values of the chosen columns.
    """
    n = x.size
    rows = max(1, math.isqrt(n // max(k, 1)))
    cols = n // rows
    if cols < k:
        return np.arange(n)
    col_max = x[: rows * cols].reshape(rows, cols).max(axis=0)
    threshold = np.partition(col_max, cols - k)[cols - k]
    if not threshold > _NEG_INF:
        return _finite_first(x, k)
    chosen = (np.arange(0, rows * cols, cols)[:, None] + np.flatnonzero(col_max >= threshold)).ravel()
    pos = np.concatenate([chosen, np.arange(rows * cols, n)])  # plus the values past the grid
    return pos[x[pos] >= threshold]


def _finite_first(x: np.ndarray, k: int) -> np.ndarray:
    """For mostly banned logits (grammar, logit_bias): the finite ones, padded with -inf ones up to k."""
    finite = np.flatnonzero(x > _NEG_INF)
    if finite.size >= k:
        return finite
    banned = np.flatnonzero(x == _NEG_INF)
    return np.concatenate([finite, banned[banned.size - (k - finite.size):]])


def _best_positions(logits: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest logits, best first (llama.cpp's partial sort)."""
    pos = _superset_of_best(logits, k)
    vals = logits[pos]
    if pos.size > k:
        keep = np.argpartition(vals, pos.size - k)[pos.size - k:]
        pos, vals = pos[keep], vals[keep]
    return pos[np.argsort(-vals, kind="stable")]


def _sorted(c: Candidates) -> Candidates:
    return c if c.sorted else c.take(_best_positions(c.logits, c.size), True)


def _softmax(logits: np.ndarray) -> np.ndarray:
    """llama_sampler_softmax_impl's float32 probabilities, summed in order as its C loop does (np.sum is pairwise)."""
    e = np.exp(logits - logits.max())
    return e / np.cumsum(e)[-1]


def _first_reaching(reached: np.ndarray, min_keep: int) -> Optional[int]:
    """How many to keep: up to the first entry where `reached` holds and at least min_keep are kept; None if none."""
    reached[: max(min_keep - 1, 0)] = False
    return int(reached.argmax()) + 1 if reached.any() else None


# --- the chain's stages (each mirrors llama_sampler_<name>_apply) ----------------------------------


def apply_penalties(logits: np.ndarray, history: np.ndarray, params: SamplingParams) -> None:
    """Repeat/frequency/presence penalties over the last penalty_last_n tokens, in place on full-vocabulary logits.

    Only the distinct tokens of the window are touched. llama.cpp clamps a negative window to 0 (disabled).
    """
    repeat = np.float32(params.repeat_penalty)
    freq = np.float32(params.frequency_penalty)
    present = np.float32(params.presence_penalty)
    last_n = params.penalty_last_n
    if last_n <= 0 or len(history) == 0 or (repeat == 1 and freq == 0 and present == 0):
        return
    ids, counts = np.unique(np.asarray(history)[-last_n:], return_counts=True)
    inside = (ids >= 0) & (ids < logits.size)
    ids, counts = ids[inside], counts[inside].astype(np.float32)
    vals = logits[ids]
    # Dividing a negative logit would raise its probability, so those are multiplied instead.
    vals = np.where(vals <= 0, vals * repeat, vals / repeat)
    logits[ids] = vals - (counts * freq + present)


def top_k(c: Candidates, k: int) -> Candidates:
    """The k best, sorted; k <= 0 keeps everything unsorted, k beyond the size sorts everything."""
    if k <= 0:
        return c
    k = min(k, c.size)
    if c.sorted:
        return Candidates(c.ids[:k], c.logits[:k], True)
    return c.take(_best_positions(c.logits, k), True)


def typical(c: Candidates, p: float, min_keep: int = 1) -> Candidates:
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to mass > p.

    Leaves the set ordered by that distance and marked unsorted, as llama.cpp does.
    """
    p = np.float32(p)
    if p >= 1:
        return c
    c = _sorted(c)
    probs = _softmax(c.logits)
    with np.errstate(divide="ignore", invalid="ignore"):
        surprise = -np.log(probs)
        # 0 * log 0 counts as 0; llama.cpp computes NaN there and its later sort is then undefined.
        entropy = np.cumsum(np.where(probs > 0, probs * surprise, np.float32(0)))[-1]
    order = np.argsort(np.abs(surprise - entropy), kind="stable")
    cum = np.cumsum(probs[order])
    return c.take(order[: _first_reaching(cum > p, min_keep) or c.size], False)


def top_p(c: Candidates, p: float, min_keep: int = 1) -> Candidates:
    """Nucleus: the best tokens up to the first whose cumulative probability reaches p; sorts the set."""
    p = np.float32(p)
    if p >= 1:
        return c
    probs = _softmax(c.logits)
    if c.sorted:
        head = np.arange(c.size)
    else:
        # As llama.cpp: sort only the best few first and the rest only if their mass falls short of p.
        head = _best_positions(c.logits, TOP_P_HEAD if c.size > TOP_P_HEAD_MIN_SIZE else c.size)
    n = _first_reaching(np.cumsum(probs[head]) >= p, min_keep)
    if n is None and head.size < c.size:
        head = _best_positions(c.logits, c.size)
        n = _first_reaching(np.cumsum(probs[head]) >= p, min_keep)
    return c.take(head[: n or c.size], True)


def min_p(c: Candidates, p: float, min_keep: int = 1) -> Candidates:
    """Keep tokens whose probability is at least p times the best one's (compared as logits)."""
    p = np.float32(p)
    if p <= 0 or c.size == 0:
        return c
    min_logit = c.logits.max() + np.log(p)
    if not c.sorted:
        keep = np.flatnonzero(c.logits >= min_logit)
        if keep.size and keep.size >= min_keep:
            return c.take(keep, False)
        c = _sorted(c)
    # Sorted: the passing tokens are a prefix; the best one and the first min_keep always stay.
    n = min(c.size, max(1, min_keep, int(np.count_nonzero(c.logits >= min_logit))))
    return Candidates(c.ids[:n], c.logits[:n], True)


def temperature(c: Candidates, t: float) -> Candidates:
    """Divide the logits by t (> 0; the chain routes t <= 0 to greedy or plain dist before this stage)."""
    return Candidates(c.ids, c.logits / np.float32(t), c.sorted)


# --- the sampler ----------------------------------------------------------------------------------


class Sampler:
    """One generation's sampler: owns the RNG, mirostat's mu and n_vocab-sized work buffers reused every token.

    Call reseed() at the start of each generation: llama-cpp-python builds a fresh llama.cpp sampler per
    generate(), so the RNG, mirostat's mu and the logit_bias snapshot all restart there.
    """

    def __init__(self, n_vocab: int, seed: Optional[int]):
        self.n_vocab = n_vocab
        self._logits = np.empty(n_vocab, np.float32)  # working copy of the caller's logits
        self._scratch = np.empty(n_vocab, np.float32)  # dist's unnormalised weights
        self._cumsum = np.empty(n_vocab, np.float64)  # dist's running sums
        self._banned = np.empty(n_vocab, np.bool_)  # grammar mask complement
        self._all_ids = np.arange(n_vocab)
        self.reseed(seed)

    def reseed(self, seed: Optional[int]) -> None:
        """Restart the RNG (None or LLAMA_DEFAULT_SEED: a random seed) and the per-generation state."""
        seed = LLAMA_DEFAULT_SEED if seed is None else seed & 0xFFFFFFFF  # C's uint32_t conversion
        self.seed = secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else seed
        self._rng = np.random.RandomState(self.seed)  # MT19937 seeded as std::mt19937(seed)
        self._raw: list[int] = []  # pending 32-bit outputs of _rng, next one last
        self._mu: Optional[float] = None
        self._bias_source: Optional[dict] = None
        self._bias: Optional[tuple[np.ndarray, np.ndarray]] = None

    def sample(
        self,
        logits: np.ndarray,
        history: np.ndarray,
        params: SamplingParams,
        logits_processor: Optional[Union[LogitsProcessor, Iterable[LogitsProcessor]]] = None,
        grammar_mask: Optional[np.ndarray] = None,
        input_ids: Optional[np.ndarray] = None,
    ) -> int:
        """Pick the next token from one row of logits, which is read and never written.

        history: previous tokens; the last params.penalty_last_n are penalised (llama-cpp-python penalises
        only the tokens generated so far in this generation, not the prompt).
        input_ids: what logits processors receive (llama-cpp-python: prompt + generated); default history.
        grammar_mask: boolean [n_vocab], True where allowed; applied after the penalties.
        """
        self._load(logits)
        if logits_processor is not None:
            self._run_processors(logits_processor, history if input_ids is None else input_ids)
        if params.logit_bias:
            self._apply_logit_bias(params.logit_bias)
        apply_penalties(self._logits, history, params)
        if grammar_mask is not None:
            self._apply_grammar_mask(grammar_mask)
        if not self._logits.max() > _NEG_INF:
            raise ValueError("no token can be sampled: every logit is -inf or NaN "
                             "(logit_bias, grammar or a logits processor)")
        return self._select(params)

    def _select(self, params: SamplingParams) -> int:
        everything = Candidates(self._all_ids, self._logits, False)
        if params.temperature < 0:
            return self._dist(everything)
        if params.temperature == 0:
            return self._greedy()
        if params.mirostat_mode == 1:
            return self._mirostat_v1(everything, params)
        if params.mirostat_mode == 2:
            return self._mirostat_v2(params)
        c = top_k(everything, params.top_k)
        c = typical(c, params.typical_p, params.min_keep)
        c = top_p(c, params.top_p, params.min_keep)
        c = min_p(c, params.min_p, params.min_keep)
        return self._dist(temperature(c, params.temperature))

    # -- the modifications made to the full vocabulary before selection

    def _load(self, logits: np.ndarray) -> None:
        logits = np.asarray(logits)
        if logits.shape != (self.n_vocab,):
            raise ValueError(f"logits must have shape ({self.n_vocab},), got {logits.shape}")
        np.copyto(self._logits, logits)

    def _run_processors(self, processors, input_ids) -> None:
        if callable(processors) and not isinstance(processors, list):
            processors = [processors]
        input_ids = np.asarray(input_ids, dtype=np.intc)
        # Each processor sees the previous one's output, as llama-cpp-python's custom sampler feeds them.
        for processor in processors:
            self._logits[:] = processor(input_ids, self._logits)

    def _apply_logit_bias(self, bias: dict) -> None:
        # llama-cpp-python converts the dict once per completion; reseed() starts the next snapshot.
        if bias is not self._bias_source:
            self._bias = _logit_bias_arrays(bias, self.n_vocab)
            self._bias_source = bias
        ids, values = self._bias
        self._logits[ids] += values

    def _apply_grammar_mask(self, allowed: np.ndarray) -> None:
        if allowed.shape != (self.n_vocab,):
            raise ValueError(f"grammar_mask must have shape ({self.n_vocab},), got {allowed.shape}")
        np.logical_not(allowed, out=self._banned)
        np.copyto(self._logits, _NEG_INF, where=self._banned)

    # -- the final selection stages

    def _uniform(self) -> float:
        """std::uniform_real_distribution<double>(0, 1) on std::mt19937, as libstdc++ computes it."""
        if not self._raw:  # one numpy call per RAW_BATCH / 2 draws: the call costs more than the numbers
            self._raw = self._rng.randint(0, 2**32, size=RAW_BATCH, dtype=np.uint32)[::-1].tolist()
        lo, hi = self._raw.pop(), self._raw.pop()
        u = (lo + hi * 2.0**32) / 2.0**64
        return u if u < 1.0 else math.nextafter(1.0, 0.0)

    def _greedy(self) -> int:
        return int(np.argmax(self._logits))  # the first of tied maxima, as llama.cpp's strict '>' scan

    def _dist(self, c: Candidates) -> int:
        """llama_sampler_dist: float weights exp(l - max) summed in double; first running sum >= sum * u."""
        weights = self._scratch[: c.size]
        np.subtract(c.logits, c.logits.max(), out=weights)
        np.exp(weights, out=weights)
        running = np.cumsum(weights, dtype=np.float64, out=self._cumsum[: c.size])
        i = int(np.searchsorted(running, running[-1] * self._uniform()))
        return int(c.ids[min(i, c.size - 1)])

    def _discrete(self, probs: np.ndarray) -> int:
        """std::discrete_distribution as libstdc++ draws it (mirostat uses it instead of dist)."""
        if probs.size < 2:
            return 0  # libstdc++ answers 0 without touching the RNG
        total = np.cumsum(probs, dtype=np.float64)[-1]  # std::accumulate: in order, in double
        cum = np.cumsum(probs / total, dtype=np.float64)
        cum[-1] = 1.0  # libstdc++ forces the last bound to 1
        return int(np.searchsorted(cum, self._uniform()))

    def _mirostat_step(self, c: Candidates, params: SamplingParams) -> int:
        """Draw from sorted candidates and move mu towards the target surprise tau."""
        probs = _softmax(c.logits)
        i = self._discrete(probs)
        with np.errstate(divide="ignore"):
            surprise = -float(np.log2(probs[i]))
        self._mu -= params.mirostat_eta * (surprise - params.mirostat_tau)
        return int(c.ids[i])

    def _start_mirostat(self, params: SamplingParams) -> float:
        if self._mu is None:
            self._mu = 2.0 * params.mirostat_tau
        return self._mu

    def _mirostat_v1(self, everything: Candidates, params: SamplingParams) -> int:
        """Mirostat 1: estimate the Zipf exponent s from the best m tokens, then top-k with k from s and mu."""
        mu = self._start_mirostat(params)
        best = top_k(everything, MIROSTAT_M)
        s_hat = _zipf_exponent(best.logits)
        eps = s_hat - 1
        with np.errstate(all="ignore"):
            k = np.float64((eps * 2.0**mu) / (1 - np.float64(self.n_vocab) ** -eps)) ** (1 / s_hat)
        k = 1 if math.isnan(k) else int(min(max(k, 1), self.n_vocab))
        return self._mirostat_step(top_k(best if k <= best.size else everything, k), params)

    def _mirostat_v2(self, params: SamplingParams) -> int:
        """Mirostat 2: keep the tokens whose surprise -log2 p is at most mu (at least the best one)."""
        mu = self._start_mirostat(params)
        best = int(np.argmax(self._logits))
        weights = self._scratch
        np.subtract(self._logits, self._logits[best], out=weights)
        np.exp(weights, out=weights)
        keep = np.flatnonzero(weights >= weights.sum() * np.exp2(np.float32(-mu)))
        if keep.size == 0:
            keep = np.array([best])
        return self._mirostat_step(_sorted(Candidates(keep, self._logits[keep], False)), params)


def _zipf_exponent(sorted_logits: np.ndarray) -> float:
    """Mirostat's least-squares s_hat over log(p_i / p_i+1) against log((i+2)/(i+1)) for the sorted best."""
    i = np.arange(sorted_logits.size - 1, dtype=np.float64)
    t = np.log((i + 2) / (i + 1))
    b = sorted_logits[:-1].astype(np.float64) - sorted_logits[1:]  # log of the ratio of probabilities
    return float(np.dot(t, b) / np.dot(t, t))


def _logit_bias_arrays(bias: dict, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """llama-cpp-python's {int(k): float(v)} (string keys allowed, the last duplicate wins) as arrays."""
    items = {int(k): float(v) for k, v in bias.items()}
    ids = np.fromiter(items.keys(), np.intp, len(items))
    values = np.fromiter(items.values(), np.float32, len(items))
    outside = ids[(ids < 0) | (ids >= n_vocab)]
    if outside.size:
        raise ValueError(f"logit_bias token id {int(outside[0])} is outside the vocabulary [0, {n_vocab})")
    return ids, values


# --- logprobs -------------------------------------------------------------------------------------


def logits_to_logprobs(logits: Union[np.ndarray, list], axis: int = -1) -> np.ndarray:
    """log_softmax in float32, as llama_cpp.Llama.logits_to_logprobs (a non-finite max shifts by 0)."""
    maxs = np.amax(logits, axis=axis, keepdims=True)
    maxs = np.where(np.isfinite(maxs), maxs, 0)
    shifted = np.subtract(logits, maxs, dtype=np.single)
    with np.errstate(divide="ignore", invalid="ignore"):  # an all -inf row: NaN, as llama-cpp-python's
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def top_logprobs(logprobs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n best (token ids, logprobs) of one row, best first.

    Ties put the higher token id first, as llama-cpp-python's sorted(zip(logprobs, ids), reverse=True).
    """
    row = np.asarray(logprobs)
    n = min(n, row.size)
    if n <= 0:
        return np.empty(0, np.intp), row[:0]
    ids = _superset_of_best(row, n)
    values = row[ids]
    order = np.lexsort((-ids, -values))[:n]
    return ids[order], values[order]
