"""The transformers adapters against the reference (CI: needs `pip install -e '.[transformers]'`).

Sampler level: under shared coins `_speculative_sampling` emits the reference's tokens wherever the two
rules agree -- everywhere except on a coin's exact endpoint (transformers accepts when coin <= p/q, the
reference when coin * q < p) and within float32 rounding of a comparison, which fixed seeds avoid.
Engine level: tiny seeded Llamas; the identity draft (assistant = copy of the target) is accepted in
full at temperature 1 and not at 0.7 (the doubled transform, a documented transformers behaviour).
"""

import numpy as np
import pytest

transformers = pytest.importorskip("transformers", reason="transformers not installed: pip install -e '.[transformers]'")

from specverify.adapters.registry import resolve  # noqa: E402
from specverify.findings import probes  # noqa: E402
from specverify.reference.batch import Coins, VerifyBatch  # noqa: E402
from specverify.reference.chain import verify_batch  # noqa: E402


def random_batch(rng, n=300, vocab=6, deterministic=False, greedy_every=0):
    reqs = []
    for b in range(n):
        k = int(rng.integers(0, 4))
        p = rng.dirichlet(np.full(vocab, 0.8), k + 1)
        q = rng.dirichlet(np.full(vocab, 0.8), k)
        ids = np.array([rng.choice(vocab, p=row) for row in q], np.int64)
        reqs.append((ids, p, None if deterministic else q, bool(greedy_every and b % greedy_every == 0)))
    return VerifyBatch.from_requests(reqs)


@pytest.fixture(scope="module")
def sampler():
    return resolve("transformers")


def test_version_is_recorded(sampler):
    assert sampler.version.split(" ")[0] == transformers.__version__


@pytest.mark.parametrize("deterministic", [False, True])
def test_sampler_equals_reference_under_shared_coins(sampler, deterministic):
    rng = np.random.default_rng(11 if deterministic else 12)
    batch = random_batch(rng, deterministic=deterministic, greedy_every=5)
    coins = Coins.random(batch, rng)
    got, want = sampler.verify(batch, coins), verify_batch(batch, coins)
    assert got.shape == want.shape
    assert (got == want).all(), np.flatnonzero((got != want).any(axis=1))[:5]


def test_padded_draft_is_cut_and_drawn_from_p(sampler):
    p = np.array([[0.0, 0.5, 0.5, 0.0]] * 3)
    batch = VerifyBatch.from_requests([(np.array([1, -1]), p, None, False)])
    coins = Coins(np.array([0.1, 0.1]), np.array([0.7]))
    assert sampler.verify(batch, coins).tolist() == verify_batch(batch, coins).tolist() == [[1, 2, -1]]


def test_coin_zero_accepts_a_zero_probability_draft(sampler):
    """The documented difference: coin 0.0 and p(x) = 0 -- transformers accepts (<=), the reference not."""
    p = np.array([[0.0, 0.3, 0.2, 0.4, 0.1, 0.0]] * 2)
    q = np.array([[0.4, 0.1, 0.1, 0.1, 0.1, 0.2]])
    batch = VerifyBatch.from_requests([(np.array([0]), p, q, False)])
    coins = Coins(np.array([0.0]), np.array([0.5]))
    assert sampler.verify(batch, coins)[0, 0] == 0           # the draft of probability 0, accepted
    assert verify_batch(batch, coins)[0, 0] != 0


def test_all_zero_residual_raises_in_transformers(sampler):
    row, = probes.residual_zero_logits(sampler)
    assert row.verdict == "fail" and "RuntimeError" in row.data["error"]


def test_identity_draft_doubled_temperature():
    rows = probes.identity_draft(n=15, temperatures=(0.4, 1.0))
    by_t = {r.data["temperature"]: r for r in rows}
    assert by_t[1.0].verdict == "pass" and by_t[1.0].data["drafted"] > 0
    assert by_t[0.4].verdict == "fail"          # the assistant sees T = 0.4 twice: some drafts rejected (seeded)
    assert by_t[0.4].data["accepted"] < by_t[0.4].data["drafted"]


def test_assisted_generation_law_matches_prod_p():
    """Chi-squared of 200 assisted runs (L = 2, V = 4) against the exact law; false alarm 1e-3 (seeded)."""
    row, = probes.assisted_law(n=200, vocab=4, length=2)
    assert row.p_value > 1e-3, row.detail
    assert row.data["drafted"] > 0


def test_exact_law_sums_to_one_and_matches_the_model():
    import torch
    from specverify.findings import hf_assisted as hf
    model = hf.tiny_llama(3, vocab=4)
    seqs, probs = hf.exact_law(model, (1, 2), 2, 1.0)
    assert len(seqs) == 16 and abs(probs.sum() - 1) < 1e-12
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([[1, 2]])).logits[0, -1].double(), -1).numpy()
    marg = np.array([probs[[i for i, s in enumerate(seqs) if s[0] == x]].sum() for x in range(4)])
    assert np.allclose(marg, first, atol=1e-6)


def test_findings_report_with_reproducer(tmp_path):
    from specverify.findings.report import audit, write
    result, _ = audit("transformers", checks=[], probe_names=["residual_zero_logits"])
    folder = write(result, "transformers", str(tmp_path))
    assert (folder / "README.md").read_text().count("residual_zero_logits") >= 2
    out = (folder / "repro_transformers_residual_zero.out").read_text()
    assert "BUG" in out and "[exit code 0]" in out


def test_engine_level_toy_models_as_transformers_lms():
    """The battery's toy models as transformers LMs (DynamicCache of token ids): plain generate follows
    the toy's logits, and assisted runs with the target as its own assistant at T = 1 accept every draft."""
    import torch
    from specverify.adapters.hf_engine import TransformersAssisted, toy_lm
    from specverify.reference.toy import ToyModel
    from specverify.reference.transforms import Transform
    toy = ToyModel(4, 77, scale=0.7)
    lm = toy_lm(toy)
    ids = torch.tensor([[1, 2, 3]])
    assert np.allclose(lm(ids).logits[0, -1].double().numpy(), toy.logits((1, 2, 3)), atol=1e-6)
    engine = TransformersAssisted()
    tokens, info = engine.generate(toy, toy, (1,), 2, Transform(), seed=0, n=20, length=4)
    assert tokens.shape == (20, 4) and ((tokens >= 0) & (tokens < 4)).all()
    assert info["num_drafted"] > 0 and info["num_accepted"] == info["num_drafted"]
    greedy, _ = engine.generate(toy, toy.draft(78), (1,), 2, Transform(temperature=0.0), seed=0, n=2, length=4)
    path = []
    for _ in range(4):
        path.append(int(np.argmax(toy.probs((1,) + tuple(path)))))
    assert greedy.tolist() == [path, path]


def test_reduced_audit_finds_the_coin_zero_bug_and_passes_the_law():
    """The audit pipeline itself on transformers' sampler (CI-sized: 2000 samples per problem): every
    marginal/joint row passes (family-wise false alarm 1e-3 by Holm, seeded), the coin-0.0 row fails."""
    from specverify.findings.report import audit
    result, _ = audit("transformers", samples=2000, checks=["marginal", "joint", "endpoints"], probe_names=[])
    rows = {c.name: c for c in result.checks}
    assert rows["chain.zero_prob[coin=0.0]"].verdict == "fail"
    assert rows["chain.zero_prob[coin=1-2^-24]"].verdict == "pass"
    stat = [c for c in result.checks if c.p_value is not None]
    assert stat and all(c.verdict == "pass" for c in stat), [c.name for c in stat if c.verdict != "pass"]
    assert result.engine_version.split(" ")[0] == transformers.__version__


def test_a_request_without_drafts_on_a_hostile_row_raises_in_torch_multinomial():
    # transformers' plain decode samples with torch.multinomial, which refuses such rows; the adapter's
    # own inverse-CDF draw used to raise an IndexError of its own on an all-zero row
    sampler = resolve("transformers")
    for row in (np.zeros(8193), np.full(8193, np.nan)):
        with pytest.raises(RuntimeError, match="probability tensor"):
            sampler.plain(row, 0.5)
    assert sampler.plain(np.array([0.0, 0.5, 0.5]), 0.75) == 2


def test_assisted_steps_follow_the_declared_tokens_left_schedule():
    """transformers reads the draft length from the assistant's generation config (unset: 20 drafts and a
    0.4 confidence stop, so L = 4 runs at kappa = 2 had steps of 3 drafts). With the adapter's config every
    run's (drafted, accepted) trace, sampled and greedy, is one the `tokens-left` law gives probability > 0."""
    from specverify.adapters.hf_engine import TransformersAssisted
    from specverify.reference import acceptance as law_mod
    from specverify.reference.toy import ToyModel
    from specverify.reference.transforms import Transform
    target = ToyModel(4, 31, scale=0.7, zero_frac=0.2)
    draft = target.draft(32, noise=1.0)
    engine = TransformersAssisted()
    assert engine.draft_schedule == law_mod.TOKENS_LEFT
    for transform in (Transform(temperature=0.7), Transform(temperature=0.0)):
        _, info = engine.generate(target, draft, (1, 2), 2, transform, seed=0, n=60, length=4)
        law = law_mod.run_acceptance_law(target, draft, (1, 2), 2, 4, transform, law_mod.TOKENS_LEFT)
        traces = [tuple(map(tuple, t)) for t in info["verify_counts"]]
        assert len(traces) == 60 and all(t in law.index() for t in traces), set(traces) - set(law.traces)
        assert info["num_accepted"] == sum(m for t in traces for _, m in t)
    assert engine._lm(draft).generation_config.num_assistant_tokens == 2


def test_lookup_traces_follow_its_own_rules_law_and_fail_the_latest_match_rule():
    """transformers-lookup from a prompt where the earliest and the latest match differ (kappa 3, L = 5:
    spans longer than the tokens left, which transformers verifies whole and cuts after): 1000 sampled runs'
    per-step traces pass the law of its declared rule (HFPromptLookupSpan(2), tokens-left, Pearson at level
    1e-3, false-alarm rate 1e-3) and fail the law of the latest-match rule (a trace of probability 0
    there, or Pearson p < 1e-3). Greedy runs have the one trace the rule's greedy law gives."""

    from specverify import stats
    from specverify.adapters.hf_engine import TransformersAssisted
    from specverify.reference import acceptance as law_mod
    from specverify.reference.span_drafters import HFPromptLookupSpan, RecentNgramSpan
    from specverify.reference.toy import ToyModel
    from specverify.reference.transforms import Transform
    target = ToyModel(4, 31, scale=0.7, zero_frac=0.2)
    engine = TransformersAssisted(lookup=True)
    assert isinstance(engine.span_drafter, HFPromptLookupSpan) and engine.verify_rule == law_mod.SAMPLE_MATCH
    prompt, kappa, length, transform = (1, 2, 3, 1, 2, 0, 1, 2), 3, 5, Transform(temperature=0.7)
    _, info = engine.generate(target, None, prompt, kappa, transform, 5, 1000, length)
    runs = [tuple(map(tuple, t)) for t in info["verify_counts"]]
    assert info["num_accepted"] == sum(m for t in runs for _, m in t)

    def p_value(drafter):
        law = law_mod.run_acceptance_law(target, drafter, prompt, kappa, length, transform, law_mod.TOKENS_LEFT,
                                         law_mod.SAMPLE_MATCH)
        counts, impossible = law.counts(runs)
        return 0.0 if impossible else stats.pearson(counts, law.probs, alpha=1e-3).p_value

    assert p_value(engine.span_drafter) > 1e-3
    assert p_value(RecentNgramSpan(1, 2)) < 1e-3
    greedy = Transform(temperature=0.0)
    _, info = engine.generate(target, None, prompt, kappa, greedy, 0, 8, length)
    (trace,) = law_mod.run_acceptance_law(target, engine.span_drafter, prompt, kappa, length, greedy,
                                          law_mod.TOKENS_LEFT).traces
    assert all(tuple(map(tuple, t)) == trace for t in info["verify_counts"])
