"""pypowerinfer.sampling against straightforward sorted-array references and, when it is installed, llama.cpp itself.

The module is loaded from its file: the package's __init__ loads the native library, which these
pure-numpy tests must not need.
"""
import ctypes
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "pypowerinfer" / "sampling.py"
_spec = importlib.util.spec_from_file_location("pypowerinfer_sampling_under_test", _PATH)
S = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = S  # dataclasses look their module up here
_spec.loader.exec_module(S)

P = S.SamplingParams
NO_FILTERS = dict(top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0)


# --- test data ------------------------------------------------------------------------------------


def logit_rows(seed, count=40):
    """Random rows of varied size and spread; some rounded (ties), some with -inf entries."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.choice([1, 2, 7, 50, 333, 2000, 5003]))
        x = (rng.normal(size=n) * rng.uniform(0.3, 6)).astype(np.float32)
        if i % 3 == 1:
            x = np.round(x).astype(np.float32)
        if i % 4 == 2 and n > 2:
            x[rng.choice(n, n // 3, replace=False)] = -np.inf
        yield x


def all_candidates(x):
    return S.Candidates(np.arange(x.size), x, False)


def same_kept(c, ref_ids, x):
    """Equal as sets up to ties: the same count and the same multiset of original logits."""
    return c.size == len(ref_ids) and np.array_equal(np.sort(x[c.ids]), np.sort(x[np.asarray(ref_ids, int)]))


# --- straightforward references (float64, sorted arrays, loops) -----------------------------------


def ref_sorted(x):
    return sorted(range(x.size), key=lambda i: -float(x[i]))


def ref_probs(x, ids):
    v = np.array([float(x[i]) for i in ids])
    e = np.exp(v - v.max())
    return e / e.sum()


def ref_top_k(x, k):
    order = ref_sorted(x)
    return order if k <= 0 else order[:k]


def ref_top_p(x, p, min_keep=1):
    order = ref_sorted(x)
    if p >= 1:
        return order
    cum = 0.0
    for i, q in enumerate(ref_probs(x, order)):
        cum += q
        if cum >= p and i + 1 >= min_keep:
            return order[: i + 1]
    return order


def ref_min_p(x, p, min_keep=1):
    if p <= 0:
        return list(range(x.size))
    order = ref_sorted(x)
    probs = ref_probs(x, order)
    kept = [i for i, q in zip(order, probs) if q >= p * probs[0]]
    return kept if len(kept) >= min_keep else order[:min_keep]


def ref_typical(x, p, min_keep=1):
    order = ref_sorted(x)
    if p >= 1:
        return order
    probs = ref_probs(x, order)
    entropy = -sum(q * math.log(q) for q in probs if q > 0)
    dist = [abs(-math.log(q) - entropy) if q > 0 else math.inf for q in probs]
    ranked = sorted(range(len(order)), key=lambda j: dist[j])
    cum = 0.0
    for i, j in enumerate(ranked):
        cum += probs[j]
        if cum > p and i + 1 >= min_keep:
            return [order[j] for j in ranked[: i + 1]]
    return [order[j] for j in ranked]


def ref_penalised(x, history, last_n, repeat, freq, present):
    """llama.cpp's formulas one token at a time, in float32 as its C does."""
    out = x.copy()
    window = list(history[-last_n:]) if last_n > 0 else []
    f32 = np.float32
    for t in set(window):
        count = window.count(t)
        v = out[t]
        v = v * f32(repeat) if v <= 0 else v / f32(repeat)
        out[t] = v - (f32(count) * f32(freq) + f32(1) * f32(present))
    return out


# --- stages against the references ----------------------------------------------------------------


@pytest.mark.parametrize("k", [-1, 0, 1, 3, 40, 1000, 10**6])
def test_top_k(k):
    for x in logit_rows(1):
        c = S.top_k(all_candidates(x), k)
        assert same_kept(c, ref_top_k(x, k), x)
        if k > 0:
            assert c.sorted and np.all(c.logits[:-1] >= c.logits[1:])


@pytest.mark.parametrize("p", [0.0, 0.3, 0.9, 0.95, 0.999, 1.0])
def test_top_p(p):
    for x in logit_rows(2):
        for c0 in (all_candidates(x), S.top_k(all_candidates(x), 40)):  # unsorted and sorted inputs
            sub = x[c0.ids]
            c = S.top_p(c0, p)
            # a best-first prefix, its length exact up to float32 accumulation (llama.cpp sums in float)
            assert same_kept(c, c0.ids[ref_sorted(sub)[: c.size]], x)
            assert len(ref_top_p(sub, p - 1e-4)) <= c.size <= len(ref_top_p(sub, p + 1e-4))


@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 1.0, 2.0])
def test_min_p(p):
    for x in logit_rows(3):
        for c0 in (all_candidates(x), S.top_k(all_candidates(x), 40)):
            c = S.min_p(c0, p)
            assert same_kept(c, c0.ids[ref_min_p(x[c0.ids], p)], x)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.9, 1.0])
def test_typical(p):
    for x in logit_rows(4, count=24):
        c0 = S.top_k(all_candidates(x), 200)
        c = S.typical(c0, p)
        assert same_kept(c, c0.ids[ref_typical(x[c0.ids], p)], x)


@pytest.mark.parametrize("min_keep", [2, 5])
def test_min_keep(min_keep):
    for x in logit_rows(5, count=12):
        c0 = S.top_k(all_candidates(x), 60)
        sub = x[c0.ids]
        assert same_kept(S.top_p(c0, 0.0, min_keep), c0.ids[ref_top_p(sub, 0.0, min_keep)], x)
        assert same_kept(S.min_p(c0, 2.0, min_keep), c0.ids[ref_min_p(sub, 2.0, min_keep)], x)
        assert same_kept(S.typical(c0, 0.0, min_keep), c0.ids[ref_typical(sub, 0.0, min_keep)], x)


def test_top_p_large_unsorted_uses_head_then_everything():
    x = np.zeros(5000, np.float32)  # flat: the best 256 hold ~5% of the mass, so the full sort must follow
    x[:3] = 12.0  # peaked: the head suffices
    assert S.top_p(all_candidates(x), 0.95).size == 3
    assert S.top_p(all_candidates(np.zeros(5000, np.float32)), 0.5).size == 2500


def test_top_k_mostly_banned():
    x = np.full(50000, -np.inf, np.float32)
    allowed = np.array([7, 123, 40000, 49999])
    x[allowed] = [1.0, 3.0, 2.0, 0.5]
    c = S.top_k(all_candidates(x), 40)
    assert c.size == 40 and c.ids[:4].tolist() == [123, 40000, 7, 49999] and np.all(np.isneginf(c.logits[4:]))


def test_temperature():
    x = np.array([1.0, -2.0, 3.5], np.float32)
    c = S.temperature(all_candidates(x), 0.5)
    assert c.logits.dtype == np.float32 and np.array_equal(c.logits, x / np.float32(0.5))


# --- penalties -------------------------------------------------------------------------------------


@pytest.mark.parametrize("last_n", [-1, 0, 1, 5, 64, 500])
def test_penalties_match_llama_cpp_formulas(last_n):
    rng = np.random.default_rng(6)
    x = rng.normal(size=300).astype(np.float32) * 3
    history = rng.integers(0, 40, 200).astype(np.int32)  # ids < 40: many repeats, both signs of logit
    params = P(repeat_penalty=1.3, frequency_penalty=0.25, presence_penalty=0.7, penalty_last_n=last_n)
    got = x.copy()
    S.apply_penalties(got, history, params)
    np.testing.assert_array_equal(got, ref_penalised(x, history, last_n, 1.3, 0.25, 0.7))


def test_penalties_disabled_and_out_of_vocabulary_ids():
    x = np.linspace(-2, 2, 10, dtype=np.float32)
    got = x.copy()
    S.apply_penalties(got, np.array([3, 3, 4]), P())  # the defaults penalise nothing
    assert np.array_equal(got, x)
    S.apply_penalties(got, np.array([-1, 10, 99, 9]), P(presence_penalty=1.0))
    assert np.array_equal(got[:9], x[:9]) and got[9] == x[9] - 1


def test_sampler_penalises_only_the_window():
    x = np.array([5.0, 4.9, 0.0], np.float32)
    s = S.Sampler(3, 0)
    params = P(temperature=0, repeat_penalty=2.0, penalty_last_n=2)
    assert s.sample(x, np.array([0, 2, 2], np.int32), params) == 0  # token 0 left the window
    assert s.sample(x, np.array([2, 0], np.int32), params) == 1


# --- the sampler ------------------------------------------------------------------------------------


def test_greedy_is_first_argmax():
    s = S.Sampler(6, 1)
    x = np.array([0.5, 3.0, -1.0, 3.0, 2.0, -np.inf], np.float32)
    assert s.sample(x, np.array([], np.int32), P(temperature=0)) == 1
    for x in logit_rows(7):
        if x.size > 1:
            assert S.Sampler(x.size, 0).sample(x, np.array([], np.int32), P(temperature=0)) == int(np.argmax(x))


def chi_square(counts, probs):
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def draw_counts(x, params, n_draws, seed=1234):
    s = S.Sampler(x.size, seed)
    empty = np.array([], np.int32)
    return np.bincount([s.sample(x, empty, params) for _ in range(n_draws)], minlength=x.size)


# chi-square 99.99% quantiles by degrees of freedom; the seeds are fixed, so these never flake
CHI2_9999 = {3: 21.11, 7: 29.88}


@pytest.mark.parametrize("temp", [0.5, 1.0, 1.7, -1.0])
def test_temperature_shapes_the_distribution(temp):
    x = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -1.5, 1.2, 0.7], np.float32)
    counts = draw_counts(x, P(temperature=temp, **NO_FILTERS), 8000)
    scaled = x / (temp if temp > 0 else 1.0)  # temp < 0: plain softmax, no temperature
    probs = np.exp(scaled - scaled.max())
    assert chi_square(counts, probs / probs.sum()) < CHI2_9999[7]


def test_top_k_truncates_the_distribution():
    x = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -1.5, 1.2, 0.7], np.float32)
    counts = draw_counts(x, P(temperature=1.0, **dict(NO_FILTERS, top_k=4)), 6000)
    best = np.argsort(-x)[:4]
    assert counts[np.setdiff1d(np.arange(8), best)].sum() == 0
    probs = np.exp(x[best] - x[best].max())
    assert chi_square(counts[best], probs / probs.sum()) < CHI2_9999[3]


def sequence(seed, n=30, vocab=500, params=P()):
    rows = np.random.default_rng(99).normal(size=(n, vocab)).astype(np.float32)
    s = S.Sampler(vocab, seed)
    return [s.sample(row, np.array([], np.int32), params) for row in rows]


def test_seeds():
    assert sequence(42) == sequence(42)
    assert sequence(42) != sequence(43)
    assert sequence(None) != sequence(None)
    assert sequence(S.LLAMA_DEFAULT_SEED) != sequence(S.LLAMA_DEFAULT_SEED)
    assert sequence(2**32 + 7) == sequence(7)  # C's uint32_t conversion


def test_reseed_restarts_the_stream():
    rows = np.random.default_rng(3).normal(size=(10, 100)).astype(np.float32)
    s = S.Sampler(100, 5)
    first = [s.sample(r, np.array([], np.int32), P()) for r in rows]
    s.reseed(5)
    assert [s.sample(r, np.array([], np.int32), P()) for r in rows] == first
    assert s.seed == 5 and S.Sampler(100, None).seed != S.Sampler(100, None).seed


def test_rng_is_std_mt19937():
    # The C++ standard fixes std::mt19937's 10000th output for the default seed 5489.
    raw = np.random.RandomState(5489).randint(0, 2**32, size=10000, dtype=np.uint32)
    assert raw[0] == 3499211612 and raw[-1] == 4123659995
    s = S.Sampler(2, 5489)
    assert s._uniform() == (float(raw[0]) + float(raw[1]) * 2.0**32) / 2.0**64
    s.reseed(5489)
    draws = [s._uniform() for _ in range(5000)]  # crosses RAW_BATCH refills
    assert draws[-1] == (float(raw[9998]) + float(raw[9999]) * 2.0**32) / 2.0**64


def test_logit_bias_adds_and_bans():
    x = np.array([1.0, 2.0, 0.5], np.float32)
    s = S.Sampler(3, 0)
    empty = np.array([], np.int32)
    assert s.sample(x, empty, P(temperature=0, logit_bias={0: 1.5})) == 0
    assert s.sample(x, empty, P(temperature=0, logit_bias={"2": 1.6})) == 2  # string keys, as llama-cpp-python's int(k)
    banned = P(temperature=1.0, logit_bias={1: -np.inf}, **NO_FILTERS)
    assert all(s.sample(x, empty, banned) != 1 for _ in range(300))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        s.sample(x, empty, P(logit_bias={3: 1.0}))


def test_logit_bias_snapshot_per_generation():
    x = np.array([1.0, 2.0, 0.5], np.float32)
    s = S.Sampler(3, 0)
    bias = {0: 5.0}
    params = P(temperature=0, logit_bias=bias)
    assert s.sample(x, np.array([], np.int32), params) == 0
    bias[0] = -5.0  # llama-cpp-python converted the dict when the completion started...
    assert s.sample(x, np.array([], np.int32), params) == 0
    s.reseed(1)  # ...and converts it again for the next one
    assert s.sample(x, np.array([], np.int32), params) == 1


def test_input_is_never_modified():
    x = np.random.default_rng(8).normal(size=1000).astype(np.float32)
    x[::7] = -np.inf
    x.flags.writeable = False  # the native logits view may be read-only
    snapshot = x.copy()
    history = np.arange(0, 1000, 3, dtype=np.int32)
    s = S.Sampler(1000, 0)
    for params in (P(), P(temperature=0), P(temperature=-1), P(mirostat_mode=1), P(mirostat_mode=2),
                   P(top_k=0, typical_p=0.8, repeat_penalty=1.5, frequency_penalty=0.5, logit_bias={1: 3.0})):
        s.sample(x, history, params, logits_processor=[lambda ids, sc: sc * 2], grammar_mask=x > 0)
        assert np.array_equal(x, snapshot, equal_nan=True)


def test_logits_processor():
    x = np.zeros(10, np.float32)
    seen = {}

    def force_three(input_ids, scores):
        seen["ids"], seen["scores"] = input_ids.copy(), scores.copy()
        out = np.full_like(scores, -np.inf)
        out[3] = 0
        return out

    s = S.Sampler(10, 0)
    history = np.array([1, 2], np.int32)
    assert s.sample(x, history, P(), logits_processor=S.LogitsProcessorList([force_three])) == 3
    assert seen["ids"].dtype == np.intc and seen["ids"].tolist() == [1, 2]
    assert s.sample(x, history, P(), logits_processor=force_three, input_ids=np.arange(5)) == 3
    assert seen["ids"].tolist() == [0, 1, 2, 3, 4]
    # processors run first and in order, on the unpenalised logits
    add_one = lambda ids, sc: sc + 1  # noqa: E731
    s.sample(x, history, P(repeat_penalty=2.0), logits_processor=[add_one, force_three])
    assert np.array_equal(seen["scores"], x + 1)


def test_grammar_mask():
    x = np.random.default_rng(9).normal(size=300).astype(np.float32)
    allowed = np.zeros(300, bool)
    allowed[[5, 17, 250]] = True
    s = S.Sampler(300, 0)
    for params in (P(), P(temperature=0), P(temperature=-1), P(mirostat_mode=2)):
        assert all(s.sample(x, np.array([], np.int32), params, grammar_mask=allowed) in (5, 17, 250) for _ in range(50))
    with pytest.raises(ValueError, match="every logit is -inf or NaN"):
        s.sample(x, np.array([], np.int32), P(), grammar_mask=np.zeros(300, bool))


def test_mirostat_runs_and_adapts():
    rows = (np.random.default_rng(10).normal(size=(40, 2000)) * 3).astype(np.float32)
    for mode in (1, 2):
        s = S.Sampler(2000, 0)
        tokens = [s.sample(r, np.array([], np.int32), P(mirostat_mode=mode, mirostat_tau=3.0)) for r in rows]
        assert all(0 <= t < 2000 for t in tokens) and s._mu != 6.0
    s.reseed(0)
    assert s._mu is None


def test_unknown_mirostat_mode_means_off():
    assert sequence(3, params=P(mirostat_mode=3)) == sequence(3, params=P())


def test_wrong_shape():
    with pytest.raises(ValueError, match="shape"):
        S.Sampler(10, 0).sample(np.zeros(11, np.float32), np.array([], np.int32), P())


# --- logprobs and the callback containers ----------------------------------------------------------


def test_logits_to_logprobs():
    rng = np.random.default_rng(11)
    x = (rng.normal(size=(4, 1000)) * 5).astype(np.float32)
    x[1, ::3] = -np.inf
    got = S.logits_to_logprobs(x)
    assert got.dtype == np.float32
    ref = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    ref -= np.log(np.exp(ref).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got, ref, atol=2e-5)
    np.testing.assert_array_equal(S.logits_to_logprobs(x[2]), got[2])
    assert np.all(np.isnan(S.logits_to_logprobs(np.full(3, -np.inf, np.float32))))  # as llama-cpp-python's


def test_top_logprobs_order_and_ties():
    rng = np.random.default_rng(12)
    for n in (1, 5, 40):
        row = np.round(rng.normal(size=3000), 1).astype(np.float32)  # many ties
        ids, values = S.top_logprobs(row, n)
        ref = sorted(zip(row.tolist(), range(row.size)), reverse=True)[:n]  # llama-cpp-python's ordering
        assert list(zip(values.tolist(), ids.tolist())) == ref
    assert S.top_logprobs(row, 0)[0].size == 0 and S.top_logprobs(row[:3], 10)[0].size == 3


def test_callback_lists():
    procs = S.LogitsProcessorList([lambda ids, sc: sc + 1, lambda ids, sc: sc * 2])
    assert np.array_equal(procs(np.array([1]), np.zeros(2, np.float32)), [2, 2])
    stops = S.StoppingCriteriaList([lambda ids, lg: False, lambda ids, lg: len(ids) > 2])
    assert stops(np.arange(3), np.zeros(2)) and not stops(np.arange(2), np.zeros(2))


# --- llama.cpp itself, through llama-cpp-python's low-level API ---------------------------------------


@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp")


class LlamaChain:
    """A llama.cpp sampler chain applied to one logits row at a time, accepting what it selects."""

    def __init__(self, L, samplers):
        self.L = L
        self.chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        for s in samplers:
            L.llama_sampler_chain_add(self.chain, s)
        self.dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])

    def apply(self, row):
        """Returns (kept ids in chain order, selected id or None) and accepts the selected token."""
        arr = (self.L.llama_token_data * row.size)()
        view = np.frombuffer(arr, dtype=self.dtype)
        view["id"], view["logit"], view["p"] = np.arange(row.size), row, 0
        cur = self.L.llama_token_data_array(data=arr, size=row.size, selected=-1, sorted=False)
        self.L.llama_sampler_apply(self.chain, ctypes.byref(cur))
        kept = view["id"][: cur.size].copy()
        if cur.selected < 0:
            return kept, None
        self.L.llama_sampler_accept(self.chain, int(kept[cur.selected]))
        return kept, int(kept[cur.selected])

    def close(self):
        self.L.llama_sampler_free(self.chain)


def llama_samplers(L, p, seed, n_vocab):
    """The chain llama_cpp.Llama._init_sampler builds for these parameters (no logits processor, no grammar)."""
    chain = [L.llama_sampler_init_penalties(n_vocab, p.penalty_last_n, p.repeat_penalty, p.frequency_penalty,
                                            p.presence_penalty)]
    if p.temperature < 0:
        return chain + [L.llama_sampler_init_dist(seed)]
    if p.temperature == 0:
        return chain + [L.llama_sampler_init_greedy()]
    if p.mirostat_mode == 1:
        return chain + [L.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, S.MIROSTAT_M)]
    if p.mirostat_mode == 2:
        return chain + [L.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta)]
    return chain + [L.llama_sampler_init_top_k(p.top_k), L.llama_sampler_init_typical(p.typical_p, 1),
                    L.llama_sampler_init_top_p(p.top_p, 1), L.llama_sampler_init_min_p(p.min_p, 1),
                    L.llama_sampler_init_temp(p.temperature), L.llama_sampler_init_dist(seed)]


def test_stages_agree_with_llama_cpp(llama_cpp):
    L = llama_cpp
    rng = np.random.default_rng(13)
    for x in logit_rows(14, count=60):
        k = int(rng.choice([0, 1, 5, 40, x.size + 3]))
        typ = 1.0 if np.isneginf(x).any() else float(rng.choice([1.0, 0.9, 0.5, 0.0]))  # llama.cpp: NaN entropy
        top_p, min_p = float(rng.choice([1.0, 0.95, 0.5, 0.0])), float(rng.choice([0.0, 0.05, 0.3, 1.0]))
        stages = [(lambda: L.llama_sampler_init_top_k(k), lambda c: S.top_k(c, k)),
                  (lambda: L.llama_sampler_init_typical(typ, 1), lambda c: S.typical(c, typ)),
                  (lambda: L.llama_sampler_init_top_p(top_p, 1), lambda c: S.top_p(c, top_p)),
                  (lambda: L.llama_sampler_init_min_p(min_p, 1), lambda c: S.min_p(c, min_p))]
        ours = all_candidates(x)
        for n_stages, (_, ours_stage) in enumerate(stages, 1):
            chain = LlamaChain(L, [make() for make, _ in stages[:n_stages]])
            theirs, _ = chain.apply(x)
            chain.close()
            ours = ours_stage(ours)
            assert same_kept(ours, theirs, x), (x.size, k, typ, top_p, min_p, n_stages)


@pytest.mark.parametrize("params", [
    P(),
    P(temperature=1.5, top_k=0),
    P(temperature=-1.0),
    P(temperature=0.0, repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.3),
    P(temperature=0.7, top_k=100, top_p=0.9, min_p=0.02, typical_p=0.95, repeat_penalty=1.1,
      frequency_penalty=0.1, presence_penalty=0.1, penalty_last_n=16),
    P(mirostat_mode=1),
    P(mirostat_mode=2, mirostat_tau=3.0, repeat_penalty=1.2),
], ids=["defaults", "top_k=0", "temp<0", "greedy+penalties", "everything", "mirostat1", "mirostat2"])
def test_same_tokens_as_llama_cpp(llama_cpp, params):
    """Same logits and seed: the same token sequence, penalties fed back as llama.cpp's accept() does."""
    n_vocab, n_tokens, seed = 3000, 60, 20240531
    rows = (np.random.default_rng(15).normal(size=(n_tokens, n_vocab)) * 2.5).astype(np.float32)
    chain = LlamaChain(llama_cpp, llama_samplers(llama_cpp, params, seed, n_vocab))
    theirs = [chain.apply(row)[1] for row in rows]
    chain.close()
    sampler, ours = S.Sampler(n_vocab, seed), []
    for row in rows:
        ours.append(sampler.sample(row, np.array(ours, np.int32), params))
    assert ours == theirs


def test_logprobs_match_llama_cpp_python(llama_cpp):
    x = (np.random.default_rng(16).normal(size=(3, 500)) * 4).astype(np.float32)
    x[0, :10] = -np.inf
    np.testing.assert_array_equal(S.logits_to_logprobs(x), llama_cpp.Llama.logits_to_logprobs(x))
