"""The sampler kernels (Triton, float64, under TRITON_INTERPRET=1) emit exactly the reference's
tokens under the same coins: greedy, random chain (random and one-hot drafts, -1 padding, requests
without drafts), recovered and bonus draws, tree verify; endpoint coins injected (0.0, 5e-324,
1 - 2^-53, 1 - 2^-24, 1.0); no out-of-range or zero-probability token at any coin.

Vocabularies are small (the interpreter runs the sequential draws element by element); one test
uses V = 1500 to cross the greedy kernel's 1024-wide chunks.
"""

import numpy as np
import pytest

from specverify.errors import InputError
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.chain import verify_batch
from specverify.reference.tree import DraftTree
from specverify.reference.tree import tree_verify as ref_tree_verify

pytest.importorskip("triton")
sampler = pytest.importorskip("specverify.kernels.sampler")

ENDPOINTS = [0.0, 5e-324, 1 - 2 ** -53, 1 - 2 ** -24, 1.0]


def _rows(rng, n, v, zeros=2, alpha=0.5):
    """n probability rows over v tokens with `zeros` exact zeros each (float64, sums ~1)."""
    p = rng.dirichlet(np.full(v, alpha), size=n)
    for r in range(n):
        p[r, rng.choice(v, zeros, replace=False)] = 0.0
    return p / p.sum(1, keepdims=True)


def _batch(rng, v=10, ks=(2, 0, 3, 1, 4), with_q=True, greedy=None, pad=False, near=0.0):
    """A ragged batch; drafts drawn from q (or from p's support for one-hot drafts); `near` mixes
    q towards p so that acceptances are common."""
    reqs = []
    for b, k in enumerate(ks):
        p = _rows(rng, k + 1, v)
        q = (1 - near) * _rows(rng, k, v) + near * p[:k] if k else np.zeros((0, v))
        q = q / q.sum(1, keepdims=True) if k else q
        src = q if with_q else p[:k]
        d = [int(rng.choice(v, p=src[i])) for i in range(k)]
        if pad and k >= 2 and b % 2 == 0:
            d[-1] = -1
        g = bool(greedy[b]) if greedy is not None else False
        reqs.append((d, p, q if with_q else None, g))
    return VerifyBatch.from_requests(reqs)


def _check(batch, coins):
    got = sampler.verify(batch, coins)
    want = verify_batch(batch, coins)
    assert got.dtype == np.int64 and got.shape == want.shape
    assert np.array_equal(got, want), f"\nkernel {got.tolist()}\nref    {want.tolist()}"
    v = batch.vocab_size
    assert ((got == -1) | ((got >= 0) & (got < v))).all()
    return got


# ---------------------------------------------------------------- chain and greedy, random coins
@pytest.mark.parametrize("seed", range(4))
def test_random_chain_with_draft_rows_matches_reference(seed):
    rng = np.random.default_rng(seed)
    b = _batch(rng, near=0.7)
    for _ in range(3):
        _check(b, Coins.random(b, rng))


@pytest.mark.parametrize("seed", range(3))
def test_one_hot_drafts_padding_and_greedy_mix_match_reference(seed):
    rng = np.random.default_rng(100 + seed)
    b = _batch(rng, with_q=False, pad=True, greedy=[0, 1, 0, 1, 0], ks=(3, 2, 0, 1, 4))
    for _ in range(2):
        _check(b, Coins.random(b, rng))


def test_all_greedy_needs_no_coins_and_matches_reference():
    rng = np.random.default_rng(7)
    b = _batch(rng, greedy=[1] * 5)
    got = _check(b, None)
    assert (got[:, 0] >= 0).all()


def test_greedy_picks_the_lowest_index_among_ties_across_chunks():
    v = 1500                                               # two 1024-wide chunks
    p = np.full((3, v), 0.5 / (v - 3))
    p[:, [100, 1200, 1300]] = 0.5 / 3                      # a three-way tie across the chunks
    p /= p.sum(1, keepdims=True)
    p[1] = p[0][::-1]                                      # ties at 1399, 299, 199 -> 199
    b = VerifyBatch.from_requests([([100, 199], p, None, True)])
    got = _check(b, None)
    assert got.tolist() == [[100, 199, 100]]


def test_non_greedy_batch_without_coins_is_refused():
    rng = np.random.default_rng(8)
    b = _batch(rng)
    with pytest.raises(InputError):
        sampler.verify(b, None)


# ---------------------------------------------------------------- endpoint coins
@pytest.mark.parametrize("coin", ENDPOINTS)
@pytest.mark.parametrize("with_q", [True, False])
def test_endpoint_coins_match_reference_and_never_emit_zero_probability_tokens(coin, with_q):
    rng = np.random.default_rng(11)
    b = _batch(rng, with_q=with_q, pad=True, near=0.5, ks=(3, 0, 2, 1))
    coins = Coins(accept=np.full(int(b.num_draft_tokens.sum()), coin), final=np.full(b.batch_size, coin))
    got = _check(b, coins)
    # an emitted token never has target probability 0 unless it is an accepted draft with p > 0
    for r in range(b.batch_size):
        drafts, target, _, _ = b.request(r)
        for i, tok in enumerate(got[r][got[r] >= 0]):
            assert target[i, tok] > 0, (r, i, tok)


def test_coin_zero_rejects_a_drafted_token_with_zero_target_probability():
    p = np.array([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])
    q = np.array([[1.0, 0.0, 0.0]])
    b = VerifyBatch.from_requests([([0], p, q, False)])
    got = _check(b, Coins(accept=np.array([0.0]), final=np.array([0.0])))
    assert got[0, 0] != 0                                  # strict: 0 * 1 < 0 is false


def test_coin_one_walks_to_the_last_positive_token_not_past_the_end():
    p = np.array([[0.25, 0.75, 0.0, 0.0]])
    b = VerifyBatch.from_requests([([], p, None, False)])
    got = _check(b, Coins(accept=np.zeros(0), final=np.array([1.0])))
    assert got.tolist() == [[1]]


def test_residual_fallback_when_p_equals_q():
    p = np.array([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
    b = VerifyBatch.from_requests([([2], p, p[:1].copy(), False)])
    for coin in ENDPOINTS:                                 # coin 1.0 rejects: residual is all zero
        _check(b, Coins(accept=np.array([coin]), final=np.array([0.5])))


def test_cdf_boundary_coins_match_reference():
    """Coins that put t = coin * Z exactly on a partial sum of the CDF (where `<=` vs `<` and the
    summation order decide the token)."""
    p = np.array([[0.125, 0.25, 0.125, 0.5], [0.5, 0.25, 0.0, 0.25]])
    b = VerifyBatch.from_requests([([], p[:1], None, False), ([], p[1:], None, False)])
    for coin in (0.125, 0.375, 0.5, 0.5 - 2 ** -54, 0.5 + 2 ** -53, 0.75):
        _check(b, Coins(accept=np.zeros(0), final=np.array([coin, coin])))


# ---------------------------------------------------------------- tree verify
def _tree_case(rng, v, with_q):
    parents = np.array([-1, -1, -1, 0, 0, 1, 3, 3])
    n = parents.size
    p = _rows(rng, n + 1, v, zeros=1, alpha=2.0)
    q = 0.5 * p + 0.5 * _rows(rng, n + 1, v, zeros=0, alpha=2.0) if with_q else None
    tokens = np.zeros(n, np.int64)
    for c in range(n):
        row = 0 if parents[c] < 0 else parents[c] + 1
        src = q[row] if with_q else p[row]
        tokens[c] = rng.choice(v, p=src / src.sum())
    return DraftTree(tokens, parents), p, q


@pytest.mark.parametrize("with_q", [True, False])
def test_tree_verify_matches_reference(with_q):
    rng = np.random.default_rng(21 if with_q else 22)
    accepted_any = False
    for _ in range(6):
        tree, p, q = _tree_case(rng, 8, with_q)
        coins, final = rng.random(tree.size), float(rng.random())
        got = sampler.tree_verify(tree, p, q, coins, final)
        want = ref_tree_verify(tree, p, q, coins, final)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (got, want)
        accepted_any |= got[1].size > 0
    assert accepted_any, "no draft accepted: the descent was not exercised"


@pytest.mark.parametrize("coin", ENDPOINTS)
def test_tree_verify_endpoint_coins(coin):
    rng = np.random.default_rng(23)
    tree, p, q = _tree_case(rng, 6, True)
    for qq in (q, None):
        got = sampler.tree_verify(tree, p, qq, np.full(tree.size, coin), coin)
        want = ref_tree_verify(tree, p, qq, np.full(tree.size, coin), coin)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert ((got[0] >= 0) & (got[0] < 6)).all()


def test_tree_verify_validates_like_the_reference():
    tree = DraftTree([1, 2], [-1, -1])
    p = np.full((3, 4), 0.25)
    q = np.array([[0.5, 0.0, 0.5, 0.0]] * 3)               # node 0's token 1 has q = 0
    with pytest.raises(InputError):
        sampler.tree_verify(tree, p, q, [0.5, 0.5], 0.5)
    with pytest.raises(InputError):
        sampler.tree_verify(tree, p, None, None, 0.5)


def test_a_larger_vocabulary_matches_reference():
    rng = np.random.default_rng(31)
    b = _batch(rng, v=200, ks=(2, 1), near=0.6)
    _check(b, Coins.random(b, rng))
