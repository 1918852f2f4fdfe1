"""Exactness of the reference rules, proved on their exact laws (no sampling).

For arbitrary p, q (zeros, one-hots, ties, V up to 64): the token each rule emits at a position,
given the position is reached, has exactly that position's target law; on toy models the joint law
of L emitted tokens equals prod_i p(x_i | x_<i); one-token acceptance is 1 - TV; block verification
accepts at least as much as token-wise verification; every lossy rule is biased where it should be.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specverify.reference import laws
from specverify.reference.lossy import ThresholdRule, TypicalRule
from specverify.reference.toy import FixedRows, ToyModel

TOL = 1e-12


@st.composite
def prob_row(draw, vocab):
    """A distribution with a mix of zeros, ties and one-hots."""
    kind = draw(st.sampled_from(["dense", "sparse", "onehot", "ties"]))
    if kind == "onehot":
        row = np.zeros(vocab)
        row[draw(st.integers(0, vocab - 1))] = 1.0
        return row
    weights = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=vocab, max_size=vocab)))
    if kind == "sparse":
        weights[draw(st.lists(st.integers(0, vocab - 1), max_size=vocab - 1))] = 0.0
    if kind == "ties":
        weights = np.round(weights * 2) / 2
    if not (weights > 0).any():
        weights[draw(st.integers(0, vocab - 1))] = 1.0
    return weights / weights.sum()


@st.composite
def problem(draw, max_vocab=8, max_kappa=3):
    vocab = draw(st.integers(2, max_vocab))
    kappa = draw(st.integers(1, max_kappa))
    p = np.array([draw(prob_row(vocab)) for _ in range(kappa + 1)])
    q = np.array([draw(prob_row(vocab)) for _ in range(kappa)])
    return p, q, draw(st.booleans())


def models(p, q):
    return FixedRows(p), FixedRows(np.vstack([q, q[-1:]]))


def marginals_equal_target(law_dict, p):
    law = laws.SequenceLaw.from_dict(law_dict, p.shape[1])
    assert abs(law.total() - 1.0) < TOL
    for pos in range(p.shape[0]):
        if law.reach(pos) > TOL:
            np.testing.assert_allclose(law.marginal(pos), p[pos], atol=1e-10)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problem())
def test_chain_emits_each_target_row_exactly(prob):
    p, q, det = prob
    target, draft = models(p, q)
    marginals_equal_target(laws.chunk_law(laws.EXACT, target, draft, (), p.shape[0] - 1, det), p)


@SETTINGS
@given(problem())
def test_block_emits_each_target_row_exactly(prob):
    p, q, det = prob
    target, draft = models(p, q)
    marginals_equal_target(laws.block_chunk_law(target, draft, (), p.shape[0] - 1, det), p)


@SETTINGS
@given(problem(max_kappa=2), st.lists(st.integers(1, 3), min_size=1, max_size=2))
def test_tree_emits_each_target_row_exactly(prob, branching):
    p, q, det = prob
    target, draft = models(p, q)
    marginals_equal_target(laws.tree_chunk_law(target, draft, (), tuple(branching), det), p)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem(max_vocab=64, max_kappa=1))
def test_chain_and_block_exact_up_to_vocab_64(prob):
    p, q, det = prob
    target, draft = models(p, q)
    marginals_equal_target(laws.chunk_law(laws.EXACT, target, draft, (), 1, det), p)
    marginals_equal_target(laws.block_chunk_law(target, draft, (), 1, det), p)


@SETTINGS
@given(problem(max_kappa=1))
def test_one_token_acceptance_is_one_minus_tv(prob):
    p, q, _ = prob
    target, draft = models(p, q)
    law = laws.SequenceLaw.from_dict(laws.chunk_law(laws.EXACT, target, draft, (), 1), p.shape[1])
    assert law.reach(1) == pytest.approx(1.0 - laws.tv_distance(p[0], q[0]), abs=TOL)
    assert laws.acceptance_rate(p[0], q[0]) == pytest.approx(1.0 - laws.tv_distance(p[0], q[0]), abs=TOL)


@SETTINGS
@given(problem())
def test_block_accepts_at_least_as_much_as_tokenwise(prob):
    p, q, det = prob
    target, draft = models(p, q)
    kappa = p.shape[0] - 1
    chain = laws.SequenceLaw.from_dict(laws.chunk_law(laws.EXACT, target, draft, (), kappa, det), p.shape[1])
    block = laws.SequenceLaw.from_dict(laws.block_chunk_law(target, draft, (), kappa, det), p.shape[1])
    assert block.mean_length() >= chain.mean_length() - TOL


def test_block_strictly_better_on_the_papers_example():
    # Sun et al. section 2: p = [1/3, 2/3], q = [2/3, 1/3], kappa = 2: accepted drafts 10/9 vs 11/9
    p = np.array([[1 / 3, 2 / 3]] * 3)
    q = np.array([[2 / 3, 1 / 3]] * 2)
    target, draft = models(p, q)
    chain = laws.SequenceLaw.from_dict(laws.chunk_law(laws.EXACT, target, draft, (), 2), 2)
    block = laws.SequenceLaw.from_dict(laws.block_chunk_law(target, draft, (), 2), 2)
    assert chain.mean_length() - 1 == pytest.approx(10 / 9, abs=TOL)
    assert block.mean_length() - 1 == pytest.approx(11 / 9, abs=TOL)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.integers(1, 3), st.integers(1, 4), st.integers(0, 10**6),
       st.sampled_from([0.0, 0.3]), st.booleans(), st.sampled_from(["chain", "block", "tree"]))
def test_toy_model_joint_law_is_the_autoregressive_law(vocab, kappa, length, seed, zero_frac, det, kind):
    target = ToyModel(vocab, seed, zero_frac=zero_frac)
    draft = target.draft(seed + 1, noise=1.0)
    step = laws.Stepper(kind, target, draft, kappa=kappa, deterministic=det, branching=(2,) * min(kappa, 2))
    joint = laws.joint_law(step, (), length)
    assert joint.tv(laws.target_law(target, (), length)) < 1e-12


@pytest.mark.parametrize("rule", [ThresholdRule(threshold_acc=0.9), ThresholdRule(threshold_acc=0.5),
                                  ThresholdRule(threshold_single=0.3), TypicalRule()])
def test_lossy_rules_are_biased_on_toy_models(rule):
    target = ToyModel(4, 11)
    draft = target.draft(12, noise=1.0)
    exact = laws.target_law(target, (), 3)
    biased = laws.joint_law(laws.Stepper("chain", target, draft, kappa=3, rule=rule), (), 3)
    assert biased.tv(exact) > 0.01


def test_threshold_rule_is_exact_at_its_defaults_and_when_draft_equals_target():
    target = ToyModel(4, 5)
    draft = target.draft(6)
    exact = laws.target_law(target, (), 3)
    assert laws.joint_law(laws.Stepper("chain", target, draft, rule=ThresholdRule()), (), 3).tv(exact) < 1e-12
    # with q == p every ratio is 1: an inflated threshold_acc cannot change anything
    same = laws.joint_law(laws.Stepper("chain", target, target, rule=ThresholdRule(threshold_acc=0.5)), (), 3)
    assert same.tv(exact) < 1e-12


def test_greedy_law_emits_only_argmax_tokens():
    target = ToyModel(5, 3)
    draft = target.draft(4, noise=2.0)
    law = laws.chunk_law(laws.GREEDY, target, draft, (), 3)
    for seq in law:
        for i, tok in enumerate(seq):
            assert tok == int(np.argmax(target.probs(seq[:i])))


def test_expected_length_matches_iid_formula_on_identical_rows():
    # i.i.d. acceptance: every position has the same p, q, so r_i = alpha^i and E = (1-a^(k+1))/(1-a)
    p = np.array([[0.5, 0.3, 0.2]] * 4)
    q = np.array([[0.2, 0.3, 0.5]] * 3)
    target, draft = models(p, q)
    stats = laws.acceptance_stats(laws.chunk_law(laws.EXACT, target, draft, (), 3), 3)
    alpha = laws.acceptance_rate(p[0], q[0])
    np.testing.assert_allclose(stats.r, alpha ** np.arange(1, 4), atol=TOL)
    assert stats.mean_length == pytest.approx(laws.expected_length_iid(alpha, 3), abs=TOL)


def test_encode_distinguishes_lengths_and_round_trips():
    rows = np.array([[0, -1, -1], [0, 0, -1], [2, 1, 0], [1, -1, -1]])
    codes = laws.encode(rows, 3)
    assert len(set(codes.tolist())) == 4
    for row, code in zip(rows, codes):
        assert laws.decode(code, 3) == tuple(int(t) for t in row if t >= 0)
