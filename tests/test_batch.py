"""Many sequences in one context (pi_decode_batch and the sequence operations) and the BatchEngine
over them: each sequence's logits are the ones it gets alone, bit for bit, and each request's text
is the one it gets from Llama alone."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from pypowerinfer import Llama
from pypowerinfer._ffi import UnsupportedError
from pypowerinfer.batching import BatchEngine
from pypowerinfer.model import NativeContext, NativeModel

PROMPTS = ["The capital of France is", "def fibonacci(n):\n", "Once upon a time, in a land far",
           "The three primary colours are", "Water boils at", "List the planets of the solar system:",
           "import numpy as np\n", "A haiku about autumn:\n"]


def context(model: NativeModel, n_seq: int = 1, n_ctx: int = 512, n_batch: int = 512, n_logits: int = 0,
            **options) -> NativeContext:
    return NativeContext(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=2, n_threads_batch=2, logits_all=False,
                         n_logits=n_logits or max(n_seq, 1), n_seq_max=n_seq, **options)


def batch(rows):
    """rows: (token, pos, seq, logits) tuples -> the four arrays of decode_batch"""
    t, p, s, f = zip(*rows)
    return (np.array(t, np.int32), np.array(p, np.int32), np.array(s, np.int32), np.array(f, np.int8))


@pytest.fixture(scope="module")
def model(smollm2_path):
    return NativeModel(smollm2_path)


@pytest.fixture(scope="module")
def tokens(model):
    rng = np.random.default_rng(3)
    return [rng.integers(1, model.info.n_vocab, n).astype(np.int32) for n in (9, 5, 14)]


def solo(model, toks, n_ctx=512) -> np.ndarray:
    """The logits of every position of toks, evaluated alone one token at a time after its first."""
    ctx = context(model, n_ctx=n_ctx)
    rows = []
    ctx.decode(toks[:1], 0)
    rows.append(ctx.logits[0].copy())
    for i in range(1, len(toks)):
        ctx.decode(toks[i: i + 1], i)
        rows.append(ctx.logits[0].copy())
    return np.array(rows)


def test_sequences_in_one_step_get_their_solo_logits_exactly(model, tokens):
    """Three sequences: prompts of different lengths in one step, then their next tokens together."""
    ctx = context(model, n_seq=3)
    prompt = 4  # each sequence's first 4 tokens as one step, the rest one per step, all together
    rows = [(int(t[i]), i, s, i == prompt - 1) for s, t in enumerate(tokens) for i in range(prompt)]
    ctx.decode_batch(*batch(rows))
    got = {s: [ctx.logits[s].copy()] for s in range(3)}
    for i in range(prompt, max(len(t) for t in tokens)):
        live = [s for s, t in enumerate(tokens) if i < len(t)]
        ctx.decode_batch(*batch([(int(tokens[s][i]), i, s, 1) for s in live]))
        for row, s in enumerate(live):
            got[s].append(ctx.logits[row].copy())
    for s, t in enumerate(tokens):
        assert ctx.seq_len(s) == len(t)
        want = solo(model, t)[prompt - 1:]
        np.testing.assert_array_equal(np.array(got[s]), want)


def test_logits_rows_follow_the_flags_in_token_order(model, tokens):
    """Flags in the middle of sequences: the rows are those tokens', in batch order."""
    ctx = context(model, n_seq=2, n_logits=4)
    a, b = tokens[0][:5], tokens[1][:3]
    flags_a, flags_b = [0, 1, 0, 0, 1], [1, 0, 1]
    ctx.decode_batch(*batch([(int(a[i]), i, 0, flags_a[i]) for i in range(5)] +
                            [(int(b[i]), i, 1, flags_b[i]) for i in range(3)]))
    want = [solo(model, a)[1], solo(model, a)[4], solo(model, b)[0], solo(model, b)[2]]
    for row, w in enumerate(want):
        np.testing.assert_array_equal(ctx.logits[row], w)


def test_truncate_and_copy_prefix(model, tokens):
    ctx = context(model, n_seq=3)
    t = tokens[2]
    ctx.decode_batch(*batch([(int(x), i, 0, 0) for i, x in enumerate(t[:10])]))
    # sequence 1 takes sequence 0's first 6 positions and goes on from there, as 0 does after truncation
    ctx.seq_copy_prefix(0, 1, 6)
    ctx.seq_truncate(0, 6)
    assert (ctx.seq_len(0), ctx.seq_len(1)) == (6, 6)
    ctx.decode_batch(*batch([(int(t[6]), 6, 0, 1), (int(t[6]), 6, 1, 1)]))
    want = solo(model, t)[6]
    np.testing.assert_array_equal(ctx.logits[0], want)
    np.testing.assert_array_equal(ctx.logits[1], want)
    ctx.seq_clear(1)
    assert ctx.seq_len(1) == 0 and ctx.seq_len(0) == 7
    ctx.seq_clear()
    assert ctx.seq_len(0) == 0


def test_more_tokens_than_n_batch_run_in_chunks(model, tokens):
    """A batch larger than n_batch: split into steps, a sequence across two of them, the rows kept."""
    ctx = context(model, n_seq=2, n_batch=8)
    a, b = tokens[2], tokens[0]  # 14 + 9 tokens in steps of 8
    ctx.decode_batch(*batch([(int(x), i, 0, i == len(a) - 1) for i, x in enumerate(a)] +
                            [(int(x), i, 1, i == len(b) - 1) for i, x in enumerate(b)]))
    np.testing.assert_array_equal(ctx.logits[0], solo(model, a)[-1])
    np.testing.assert_array_equal(ctx.logits[1], solo(model, b)[-1])


def test_sequences_wrap_the_sliding_window(gemma3_path):
    """gemma 3: local layers (a window, their own rope base) in a batch of sequences."""
    model = NativeModel(gemma3_path)
    rng = np.random.default_rng(5)
    seqs = [rng.integers(1, 1000, n).astype(np.int32) for n in (7, 12)]
    ctx = context(model, n_seq=2, n_ctx=256)
    ctx.decode_batch(*batch([(int(x), i, s, i == len(t) - 1) for s, t in enumerate(seqs) for i, x in enumerate(t)]))
    for s, t in enumerate(seqs):
        one = context(model, n_ctx=256)
        one.decode(t, 0)
        np.testing.assert_array_equal(ctx.logits[s], one.logits[0])


def test_bad_batches_are_refused_and_change_nothing(model, tokens):
    ctx = context(model, n_seq=2, n_ctx=64)
    t = tokens[0]
    ctx.decode_batch(*batch([(int(x), i, 0, 0) for i, x in enumerate(t[:4])]))
    bad = {
        "outside": [(1, 0, 2, 1)],
        "not next to each other": [(1, 4, 0, 0), (1, 0, 1, 0), (1, 5, 0, 1)],
        "does not follow": [(1, 6, 0, 1)],
        "previous token": [(1, 4, 0, 0), (1, 6, 0, 1)],
        "vocabulary": [(model.info.n_vocab, 4, 0, 1)],
        "keeps 2 rows": [(1, 4, 0, 1), (1, 5, 0, 1), (1, 6, 0, 1)],
        "exceed context window of 32": [(1, 4 + i, 0, 0) for i in range(29)],
    }
    for message, rows in bad.items():
        with pytest.raises(ValueError, match=message):
            ctx.decode_batch(*batch(rows))
        assert (ctx.seq_len(0), ctx.seq_len(1)) == (4, 0)
    with pytest.raises(ValueError, match="differ in length"):
        ctx.decode_batch(np.zeros(2, np.int32), np.zeros(1, np.int32), np.zeros(2, np.int32), np.zeros(2, np.int8))
    for call in (lambda: ctx.seq_truncate(2, 0), lambda: ctx.seq_clear(5), lambda: ctx.seq_copy_prefix(0, 1, 5),
                 lambda: ctx.seq_len(-1), lambda: ctx.seq_truncate(0, -1)):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("option", [dict(vram_budget=1 << 20), dict(n_gpu_layers=1), dict(embeddings=True),
                                    dict(logits_all=True)])
def test_many_sequences_refuse_what_holds_one(model, option):
    options = dict(n_ctx=64, n_batch=64, n_threads=2, n_threads_batch=2, logits_all=False, n_seq_max=2)
    with pytest.raises(UnsupportedError, match="several sequences run on the CPU only"):
        NativeContext(model, **{**options, **option})


def test_n_seq_max_is_checked(model):
    for n in (-1, 300):
        with pytest.raises(ValueError, match="n_seq_max"):
            context(model, n_seq=n, n_ctx=512)
    ctx = context(model, n_seq=4, n_ctx=100)
    assert ctx.seq_ctx == 25


# ---- the engine ----

def solo_text(path, prompt: str, **kw) -> str:
    with Llama(str(path), n_ctx=512, n_threads=2, verbose=False) as llm:
        return llm.create_completion(prompt, **kw)["choices"][0]["text"]


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=2048, n_threads=2, verbose=False) as one:
        yield one


@pytest.fixture(scope="module")
def solo_greedy(smollm2_path):
    with Llama(str(smollm2_path), n_ctx=512, n_threads=2, verbose=False) as one:
        return [one.create_completion(p, max_tokens=24, temperature=0)["choices"][0]["text"] for p in PROMPTS]


def test_concurrent_greedy_requests_give_their_solo_text(llm, solo_greedy):
    with BatchEngine(llm, n_parallel=4) as engine:
        assert engine.seq_ctx == 512
        got = [None] * len(PROMPTS)

        def run(i):
            got[i] = engine.create_completion(PROMPTS[i], max_tokens=24, temperature=0)["choices"][0]["text"]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == solo_greedy
        # 8 requests on 4 slots: they joined while others ran, and steps held several tokens
        assert engine.step_tokens > engine.steps
        assert engine.busy_slots() == 0 and engine.waiting() == 0


def test_create_completions_streams_every_request(llm, solo_greedy):
    with BatchEngine(llm, n_parallel=8) as engine:
        texts = [""] * len(PROMPTS)
        reasons = [None] * len(PROMPTS)
        for i, chunk in engine.create_completions([dict(prompt=p, max_tokens=24, temperature=0) for p in PROMPTS]):
            texts[i] += chunk["choices"][0]["text"]
            reasons[i] = chunk["choices"][0]["finish_reason"] or reasons[i]
        assert texts == solo_greedy
        assert all(r in ("stop", "length") for r in reasons)


def test_each_request_keeps_its_own_sampler_stop_and_grammar(llm, smollm2_path):
    from pypowerinfer.grammar import LlamaGrammar

    sampled = dict(prompt=PROMPTS[2], max_tokens=20, temperature=0.9, seed=11)
    stopped = dict(prompt=PROMPTS[5], max_tokens=40, temperature=0, stop=["Mars"])
    grammar_text = 'root ::= "yes" | "no"'
    with BatchEngine(llm, n_parallel=3) as engine:
        outs = {}

        def run(name, kw):
            if name == "grammar":
                kw = dict(kw, grammar=LlamaGrammar.from_string(grammar_text, verbose=False))
            outs[name] = engine.create_completion(**kw)["choices"][0]

        jobs = {"sampled": sampled, "stopped": stopped,
                "grammar": dict(prompt="Is the sky blue? Answer:", max_tokens=8, temperature=0.7, seed=3)}
        threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert outs["sampled"]["text"] == solo_text(smollm2_path, **sampled)
    assert outs["stopped"]["text"] == solo_text(smollm2_path, **stopped)
    assert "Mars" not in outs["stopped"]["text"] and outs["stopped"]["finish_reason"] == "stop"
    assert outs["grammar"]["text"] in ("yes", "no")


def test_logprobs_of_generated_tokens(llm):
    with BatchEngine(llm, n_parallel=2) as engine:
        out = engine.create_completion(PROMPTS[0], max_tokens=5, temperature=0, logprobs=2)["choices"][0]
        lp = out["logprobs"]
        assert len(lp["tokens"]) == 5 and "".join(lp["tokens"]) == out["text"]
        assert all(v <= 0 for v in lp["token_logprobs"])
        with pytest.raises(NotImplementedError, match="echo"):
            engine.create_completion(PROMPTS[0], max_tokens=2, logprobs=1, echo=True)


def test_a_closed_stream_frees_its_slot(llm):
    with BatchEngine(llm, n_parallel=2) as engine:
        stream = engine.create_completion(PROMPTS[1], max_tokens=200, temperature=0, stream=True)
        next(stream)
        assert engine.busy_slots() == 1
        threading.Event().wait(0.5)  # the request runs its tokens ahead of the reader, then waits
        stream.close()
        for _ in range(100):
            if engine.busy_slots() == 0:
                break
            threading.Event().wait(0.01)
        assert engine.busy_slots() == 0
        # the slot serves the next request, and its prompt's prefix is reused from the cache
        before = engine.step_tokens
        text = engine.create_completion(PROMPTS[1], max_tokens=4, temperature=0)["choices"][0]["text"]
        assert engine.step_tokens - before < 4 + 2
        assert text


def test_a_shared_prefix_is_copied_from_another_slot(llm):
    system = "You are a helpful assistant who answers in one short sentence. " * 4
    with BatchEngine(llm, n_parallel=2) as engine:
        first = engine.create_completion(system + "Q: What is 2+2? A:", max_tokens=2, temperature=0)
        stream = engine.create_completion(system + "Q: Name a colour. A:", max_tokens=50, temperature=0, stream=True)
        next(stream)  # holds slot 0 or 1; the next request takes the other, copying the shared prefix
        before = engine.step_tokens
        second = engine.create_completion(system + "Q: Name a fruit. A:", max_tokens=2, temperature=0)
        n_system = len(llm.tokenize(system.encode()))
        assert engine.step_tokens - before < n_system
        stream.close()
    assert first["choices"][0]["text"] and second["choices"][0]["text"]


def test_engine_refuses_bad_settings(llm, smollm2_path):
    for n in (0, -2):
        with pytest.raises(ValueError, match="n_parallel"):
            BatchEngine(llm, n_parallel=n)
    with BatchEngine(llm, n_parallel=4, n_ctx=256) as engine:  # 64 positions a slot
        with pytest.raises(ValueError, match="exceed context window of 64"):
            engine.create_completion("word " * 80, max_tokens=4)
    engine.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        engine.create_completion("hi", max_tokens=2)
