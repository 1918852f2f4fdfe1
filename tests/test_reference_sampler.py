"""The sampling side of the reference: the per-request rules, the compiled sampler that must equal
them bit for bit under the same coins, agreement with the exact laws, endpoint coins, bad input."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specverify import stats
from specverify.errors import InputError
from specverify.reference import block, chain, fast, laws, sampling
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.toy import FixedRows
from specverify.reference.tree import DraftTree, tree_verify

ENDPOINTS = [0.0, 5e-324, 1 - 2**-53, 1 - 2**-24, 1.0]


def random_batch(rng, vocab=6, n=200, deterministic=False, p_zero=0.3):
    reqs = []
    for _ in range(n):
        k = int(rng.integers(0, 5))
        p = rng.dirichlet(np.full(vocab, 0.5), size=k + 1)
        p[rng.random(p.shape) < p_zero] = 0.0
        p[np.arange(k + 1), rng.integers(0, vocab, k + 1)] += 0.1
        p /= p.sum(axis=1, keepdims=True)
        q = rng.dirichlet(np.full(vocab, 0.5), size=k)
        drafts = np.array([rng.choice(vocab, p=q[i]) for i in range(k)], np.int64)
        if k and rng.random() < 0.2:
            drafts[int(rng.integers(0, k)):] = -1     # padded tail
        reqs.append((drafts, p, None if deterministic else q, bool(rng.random() < 0.2)))
    return VerifyBatch.from_requests(reqs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.booleans(), st.sampled_from(["random", "zeros", "ones", "endpoints"]))
def test_compiled_sampler_equals_reference_bit_for_bit(seed, deterministic, coin_kind):
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n=60, deterministic=deterministic)
    coins = Coins.random(batch, rng)
    if coin_kind == "zeros":
        coins = Coins(np.zeros_like(coins.accept), np.zeros_like(coins.final))
    elif coin_kind == "ones":
        coins = Coins(np.ones_like(coins.accept), np.ones_like(coins.final))
    elif coin_kind == "endpoints":
        coins = Coins(rng.choice(ENDPOINTS, coins.accept.size), rng.choice(ENDPOINTS, coins.final.size))
    for rule, per_request in [("chain", None), ("block", block.block_rule)]:
        expected = chain.verify_batch(batch, coins, rule=per_request)
        np.testing.assert_array_equal(fast.verify_batch(batch, coins, rule=rule), expected)


@pytest.mark.parametrize("deterministic", [False, True])
def test_one_step_sampler_is_the_per_request_rule_under_the_same_coins(deterministic):
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(5), size=4)
    p[:, 2] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    q = rng.dirichlet(np.ones(5), size=3)
    n, seed = 3000, 99
    out = fast.sample_one_step(p, q, n=n, seed=seed, deterministic=deterministic)
    # the documented coin order of one chunk: draft coins [n, k], accept coins [n, k], final [n]
    g = np.random.default_rng(seed)
    draft_coins, acc, final = g.random((n, 3)), g.random((n, 3)), g.random(n)
    cdf = np.cumsum(q, axis=1)
    for s in range(n):
        if deterministic:
            drafts = np.argmax(q, axis=1)
        else:
            drafts = [min(int(np.count_nonzero(cdf[i] <= draft_coins[s, i] * cdf[i, -1])), np.flatnonzero(q[i] > 0)[-1])
                      for i in range(3)]
        tokens = chain.chain_verify(drafts, p, None if deterministic else q, acc[s], final[s])
        assert out[s, :tokens.size].tolist() == tokens.tolist() and (out[s, tokens.size:] == -1).all()


@pytest.mark.parametrize("rule,deterministic", [("chain", False), ("chain", True), ("block", False), ("greedy", False)])
def test_one_step_sampler_agrees_with_the_exact_law(rule, deterministic):
    # joint chi-squared of 200k samples against the exact one-step law, alpha = 1e-3
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(4, 0.7), size=4)
    q = rng.dirichlet(np.full(4, 0.7), size=3)
    target, draft = FixedRows(p), FixedRows(np.vstack([q, q[-1:]]))
    if rule == "block":
        exact = laws.block_chunk_law(target, draft, (), 3, deterministic)
    else:
        exact = laws.chunk_law(laws.GREEDY if rule == "greedy" else laws.EXACT, target, draft, (), 3, deterministic)
    law = laws.SequenceLaw.from_dict(exact, 4)
    out = fast.sample_one_step(p, q, n=200_000, seed=5,
                               rule="greedy" if rule == "greedy" else rule, deterministic=deterministic)
    counts = stats.observed_counts(laws.encode(out, 4), law.codes())
    assert stats.pearson(counts, law.probs).p_value > 1e-3


def test_a_lossy_rule_is_visibly_off_the_exact_law():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(4, 0.7), size=4)
    q = rng.dirichlet(np.full(4, 0.7), size=3)
    law = laws.SequenceLaw.from_dict(laws.chunk_law(laws.EXACT, FixedRows(p), FixedRows(np.vstack([q, q[-1:]])), (), 3), 4)
    out = fast.sample_one_step(p, q, n=200_000, seed=5, rule="threshold", params=(1.0, 0.9))
    counts = stats.observed_counts(laws.encode(out, 4), law.codes())
    assert stats.pearson(counts, law.probs).p_value < 1e-6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16), st.sampled_from(ENDPOINTS + [0.5, 0.999999]))
def test_draw_never_returns_a_zero_weight_token(weights, coin):
    w = np.array(weights)
    if not (w > 0).any():
        w[0] = 1.0
    token = sampling.draw(w, coin)
    assert 0 <= token < w.size and w[token] > 0


def test_draw_is_the_inverse_cdf():
    w = np.array([0.0, 0.25, 0.0, 0.5, 0.25])
    assert [sampling.draw(w, c) for c in (0.0, 0.2499, 0.25, 0.74, 0.75, 0.99, 1.0)] == [1, 1, 3, 3, 4, 4, 4]


def test_coin_zero_never_accepts_a_zero_probability_draft():
    p = np.array([[0.0, 1.0], [0.5, 0.5]])
    for q in (None, np.array([[0.9, 0.1]])):
        assert chain.chain_verify([0], p, q, [0.0], 0.0).tolist()[0] == 1


def test_padded_drafts_are_rejected_and_emit_from_the_target_row():
    p = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert chain.chain_verify([-1], p, None, [0.0], 0.5).tolist() == [2]


def test_greedy_uses_the_lowest_index_on_ties():
    p = np.array([[0.4, 0.4, 0.2], [0.1, 0.45, 0.45]])
    assert chain.chain_verify([1], p, greedy=True).tolist() == [0]
    assert chain.chain_verify([0], p, greedy=True).tolist() == [0, 1]


def test_tree_rule_accepts_down_a_path_and_recovers():
    tree = DraftTree([1, 2, 0], [-1, -1, 0])           # root children: 1, 2; node 0 has child 0
    target = np.array([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0]])
    emitted, path = tree_verify(tree, target, None, [0.1, 0.9, 0.5], 0.5)
    assert emitted.tolist() == [1, 0, 2] and path.tolist() == [0, 2]
    emitted, path = tree_verify(tree, target, None, [0.9, 0.9, 0.5], 0.0)   # both siblings refused
    assert emitted.tolist() == [0] and path.tolist() == []


@pytest.mark.parametrize("call,message", [
    (lambda: chain.chain_verify([0], [[np.nan, 1.0], [0.5, 0.5]], None, [0.1], 0.1), "non-finite"),
    (lambda: chain.chain_verify([0], [[-0.1, 1.1], [0.5, 0.5]], None, [0.1], 0.1), "negative"),
    (lambda: chain.chain_verify([0], [[0.2, 0.7], [0.5, 0.5]], None, [0.1], 0.1), "sums to"),
    (lambda: chain.chain_verify([0], [[0.5, 0.5], [0.5, 0.5]], [[0.3, 0.3, 0.4]], [0.1], 0.1), "vocab size"),
    (lambda: chain.chain_verify([1], [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0]], [0.1], 0.1), "draft probability is 0"),
    (lambda: chain.chain_verify([5], [[0.5, 0.5], [0.5, 0.5]], None, [0.1], 0.1), "outside"),
    (lambda: chain.chain_verify([0], [[0.5, 0.5], [0.5, 0.5]], None, [1.5], 0.1), "outside [0, 1]"),
    (lambda: chain.chain_verify([0, 1], [[0.5, 0.5], [0.5, 0.5]], None, [0.1], 0.1), "target rows"),
    (lambda: VerifyBatch([1], [1], [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0]]), "draft probability is 0"),
    (lambda: VerifyBatch([0], [2], [[0.5, 0.5]] * 3), "expected 2 ids"),
])
def test_bad_input_is_a_one_line_input_error(call, message):
    with pytest.raises(InputError, match=re.escape(message)) as info:
        call()
    assert "\n" not in str(info.value)
