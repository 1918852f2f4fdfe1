"""The exact acceptance law of whole runs (`reference.acceptance`) against hand-computed cases and brute
force: the reference engine (`reference.toy_engine.SpecEngine`, the reference sampler) at a fixed seed.

Statistical tests here: each at level 1e-3 (a correct law fails one with probability <= 1e-3 per row);
the planted out-of-sync drafter is caught with the p-values printed in the asserts (power: its E is
0.4 below the exact one, > 20 standard errors at 20000 runs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specverify import stats
from specverify.errors import InputError
from specverify.reference import laws
from specverify.reference.acceptance import (CAPPED, FIXED, drafts_at, run_acceptance_law, speedup, sum_pmf,
                                             total_test)
from specverify.reference.toy import FixedRows, ToyModel
from specverify.reference.toy_engine import SpecEngine
from specverify.reference.transforms import Transform
from specverify.zoo.engine_loop import DraftKvRewind

LEVEL = 1e-3
RUNS = 20_000


def models():
    target = ToyModel(4, 123, scale=0.7, zero_frac=0.2)
    return target, target.draft(124, noise=1.0)


def trace_counts(law, traces):
    index = law.index()
    counts = np.zeros(len(law.traces), np.int64)
    for t, c in Counter(tuple(tuple(s) for s in x) for x in traces).items():
        counts[index[t]] = c          # KeyError: a trace the exact law says is impossible
    return counts


def test_the_docstring_example_one_step():
    target = FixedRows(np.array([[0.75, 0.25], [0.5, 0.5]]))
    draft = FixedRows(np.array([[0.5, 0.5], [0.5, 0.5]]))
    law = run_acceptance_law(target, draft, (), kappa=1, length=1, schedule=FIXED)
    assert dict(zip(law.traces, law.probs)) == pytest.approx({((1, 0),): 0.25, ((1, 1),): 0.75})
    assert law.E == pytest.approx(1.75) and law.r() == pytest.approx([0.75])
    assert law.mean_verifies == 1.0 and law.step_law() == pytest.approx([0.25, 0.75])


def test_one_step_agrees_with_the_one_step_chunk_law():
    target, draft = models()
    for kappa in (1, 2, 3):
        law = run_acceptance_law(target, draft, (1,), kappa=kappa, length=1, schedule=FIXED)
        stats_ = laws.acceptance_stats(laws.chunk_law(laws.EXACT, target, draft, (1,), kappa), kappa)
        assert law.E == pytest.approx(stats_.mean_length, abs=1e-12)
        assert law.r() == pytest.approx(stats_.r, abs=1e-12)
        assert law.probs.sum() == pytest.approx(1.0, abs=1e-12)


def test_schedules_draft_as_declared():
    assert [drafts_at(FIXED, 3, e, 5) for e in range(5)] == [3] * 5
    assert [drafts_at(CAPPED, 3, e, 5) for e in range(5)] == [0, 3, 2, 1, 0]
    with pytest.raises(InputError):
        run_acceptance_law(*models(), schedule="sometimes")


def test_capped_law_has_a_plain_prefill_step_and_never_overshoots():
    target, draft = models()
    law = run_acceptance_law(target, draft, (1,), kappa=2, length=4, schedule=CAPPED)
    assert law.probs.sum() == pytest.approx(1.0, abs=1e-12)
    for t in law.traces:       # 1 prefill token + sum (m + 1) over verifies + plain steps == 4 exactly
        emitted = 1 + sum(m + 1 for _, m in t)
        assert emitted <= 4 and all(k <= 4 - 1 - 1 for k, _ in t)


def test_sum_pmf_is_the_n_fold_convolution():
    pmf = np.array([0.2, 0.5, 0.0, 0.3])
    direct = np.array([1.0])
    for _ in range(7):
        direct = np.convolve(direct, pmf)
    assert sum_pmf(pmf, 7) == pytest.approx(direct, abs=1e-14)


def test_the_law_matches_the_reference_engine_by_brute_force():
    target, draft = models()
    law = run_acceptance_law(target, draft, (1,), kappa=2, length=4, transform=Transform(), schedule=FIXED)
    _, info = SpecEngine().generate(target, draft, (1,), 2, Transform(), 5, RUNS, 4)
    counts = trace_counts(law, info["verify_counts"])
    assert stats.pearson(counts, law.probs).p_value > LEVEL
    assert total_test(law, info["num_accepted"], RUNS, LEVEL).p_value > LEVEL
    e_obs = 1.0 + info["num_accepted"] / info["num_steps"]
    assert abs(e_obs - law.E) < 0.02, (e_obs, law.E)      # ~6 standard errors at 20000 runs


def test_a_drafter_out_of_sync_keeps_the_output_law_but_fails_the_acceptance_law():
    target, draft = models()
    law = run_acceptance_law(target, draft, (1,), kappa=2, length=4, transform=Transform(), schedule=FIXED)
    tokens, info = DraftKvRewind().generate(target, draft, (1,), 2, Transform(), 5, RUNS, 4)
    out_law = laws.target_law(target, (1,), 4)           # the output is still exact
    codes = laws.encode(tokens, 4)
    assert stats.pearson(stats.observed_counts(codes, out_law.codes()), out_law.probs).p_value > LEVEL
    test = total_test(law, info["num_accepted"], RUNS, LEVEL)
    # the FFT's sum law is exact to ~1e-11 absolute, so a p-value this far out reads as its noise floor
    assert test.p_value < 1e-9 and test.observed < test.low and test.direction == "below", test
    e_obs = 1.0 + info["num_accepted"] / info["num_steps"]
    assert speedup(e_obs, 2) < speedup(law.E, 2)


def test_greedy_runs_all_have_the_one_exact_trace():
    target, draft = models()
    law = run_acceptance_law(target, draft, (1,), kappa=2, length=4, transform=Transform(temperature=0.0), schedule=FIXED)
    assert len(law.traces) == 1 and law.probs[0] == pytest.approx(1.0)
    _, info = SpecEngine().generate(target, draft, (1,), 2, Transform(temperature=0.0), 0, 64, 4)
    assert {tuple(tuple(s) for s in x) for x in info["verify_counts"]} == {law.traces[0]}


def test_prompt_lookup_drafts_a_function_of_the_context():
    from specverify.reference.acceptance import LookupDrafter
    drafter = LookupDrafter(4, n_max=2)
    assert [drafter.propose(s) for s in [(1, 2, 3, 1, 2), (1, 2, 3, 1, 2, 3), (1,), (2, 2)]] == [3, 1, 0, 2]
    row = drafter.probs((1, 2, 3, 1, 2), Transform(temperature=0.7))
    assert row.tolist() == [0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("transform", [Transform(), Transform(temperature=0.7)])
def test_the_law_of_a_prompt_lookup_drafter_matches_the_reference_engine(transform):
    from specverify.reference.acceptance import LookupDrafter
    target, drafter = ToyModel(4, 123, scale=1.5, zero_frac=0.2), LookupDrafter(4, n_max=2)
    law = run_acceptance_law(target, drafter, (1, 2, 1), kappa=2, length=4, transform=transform, schedule=FIXED)
    assert len(law.traces) > 1
    _, info = SpecEngine().generate(target, drafter, (1, 2, 1), 2, transform, 5, RUNS, 4)
    assert stats.pearson(trace_counts(law, info["verify_counts"]), law.probs).p_value > LEVEL
    assert total_test(law, info["num_accepted"], RUNS, LEVEL).p_value > LEVEL


def test_sample_match_worked_example_and_the_to_length_schedule():
    """Sample-match keeps x with p(x): with p = (0.75, 0.25), q = (0.5, 0.5) that is sum_x q p = 0.5, not
    sum_x min(p, q) = 0.75. `to-length` drafts every token left in the last step, with no bonus then."""
    from specverify.reference.acceptance import SAMPLE_MATCH, TO_LENGTH
    target = FixedRows(np.array([[0.75, 0.25], [0.5, 0.5]]))
    draft = FixedRows(np.array([[0.5, 0.5], [0.5, 0.5]]))
    law = run_acceptance_law(target, draft, (), kappa=1, length=1, schedule=FIXED, verify_rule=SAMPLE_MATCH)
    assert dict(zip(law.traces, law.probs)) == pytest.approx({((1, 0),): 0.5, ((1, 1),): 0.5})
    assert [drafts_at(TO_LENGTH, 2, e, 4) for e in range(4)] == [2, 2, 2, 1]
    assert [drafts_at("prefill-to-length", 2, e, 4) for e in range(4)] == [0, 2, 2, 1]
    t, d = models()
    law = run_acceptance_law(t, d, (1, 2), kappa=2, length=4, transform=Transform(temperature=0.7), schedule=TO_LENGTH)
    assert ((1, 1),) in [x[-1:] for x in law.traces]          # a last step of one draft, all accepted: no bonus
    assert all(sum(m for _, m in x) + len(x) >= 4 for x in law.traces)
    with pytest.raises(InputError):
        run_acceptance_law(t, d, (1,), kappa=1, length=1, verify_rule="typical")


def simulate_sample_match(target, draft, prompt, kappa, length, transform, n, seed):
    """n runs of sample-match speculation under `to-length` (MLX-LM's loop, written out here): draft x_i ~ q
    one by one, the target samples y_i ~ p at every position, keep while y_i == x_i, then emit y; stop at
    `length`. Returns each run's (emitted tokens, (drafted, accepted) trace)."""
    rng = np.random.default_rng(seed)
    vocab = target.vocab_size
    out = []
    for _ in range(n):
        seq, trace = tuple(prompt), []
        while len(seq) - len(prompt) < length:
            k = drafts_at("to-length", kappa, len(seq) - len(prompt), length)
            drafts, ctx = [], seq
            for _ in range(k):
                x = int(rng.choice(vocab, p=draft.probs(ctx, transform)))
                drafts.append(x)
                ctx += (x,)
            m, emitted = 0, []
            for i in range(k + 1):
                y = int(rng.choice(vocab, p=target.probs(seq + tuple(emitted), transform)))
                emitted.append(y)
                if i < k and y == drafts[i]:
                    m += 1
                    if len(seq) - len(prompt) + len(emitted) == length:
                        break
                    continue
                break
            trace.append((k, m))
            seq += tuple(emitted[:length - (len(seq) - len(prompt))])
        out.append((seq[len(prompt):], trace))
    return out


def test_the_sample_match_law_matches_a_simulation():
    """Pearson of 4000 simulated sample-match runs against the exact trace law (level 1e-3, seeded); the
    chain rule's law, which accepts more, is rejected by the same runs (power: its E is > 0.1 higher)."""
    from specverify.reference.acceptance import SAMPLE_MATCH, TO_LENGTH
    target, draft = models()
    tr = Transform(temperature=0.7)
    traces = [t for _, t in simulate_sample_match(target, draft, (1, 2), 2, 4, tr, 4000, seed=5)]
    match = run_acceptance_law(target, draft, (1, 2), 2, 4, tr, TO_LENGTH, SAMPLE_MATCH)
    chain = run_acceptance_law(target, draft, (1, 2), 2, 4, tr, TO_LENGTH)
    assert chain.E - match.E > 0.1
    ok = stats.pearson(trace_counts(match, traces), match.probs, alpha=LEVEL)
    bad = stats.pearson(trace_counts(chain, traces), chain.probs, alpha=LEVEL)
    assert ok.p_value > LEVEL and bad.p_value < LEVEL, (ok.p_value, bad.p_value)


def test_argmax_drafts_are_accepted_with_p_of_the_argmax():
    """vLLM's greedy drafting: x = argmax q whatever the transform, q one-hot, so the chain rule accepts
    with p(x): p = (0.75, 0.25), q = (0.6, 0.4) -> 0.75 (a sampled q would give sum min(p, q) = 0.85)."""
    from specverify.reference.acceptance import PREFILL_FIXED, ArgmaxDraft
    target = FixedRows(np.array([[0.75, 0.25], [0.5, 0.5]]))
    draft = FixedRows(np.array([[0.6, 0.4], [0.5, 0.5]]))
    law = run_acceptance_law(target, ArgmaxDraft(draft), (), kappa=1, length=1, schedule=FIXED)
    assert dict(zip(law.traces, law.probs)) == pytest.approx({((1, 0),): 0.25, ((1, 1),): 0.75})
    assert run_acceptance_law(target, draft, (), kappa=1, length=1, schedule=FIXED).E == pytest.approx(1.85)
    assert [drafts_at(PREFILL_FIXED, 2, e, 4) for e in range(4)] == [0, 2, 2, 2]


def block_engine():
    """The reference engine verifying by block verification (`reference.block`, compiled)."""
    from specverify.reference import fast
    return SpecEngine(verify=lambda batch, coins: fast.verify_batch(batch, coins, rule="block"))


def test_the_block_law_matches_the_reference_block_engine_and_the_chain_law_does_not():
    """Block verification's trace law against the reference engine verifying by blocks (both
    directions: the chain rule's law, which accepts less, fails the same counts)."""
    target, draft = models()
    block = run_acceptance_law(target, draft, (1,), kappa=2, length=4, transform=Transform(), schedule=FIXED,
                               verify_rule="block")
    chain = run_acceptance_law(target, draft, (1,), kappa=2, length=4, transform=Transform(), schedule=FIXED)
    assert block.E > chain.E + 0.01, (block.E, chain.E)          # it accepts more, and the output is the same
    _, info = block_engine().generate(target, draft, (1,), 2, Transform(), 6, RUNS, 4)
    assert stats.pearson(trace_counts(block, info["verify_counts"]), block.probs).p_value > LEVEL
    assert total_test(block, info["num_accepted"], RUNS, LEVEL).p_value > LEVEL
    wrong = total_test(chain, info["num_accepted"], RUNS, LEVEL)
    assert wrong.p_value < LEVEL and wrong.direction == "above", wrong


def test_block_and_chain_agree_on_one_draft():
    """With kappa = 1 block verification is the chain rule (h_1 = w_1 = min(1, p/q))."""
    target, draft = models()
    one = [run_acceptance_law(target, draft, (1,), kappa=1, length=3, transform=Transform(temperature=0.7),
                              schedule=FIXED, verify_rule=rule) for rule in ("chain", "block")]
    assert one[0].traces == one[1].traces and np.allclose(one[0].probs, one[1].probs, rtol=0, atol=1e-12)


def test_with_argmax_drafts_block_verification_has_the_chain_rules_acceptance_law():
    """q one-hot (vLLM's default greedy drafting): block verification's weights are products of p along
    the drafts and its residuals those of the chain rule, so the two trace laws are one law -- a `block`
    declaration with argmax drafts is checked against exactly the chain rule's law."""
    from specverify.reference.acceptance import PREFILL_FIXED, ArgmaxDraft
    target, draft = models()
    laws_ = [run_acceptance_law(target, ArgmaxDraft(draft), (1,), kappa=3, length=5,
                                transform=Transform(temperature=0.7), schedule=PREFILL_FIXED, verify_rule=rule)
             for rule in ("chain", "block")]
    assert laws_[0].traces == laws_[1].traces and np.allclose(laws_[0].probs, laws_[1].probs, rtol=0, atol=1e-12)
    sampled = [run_acceptance_law(target, draft, (1,), kappa=3, length=5, transform=Transform(temperature=0.7),
                                  schedule=PREFILL_FIXED, verify_rule=rule) for rule in ("chain", "block")]
    assert sampled[1].E > sampled[0].E                                  # sampled drafts: block accepts more
