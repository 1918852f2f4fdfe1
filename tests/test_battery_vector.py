"""The vectorised exact sampler (reference.vector), the batched tree layout and the toy engine: bit for
bit the reference rules, and the toy engine's runs have the exact law."""

import numpy as np
import pytest

from specverify import stats
from specverify.reference.toy_engine import SpecEngine
from specverify.reference.tree_batch import TreeBatch, TreeCoins, shape_of
from specverify.reference.vector import Streams, VectorSampler
from specverify.errors import InputError
from specverify.reference import chain, fast, laws
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.toy import ToyModel
from specverify.reference.transforms import Transform
from specverify.reference.tree import tree_verify

ENDPOINTS = [0.0, 5e-324, 1 - 2**-53, 1 - 2**-24, 1.0]


def random_batch(rng, n=60, vocab=5, stochastic=True):
    reqs = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        p = rng.dirichlet(np.full(vocab, 0.5), k + 1)
        p[rng.random(p.shape) < 0.3] = 0.0
        p[:, 0] += 1e-3
        p /= p.sum(axis=1, keepdims=True)
        q = rng.dirichlet(np.full(vocab, 0.5), k) if stochastic else None
        ids = np.array([rng.choice(vocab, p=r) for r in q], np.int64) if stochastic else rng.integers(0, vocab, k)
        if k and rng.random() < 0.3:
            ids[rng.integers(0, k)] = -1
        reqs.append((ids, p, q, bool(rng.random() < 0.2)))
    return VerifyBatch.from_requests(reqs)


@pytest.mark.parametrize("stochastic", [True, False])
def test_vector_chain_and_greedy_equal_the_reference_token_for_token(stochastic):
    rng = np.random.default_rng(0 if stochastic else 1)
    sampler = VectorSampler()
    for it in range(60):
        batch = random_batch(rng, stochastic=stochastic)
        coins = Coins.random(batch, rng)
        if it % 3 == 0:   # endpoint coins everywhere
            coins = Coins(rng.choice(ENDPOINTS, coins.accept.size), rng.choice(ENDPOINTS, coins.final.size))
        want = chain.verify_batch(batch, coins)
        assert (sampler.verify(batch, coins) == want).all()
        assert (fast.verify_batch(batch, coins) == want).all()


@pytest.mark.parametrize("branching", [(2, 2), (3, 1), (1, 1, 1), (2,)])
@pytest.mark.parametrize("deterministic", [True, False])
def test_vector_trees_equal_the_reference_tree_rule(branching, deterministic):
    rng = np.random.default_rng(len(branching) * 10 + deterministic)
    vocab, m = 5, 40
    parents = shape_of(branching)
    target = rng.dirichlet(np.full(vocab, 0.6), (m, parents.size + 1))
    draft = rng.dirichlet(np.full(vocab, 0.6), (m, parents.size + 1))
    rows = parents + 1
    if deterministic:
        tokens = rng.integers(0, vocab, (m, parents.size))
    else:
        tokens = np.array([[rng.choice(vocab, p=draft[b, rows[k]]) for k in range(parents.size)] for b in range(m)])
    batch = TreeBatch(parents, tokens, target, None if deterministic else draft)
    for coins in (TreeCoins.random(batch, rng),
                  TreeCoins(rng.choice(ENDPOINTS, tokens.shape), rng.choice(ENDPOINTS, m))):
        out = VectorSampler().verify_trees(batch, coins)
        for b in range(m):
            tree, t, d = batch.request(b)
            want, _ = tree_verify(tree, t, d, coins.accept[b], coins.final[b])
            assert out[b][out[b] >= 0].tolist() == want.tolist()


def test_tree_batch_validates_its_layout():
    parents = shape_of((2,))
    ok = np.full((1, 3, 3), 1 / 3)
    with pytest.raises(InputError, match="parents must precede"):
        TreeBatch(np.array([1, -1]), np.zeros((1, 2), int), ok)
    with pytest.raises(InputError, match="tokens"):
        TreeBatch(parents, np.zeros((1, 3), int), ok)
    draft = ok.copy()
    draft[0, 0] = [1.0, 0.0, 0.0]
    with pytest.raises(InputError, match="draft probability 0"):
        TreeBatch(parents, np.array([[0, 1]]), ok, draft)


def test_seeded_streams_continue_per_seed_and_ignore_neighbours():
    a, b = Streams(), Streams()
    first = a.take(np.array([5, 7]), np.array([2, 3]))
    again = a.take(np.array([5]), np.array([2]))
    alone = b.take(np.array([5]), np.array([4]))
    assert np.array_equal(np.concatenate([first[:2], again]), alone)      # seed 5's stream, continued
    assert ((first >= 0) & (first < 1)).all()
    # two requests with one seed in one call read consecutive slices of it
    c = Streams().take(np.array([9, 9]), np.array([1, 2]))
    assert np.array_equal(c, Streams().take(np.array([9]), np.array([3])))


def test_seeded_coins_skip_greedy_requests_and_use_k_plus_one_values():
    rng = np.random.default_rng(3)
    batch = random_batch(rng, n=30)
    sampler = VectorSampler()
    seeds = np.arange(100, 130)
    sampler.seeded_coins(batch, seeds)
    used = {s: sampler.streams.position.get(int(s), 0) for s in seeds}
    for b, s in enumerate(seeds):
        want = 0 if batch.greedy[b] else batch.num_draft_tokens[b] + 1
        assert used[s] == want


@pytest.mark.parametrize("transform", [Transform(), Transform(0.6), Transform(top_k=2), Transform(top_p=0.8)])
def test_toy_engine_runs_have_the_exact_law(transform):
    # false alarm 1e-4 per transform (fixed seeds); the engine is exact, so this may fail only by chance
    target = ToyModel(4, 11, scale=0.7, zero_frac=0.2)
    tokens, info = SpecEngine().generate(target, target.draft(12), (1,), 2, transform, 5, 60_000, 4)
    law = laws.target_law(laws.Transformed(target, transform), (1,), 4)
    counts = stats.observed_counts(laws.encode(tokens, 4), law.codes())
    assert stats.pearson(counts, law.probs, min_expected=10).p_value > 1e-4
    assert 0 < info["num_accepted"] < info["num_drafted"]


def test_toy_engine_greedy_runs_follow_the_argmax_path_and_identity_draft_accepts_everything():
    target = ToyModel(4, 11, scale=0.7)
    tokens, _ = SpecEngine().generate(target, target.draft(12), (1,), 2, Transform(0.0), 0, 10, 5)
    path = []
    for _ in range(5):
        path.append(int(np.argmax(target.probs((1,) + tuple(path)))))
    assert (tokens == np.array(path)).all()
    _, info = SpecEngine().generate(target, target, (1,), 3, Transform(0.7, top_k=3), 1, 500, 9)
    assert info["num_accepted"] == info["num_drafted"] > 0
