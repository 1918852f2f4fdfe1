"""The engine loop: ragged batches equal per-request runs, kappa 0 is plain decode, per-request
parameters, EOS / stop / max_tokens truncation inside an accepted run, RNG discipline, kappa
schedule, greedy bitwise on a tiny model (invariant backend), and one exactness check on a toy model."""

import numpy as np
import pytest
import torch
from scipy import stats

from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import Engine, SamplingParams
from specverify.engine.model import random_llama
from specverify.engine.proposers import NgramProposer
from specverify.engine.scheduler import KappaSchedule
from specverify.errors import InputError
from specverify.kernels.backend import backend_names
from specverify.reference.toy import ToyModel

PROMPTS = [[5, 9, 2, 7, 1, 3, 3, 8], [11, 4], list(range(20, 40)), [1, 2, 3, 1, 2, 3, 1, 2]]


class Scripted:
    """A toy-protocol model that deterministically continues a fixed script: logits one-hot at
    script[len(prefix) - len(prompt)] (used as target and as a perfect draft)."""

    def __init__(self, vocab, prompt, script):
        self.vocab_size, self.n, self.script = vocab, len(prompt), script

    def logits(self, prefix):
        out = np.full(self.vocab_size, -5.0)
        i = len(prefix) - self.n
        out[self.script[i] if i < len(self.script) else 0] = 5.0
        return out


def test_ragged_batch_equals_each_request_alone():
    model = random_llama(7)
    draft = random_llama(8)
    seeds = [11, 12, 13, 14]
    together = generate(model, draft, PROMPTS, spec=SpecOptions("draft", kappa=3),
                        sampling=[SamplingParams(temperature=1.0, seed=s, max_tokens=20) for s in seeds])
    for i, p in enumerate(PROMPTS):
        alone = generate(model, draft, [p], sampling=SamplingParams(temperature=1.0, seed=seeds[i], max_tokens=20),
                         spec=SpecOptions("draft", kappa=3))
        assert alone.tokens[0] == together.tokens[i]


def test_kappa_zero_is_plain_decode_and_consumes_one_coin_a_step():
    model = random_llama(9)
    plain = generate(model, None, PROMPTS, spec=SpecOptions("none"),
                     sampling=[SamplingParams(temperature=1.0, seed=s, max_tokens=16) for s in [1, 2, 3, 4]])
    # a request capped at 0 drafts inside a speculative batch behaves exactly like plain decode
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=16, kappa=0 if i % 2 == 0 else None)
              for i, s in enumerate([1, 2, 3, 4])]
    mixed = generate(model, None, PROMPTS, sampling=params, spec=SpecOptions("uniform", kappa=3))
    assert mixed.tokens[0] == plain.tokens[0] and mixed.tokens[2] == plain.tokens[2]
    assert mixed.tokens[1] != plain.tokens[1] or mixed.tokens[3] != plain.tokens[3]   # the others speculated
    assert mixed.metrics.num_verifies > 0


def test_per_request_params():
    model = random_llama(10)
    params = [SamplingParams(temperature=0.0, max_tokens=5), SamplingParams(temperature=2.0, top_k=1, seed=3, max_tokens=9),
              SamplingParams(temperature=1.0, top_p=1e-9, seed=4, max_tokens=7), SamplingParams(temperature=1.0, seed=5, max_tokens=3)]
    r = generate(model, None, PROMPTS, sampling=params, spec=SpecOptions("ngram", kappa=3))
    greedy = generate(model, None, PROMPTS, sampling=SamplingParams(max_tokens=9), spec=SpecOptions("none"))
    assert [len(t) for t in r.tokens] == [5, 9, 7, 3]
    assert r.tokens[0] == greedy.tokens[0][:5]
    assert r.tokens[1] == greedy.tokens[1]                 # top-k 1 = greedy at any temperature
    assert r.tokens[2] == greedy.tokens[2][:7]             # top-p ~0 keeps only the argmax
    assert all(o.finish_reason == "length" for o in r.outputs)


@pytest.mark.parametrize("cut", ["eos", "max_tokens", "stop_token"])
def test_truncation_inside_an_accepted_run(cut):
    prompt, script = [1, 2], [3, 4, 5, 6, 7, 8, 9, 3, 4]
    toy = Scripted(12, prompt, script)
    spec = SpecOptions("draft", kappa=7)
    if cut == "eos":
        r = generate(toy, toy, [prompt], sampling=SamplingParams(max_tokens=9), spec=spec,
                     run=RunOptions(eos_token_id=6))
        want, reason = [3, 4, 5, 6], "stop"
    elif cut == "max_tokens":
        r = generate(toy, toy, [prompt], sampling=SamplingParams(max_tokens=3), spec=spec)
        want, reason = [3, 4, 5], "length"
    else:
        r = generate(toy, toy, [prompt], sampling=[SamplingParams(max_tokens=9, stop_token_ids=(5,))], spec=spec)
        want, reason = [3, 4, 5], "stop"
    assert r.tokens[0] == want and r.outputs[0].finish_reason == reason
    # prefill step + one verify whose accepted run went past the cut (the tail discarded) -- except
    # for max_tokens, where the drafts are capped at what can be kept
    assert r.metrics.num_steps == 2
    if cut == "max_tokens":
        assert r.metrics.num_draft_tokens == 1
    else:
        assert r.metrics.num_accepted == 7 and r.metrics.num_emitted == len(want)


def test_stop_string_inside_an_accepted_run():
    prompt, script = [1], [3, 4, 5, 6, 7, 8]
    toy = Scripted(12, prompt, script)
    detok = lambda ids: "".join(chr(ord("a") + i) for i in ids)      # 3 -> d, 4 -> e, 5 -> f ...
    eng = Engine(__import__("specverify.engine.toy_adapter", fromlist=["x"]).ToyAdapter(toy),
                 __import__("specverify.engine.proposers", fromlist=["x"]).DraftModelProposer(
                     __import__("specverify.engine.toy_adapter", fromlist=["x"]).ToyAdapter(toy), 16, 4),
                 kappa=6, num_blocks=16, block_size=4, detokenize=detok)
    eng.add_request([12, 1], SamplingParams(max_tokens=6, stop=("ef",)))
    out = eng.run()[0]
    assert out.token_ids == [3, 4, 5] and out.text == "d" and out.finish_reason == "stop"


def test_kappa_schedule():
    s = KappaSchedule({1: 7, 8: 3, 32: 1})
    assert [s(b) for b in (1, 2, 8, 9, 32, 33)] == [7, 3, 3, 1, 1, 0]
    assert KappaSchedule(4)(100) == 4
    with pytest.raises(InputError):
        KappaSchedule(-1)
    model = random_llama(0)
    params = [SamplingParams(max_tokens=n) for n in (2, 4, 8, 30)]     # the batch shrinks 4 -> 1
    r = generate(model, None, PROMPTS, sampling=params, spec=SpecOptions("uniform", kappa={1: 5, 2: 2}),
                 run=RunOptions(max_batch_size=4))
    assert len(r.metrics.drafted_at) == 5                 # batch 1 at the end: up to 5 drafts
    assert r.metrics.drafted_at[2] < r.metrics.drafted_at[1] or r.metrics.drafted_at[0] > r.metrics.drafted_at[4]


def test_kappa_checked_in_one_place():
    """One validation for the batch kappa, the per-request cap and the CLI; "none" runs as kappa 0;
    the CLI's default kappa is the API's."""
    from specverify.cli import build_parser
    from specverify.engine.scheduler import DEFAULT_KAPPA, check_kappa, spec_kappa
    assert check_kappa(2) == 2 and check_kappa({4: 1, 1: 3}) == [(1, 3), (4, 1)]
    for bad in (-1, {}, {0: 2}, {1: -1}):
        with pytest.raises(InputError, match="kappa"):
            check_kappa(bad)
    with pytest.raises(InputError, match="kappa"):
        SamplingParams(kappa=-1)
    with pytest.raises(InputError, match="kappa"):
        SamplingParams(kappa={1: 2})
    with pytest.raises(InputError, match="kappa"):
        SpecOptions("none", kappa=-1)
    assert spec_kappa("none", 5) == 0 and spec_kappa("ngram", 5) == 5 and spec_kappa("draft", {1: 2}) == {1: 2}
    assert SpecOptions().kappa == DEFAULT_KAPPA
    assert build_parser().parse_args(["generate", "hi"]).kappa == DEFAULT_KAPPA


def test_ngram_lookup():
    ng = NgramProposer(n_max=3)
    assert ng.lookup([1, 2, 3, 9, 1, 2, 3], 3) == [9, 1, 2]
    assert ng.lookup([5, 6, 7], 2) == []
    assert ng.lookup([4, 8, 4], 5) == [8, 4]


def test_errors():
    model = random_llama(0)
    with pytest.raises(InputError):
        generate(model, None, [[]], spec=SpecOptions("none"))
    with pytest.raises(InputError):
        generate(model, None, [[1]], spec=SpecOptions("bogus"))
    with pytest.raises(InputError):
        SamplingParams(temperature=-1)
    with pytest.raises(InputError):
        Engine(model, None, kappa=2)


@pytest.mark.skipif("invariant" not in backend_names(), reason="the 'invariant' op backend is not registered yet")
def test_greedy_speculative_is_bitwise_plain_decode_on_invariant_backend():
    model = random_llama(11)
    rows_plain, rows_spec = {}, {}
    plain = generate(model, None, PROMPTS, sampling=SamplingParams(max_tokens=24), spec=SpecOptions("none"),
                     run=RunOptions(backend="invariant", max_batch_size=1,
                                    record_logits=lambda r, j, row: rows_plain.__setitem__((r, j), row.clone())))
    for spec, kappa in [("ngram", 3), ("draft", 5), ("uniform", 2)]:
        rows_spec.clear()
        draft = random_llama(12) if spec == "draft" else None
        s = generate(model, draft, PROMPTS, sampling=SamplingParams(max_tokens=24), spec=SpecOptions(spec, kappa=kappa),
                     run=RunOptions(backend="invariant",
                                    record_logits=lambda r, j, row: rows_spec.__setitem__((r, j), row.clone())))
        assert s.tokens == plain.tokens
        assert rows_spec.keys() == rows_plain.keys()
        assert all(torch.equal(rows_spec[k], rows_plain[k]) for k in rows_plain)


def test_toy_first_two_tokens_follow_the_target_law():
    """Joint law of the first 3 tokens with a poor draft (kappa 3, temperature 1; the second step
    verifies 1 draft, a later one up to 2) vs the exact law p(x1) p(x2 | x1) p(x3 | x1 x2). Pearson
    chi-square at alpha = 0.001 (fixed seed: deterministic); N = 6000 over 27 cells detects a
    total-variation deviation of ~0.07 with power > 0.9."""
    toy = ToyModel(3, seed=21)
    draft = toy.draft(seed=22, noise=2.0)
    N = 6000
    r = generate(toy, draft, [[2]] * N, sampling=SamplingParams(temperature=1.0, max_tokens=3),
                 spec=SpecOptions("draft", kappa=3), run=RunOptions(seed=99, max_batch_size=N))
    counts = np.zeros(27)
    for t in r.tokens:
        counts[t[0] * 9 + t[1] * 3 + t[2]] += 1
    exact = np.array([toy.probs((2,))[a] * toy.probs((2, a))[b] * toy.probs((2, a, b))[c]
                      for a in range(3) for b in range(3) for c in range(3)])
    assert r.metrics.num_rejections > 100 and r.metrics.num_accepted > 100
    _, pval = stats.chisquare(counts, exact * N)
    assert pval > 1e-3


def _triton_usable() -> bool:
    import os
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "triton" in backend_names()
    return torch.cuda.is_available() and "triton" in backend_names()


@pytest.mark.slow
@pytest.mark.skipif(not _triton_usable(), reason="Triton needs a GPU or TRITON_INTERPRET=1 set before Python starts")
def test_greedy_speculative_is_bitwise_plain_decode_on_triton_backend():
    model = random_llama(11)
    rows = {}
    plain = generate(model, None, [[1, 2, 3, 4]], sampling=SamplingParams(max_tokens=6), spec=SpecOptions("none"),
                     run=RunOptions(backend="triton",
                                    record_logits=lambda r, j, row: rows.__setitem__(("p", j), row.clone())))
    spec = generate(model, None, [[1, 2, 3, 4]], sampling=SamplingParams(max_tokens=6),
                    spec=SpecOptions("uniform", kappa=3),
                    run=RunOptions(backend="triton",
                                   record_logits=lambda r, j, row: rows.__setitem__(("s", j), row.clone())))
    assert spec.tokens == plain.tokens and spec.metrics.num_verifies > 0
    assert all(torch.equal(rows[("p", j)], rows[("s", j)]) for j in range(6))


@pytest.mark.parametrize("make", [
    lambda: SpecOptions("bogus"), lambda: SpecOptions(kappa=-1), lambda: SpecOptions(kappa={0: 2}),
    lambda: SpecOptions(draft_layers=0), lambda: SpecOptions(ngram_min=0), lambda: SpecOptions(ngram_n=1, ngram_min=2),
    lambda: RunOptions(max_batch_size=0), lambda: RunOptions(num_blocks=0), lambda: RunOptions(block_size=0),
    lambda: RunOptions(eos_token_id=-1), lambda: RunOptions(on_step=3), lambda: RunOptions(record_logits="x"),
    lambda: RunOptions(engine_class=object)])
def test_generate_options_reject_bad_values(make):
    with pytest.raises(InputError):
        make()


def test_sampling_is_one_params_or_one_per_prompt():
    model = random_llama(0)
    one = generate(model, None, PROMPTS[:2], sampling=SamplingParams(max_tokens=4), spec=SpecOptions("none"))
    each = generate(model, None, PROMPTS[:2], sampling=[SamplingParams(max_tokens=4)] * 2, spec=SpecOptions("none"))
    assert one.tokens == each.tokens and [len(t) for t in one.tokens] == [4, 4]
    with pytest.raises(InputError):
        generate(model, None, PROMPTS[:2], sampling=[SamplingParams()], spec=SpecOptions("none"))
    with pytest.raises(InputError):
        generate(model, None, PROMPTS[:2], sampling=[SamplingParams(), {"max_tokens": 4}], spec=SpecOptions("none"))


def test_proposer_table():
    """Every proposer a SpecOptions may name is one entry of the table, with its capability."""
    from specverify.engine.api import PROPOSERS, SPECS
    assert SPECS == tuple(PROPOSERS) == ("none", "ngram", "draft", "uniform", "skewed", "external")
    assert all(e.name == n and e.capability for n, e in PROPOSERS.items())
    assert [n for n, e in PROPOSERS.items() if e.draft_model] == ["draft"]
    with pytest.raises(InputError, match="unknown spec"):
        SpecOptions("eagle")
    with pytest.raises(InputError, match="needs drafts_of"):
        SpecOptions("external")
    with pytest.raises(InputError, match="only it takes one"):
        SpecOptions("ngram", drafts_of=lambda rid, n, k: [])


@pytest.mark.parametrize("kw, needle", [
    (dict(stop="###"), "stop '###' must be a tuple (a missing comma?"),
    (dict(stop=("",)), "stop strings must be non-empty strings"),
    (dict(stop=(3,)), "stop strings must be non-empty strings"),
    (dict(bad_token_ids="12"), "bad_token_ids '12' must be a tuple"),
    (dict(stop_token_ids=7), "stop_token_ids 7 must be a tuple"),
    (dict(bad_sequences="ab"), "bad_sequences 'ab' must be a tuple"),
])
def test_strings_where_collections_are_expected_are_refused(kw, needle):
    # a string is not a collection: stop="###" stopped at any "#", bad_token_ids="12" banned 1 and 2
    import re
    from specverify.errors import InputError
    with pytest.raises(InputError, match=re.escape(needle)):
        SamplingParams(**kw)
