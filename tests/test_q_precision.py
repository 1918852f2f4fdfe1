"""`chain.q_precision[...]` (the endpoints check): acceptance equals min(1, p/q) for the q given at
q(x) in 1e-9 .. 1e-6 (p >> q included) and for bf16-rounded q, exactly (fixed coins a relative 1e-3 /
1e-5 from the threshold). The exact samplers pass (the reference, our engine's, the CPU kernels'); a
sampler that floors q, adds an epsilon, computes in float16 or rounds to bf16 fails."""

from __future__ import annotations

import numpy as np
import pytest

from specverify.adapters.kernels import KernelsEngine
from specverify.adapters.reference import ReferenceEngine
from specverify.adapters.specverify_engine import SpecverifyEngine
from specverify.audit import Context
from specverify.checks.endpoints import bf16, q_precision_batch, q_precision_rows
from specverify.reference.batch import VerifyBatch


def _cast(x, how):
    if how == "float16":          # flushed to 0 below 6e-8; p/0 read as +inf (the reference refuses q = 0)
        return np.maximum(np.asarray(x, np.float16).astype(np.float64), 5e-324)
    if how == "bf16":
        return bf16(x)
    if how == "floor":
        return np.maximum(x, 1e-7)
    if how == "epsilon":
        return x + 1e-10
    return x


class Imprecise(ReferenceEngine):
    """The reference verifying with the draft token's p and q (column 0 of these rows) altered as a
    low-precision or 'safe-division' sampler would: floored, plus epsilon, in float16, in bf16."""

    capabilities = {"chain"}

    def __init__(self, how, both=False):
        super().__init__()
        self.how, self.both = how, both

    def verify(self, batch, coins):
        p, q = batch.target_probs.copy(), batch.draft_probs.copy()
        for rows, alter in ((q, True), (p, self.both)):
            if alter:                         # the change of column 0 taken from column 1: rows still sum to 1
                new = _cast(rows[:, 0], self.how)
                rows[:, 1] -= new - rows[:, 0]
                rows[:, 0] = new
        altered = VerifyBatch(batch.draft_token_ids, batch.num_draft_tokens, p, q, batch.greedy)
        return super().verify(altered, coins)


def verdicts(engine):
    return {r.name: r for r in q_precision_rows(engine, Context())}


def test_bf16_rounding_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([1.2345e-9, 3.14159e-8, 0.3, 1.0, 9.87654e-7, 2.0**-130])
    assert bf16(x).tolist() == torch.tensor(x).to(torch.bfloat16).double().numpy().tolist()


def test_the_batches_decide_both_ways():
    for kind in ("tiny q", "bf16 q"):
        _, _, want = q_precision_batch(kind)
        assert want.any() and not want.all()


@pytest.mark.parametrize("engine", [ReferenceEngine, SpecverifyEngine, KernelsEngine])
def test_exact_samplers_pass(engine):
    rows = verdicts(engine())
    assert set(rows) == {"chain.q_precision[tiny q]", "chain.q_precision[bf16 q]"}
    assert all(r.verdict == "pass" and r.n > 0 for r in rows.values()), [r.detail for r in rows.values()]


@pytest.mark.parametrize("how,both,failing", [
    ("floor", False, {"tiny q", "bf16 q"}),       # max(q, 1e-7): p/q wrong for q < 1e-7
    ("epsilon", False, {"tiny q", "bf16 q"}),     # q + 1e-10: 10% at q = 1e-9
    ("float16", True, {"tiny q", "bf16 q"}),      # q below 6e-8 flushed to 0
    ("bf16", True, {"tiny q", "bf16 q"}),         # p rounded like q: p/q = 1 on the bf16 row
])
def test_imprecise_samplers_fail(how, both, failing):
    rows = verdicts(Imprecise(how, both))
    failed = {name[len("chain.q_precision["):-1] for name, r in rows.items() if r.verdict == "fail"}
    assert failed == failing, {n: r.detail for n, r in rows.items()}
    assert all("min(1, p/q)" in rows[f"chain.q_precision[{k}]"].detail for k in failing)
