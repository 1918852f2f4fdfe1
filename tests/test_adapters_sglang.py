"""SGLang 0.5.23's Triton verify kernels through the adapters (skipped unless SGLang is importable:
README, "Audits of other engines"). Kernels run under the Triton interpreter: small batches only.

The chain and block kernels take the coins as arguments: under shared coins (float32-exact here) they
emit the reference's tokens, token for token. The greedy tree kernel equals the greedy tree walk.
The all-zero residual is pinned as the documented difference (token V - 1 emitted).
"""

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip("sglang not installed (PYTHONPATH=/tmp/sv-engines:/tmp/sv-deps after "
                "specverify/findings/install_engines.sh)", allow_module_level=True)

from specverify.adapters.registry import resolve  # noqa: E402
from specverify.adapters.sglang import coins32  # noqa: E402
from specverify.findings import probes  # noqa: E402
from specverify.reference import fast  # noqa: E402
from specverify.reference.batch import Coins, VerifyBatch  # noqa: E402


def batch_and_coins(seed, n=40, deterministic=False, greedy=False):
    rng = np.random.default_rng(seed)
    reqs = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        p, q = rng.dirichlet(np.ones(6), k + 1), rng.dirichlet(np.ones(6), k)
        p, q = p.astype(np.float32).astype(np.float64), q.astype(np.float32).astype(np.float64)
        p /= p.sum(1, keepdims=True)
        q /= q.sum(1, keepdims=True) if k else 1
        ids = np.array([int(np.argmax(r)) if deterministic else rng.choice(6, p=r) for r in q], np.int64)
        reqs.append((ids, p, None if deterministic else q, greedy))
    batch = VerifyBatch.from_requests(reqs)
    c = Coins.random(batch, rng)
    return batch, Coins(coins32(c.accept).astype(np.float64), coins32(c.final).astype(np.float64))


@pytest.mark.parametrize("deterministic", [False, True])
def test_chain_equals_reference(deterministic):
    batch, coins = batch_and_coins(1, deterministic=deterministic)
    got = resolve("sglang").verify(batch, coins)
    assert (got == fast.verify_batch(batch, coins, rule="chain")).all()


def test_block_equals_reference():
    batch, coins = batch_and_coins(2)
    got = resolve("sglang-block").verify_block(batch, coins)
    assert (got == fast.verify_batch(batch, coins, rule="block")).all()


def test_greedy_chain_and_trees():
    batch, coins = batch_and_coins(3, greedy=True)
    engine = resolve("sglang-tree-greedy")
    assert (engine.verify(batch, coins) == fast.verify_batch(batch, coins, rule="chain")).all()
    row, = probes.tree_greedy(engine, np.random.default_rng(0), b=150)
    assert row.verdict == "pass", row.detail


def test_all_zero_residual_emits_the_last_token():
    rows = probes.residual_zero(resolve("sglang"))
    assert all(r.verdict == "fail" for r in rows)
    assert rows[0].data["emitted"][0][0] == 3          # V - 1, target probability 0
