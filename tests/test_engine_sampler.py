"""The engine's rejection sampler against the float64 reference, bit for bit (same tokens from the
same rows and coins), and its transforms against reference.transforms."""

import numpy as np
import pytest
import torch

from specverify.engine import sampler
from specverify.reference import transforms
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.chain import verify_batch


def _rows(rng, n, V, zero_frac=0.3):
    p = rng.dirichlet(np.full(V, 0.5), size=n)
    p[rng.random((n, V)) < zero_frac] = 0.0
    p[np.arange(n), rng.integers(0, V, n)] += 0.1
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("with_q", [False, True])
def test_chain_matches_reference_bitwise(with_q):
    rng = np.random.default_rng(7)
    V, mismatches = 11, 0
    for trial in range(300):
        ks = rng.integers(0, 5, size=4)
        reqs = []
        for k in ks:
            p = _rows(rng, k + 1, V)
            if with_q:
                q = _rows(rng, k, V) if k else np.zeros((0, V))
                x = [int(rng.choice(V, p=q[i])) for i in range(k)]
            else:
                q = None
                x = rng.integers(0, V, k).tolist()
            reqs.append((x, p, q if with_q else None, False))
        batch = VerifyBatch.from_requests(reqs)
        coins = Coins.random(batch, rng)
        # inject endpoint coins now and then
        if trial % 10 == 0 and coins.accept.size:
            coins.accept[0] = 0.0
            coins.final[0] = np.nextafter(1.0, 0.0)
        want = verify_batch(batch, coins)
        s = 0
        for b, (x, p, q, _) in enumerate(reqs):
            k = len(x)
            got, m = sampler.chain_verify(p, x, q, coins.accept[s:s + k], float(coins.final[b]))
            s += k
            row = want[b][want[b] >= 0].tolist()
            mismatches += got != row
            assert m == len(got) - 1 and got[:m] == x[:m]
    assert mismatches == 0


def test_greedy_lowest_index_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0], [0.0, 0.0, 0.0], [2.0, 1.0, 2.0]])
    assert sampler.greedy_verify(logits, [1, 0]) == ([1, 0, 0], 2)
    assert sampler.greedy_verify(logits, [2]) == ([1], 0)


@pytest.mark.parametrize("t", [transforms.Transform(1.0), transforms.Transform(0.7), transforms.Transform(1.3, top_k=5),
                               transforms.Transform(1.0, top_p=0.8), transforms.Transform(0.5, top_k=7, top_p=0.6)])
def test_transforms_match_reference(t):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, 40)) * 3
    logits[0, :5] = 2.0                       # ties at the top-k boundary
    logits[1, 3] = -np.inf
    got = sampler.transform_probs(logits, t.temperature, t.top_k, t.top_p)
    want = transforms.apply(logits, t)
    assert np.array_equal(got, want)


def test_draw_never_returns_zero_weight():
    w = np.array([0.0, 0.3, 0.0, 0.7, 0.0])
    for coin in [0.0, 0.3, 0.2999999999, np.nextafter(1.0, 0), 1.0]:
        assert w[sampler.draw(w, coin)] > 0
