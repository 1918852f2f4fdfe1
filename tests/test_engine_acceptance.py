"""`engine_acceptance`: an engine's acceptance counters against the exact acceptance law of its draft
(`reference.acceptance`), both ways -- the correct engines pass, drafters out of sync (output exact,
acceptance collapsed) fail with the deviation kind `exact-but-slow`, counters above the exact law are
flagged -- in fixed-budget and decisive audits.

False alarms: every audit here is one fixed-seed draw of a family-wise 1e-3 test (the audit's alpha).
Power: the rows state it (min_detectable_tv of the per-step trace law, min detectable shift of E of the
totals row); the planted bugs move E by 0.28 (toy engine) and 0.51 (our engine), far beyond it."""

from __future__ import annotations

import numpy as np
import pytest

from specverify.adapters.reference import ReferenceEngine
from specverify.adapters.specverify_engine import SpecverifyEngine
from specverify.audit import Context, run_audit
from specverify.checks import engine_acceptance
from specverify.zoo import make
from specverify.zoo.our_engine import DraftOutOfSyncEngine

CHECKS = ["runs", "engine_acceptance"]


def acceptance_rows(result):
    return [r for r in result.checks if r.check == "engine_acceptance"]


class OurEngine(SpecverifyEngine):
    capabilities = {"engine"}


class OurEngineOutOfSync(SpecverifyEngine):
    name = "specverify-draft-out-of-sync"
    capabilities = {"engine"}
    engine_class = DraftOutOfSyncEngine


class TotalsOnly(ReferenceEngine):
    """The reference engine reporting only totals (no per-run traces), optionally inflated."""

    capabilities = {"engine"}
    factor = 1.0

    def generate(self, *args, **kw):
        tokens, info = super().generate(*args, **kw)
        # inflated at most to every draft accepted: more than drafted is an adapter error, not a verdict
        accepted = min(info["num_drafted"], int(info["num_accepted"] * self.factor))
        return tokens, {"num_drafted": info["num_drafted"], "num_accepted": accepted}


class Inflated(TotalsOnly):
    name = "reference-inflated-counters"
    factor = 1.15


class NoSchedule(ReferenceEngine):
    capabilities = {"engine"}
    draft_schedule = None


def test_the_reference_engine_passes_per_step_and_states_e_and_power():
    result = run_audit(ReferenceEngine(), Context(samples=20_000), ["engine_acceptance"])
    rows = acceptance_rows(result)
    assert result.verdict == "pass" and [r.verdict for r in rows] == ["pass", "pass"], [(r.name, r.detail) for r in rows]
    step = rows[0]
    assert "per-step" in step.name and 0 < step.min_detectable_tv < 0.1
    acc = step.data["acceptance"]
    lo, hi = acc["E_range"]
    assert lo < acc["E_exact"] < hi and lo <= acc["E_observed"] <= hi
    assert acc["S_exact"] == pytest.approx(acc["E_exact"] / (1 + 2 * 0.165))


def test_a_toy_drafter_out_of_sync_is_exact_but_slow():
    result = run_audit(make("draft-kv-rewind"), Context(samples=20_000), CHECKS)
    assert result.verdict == "fail"
    assert all(r.verdict == "pass" for r in result.checks if r.check == "runs")
    dev = result.deviation
    assert dev["kind"] == "exact-but-slow", dev
    acc = dev["acceptance"]
    assert acc["E_observed"] < acc["E_range"][0] and acc["speedup_loss"] > 0.05 and acc["direction"] == "below"
    assert "E " in dev["text"] and "S = E/(1 + kappa c)" in dev["text"]


def test_our_engine_passes_and_its_out_of_sync_drafter_is_exact_but_slow():
    good = run_audit(OurEngine(), Context(samples=20_000), ["engine_acceptance"])
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks]
    assert all("capped" in r.name for r in acceptance_rows(good))
    bad = run_audit(OurEngineOutOfSync(), Context(samples=4000), CHECKS)
    assert [r.verdict for r in bad.checks if r.check == "runs"] == ["pass", "pass"]     # the output is exact
    assert bad.deviation["kind"] == "exact-but-slow", bad.deviation
    acc = bad.deviation["acceptance"]
    assert acc["E_exact"] - acc["E_observed"] > 0.3 and acc["S_observed"] < acc["S_exact"]


def test_totals_only_rows_pass_when_exact_and_flag_counters_above_the_exact_law():
    ok = run_audit(TotalsOnly(), Context(samples=20_000), ["engine_acceptance"])
    rows = acceptance_rows(ok)
    assert ok.verdict == "pass" and "totals" in rows[0].name, [(r.name, r.detail) for r in rows]
    assert 0 < rows[0].min_detectable_tv < 0.1            # the smallest shift of E it detects at power 0.99
    high = run_audit(Inflated(), Context(samples=20_000), CHECKS)
    assert high.deviation["kind"] == "acceptance-above-exact", high.deviation
    assert high.deviation["acceptance"]["direction"] == "above"


def test_an_engine_without_a_draft_schedule_is_not_covered_never_passed():
    result = run_audit(NoSchedule(), Context(samples=2000), ["runs", "engine_acceptance"])
    assert "engine_acceptance" in result.not_covered and "draft_schedule" in result.not_covered["engine_acceptance"]
    assert all(r.verdict == "skip" for r in acceptance_rows(result))


def test_decisive_audits_decide_the_acceptance_rows_by_e_process():
    good = run_audit(ReferenceEngine(), Context(samples=8000), ["engine_acceptance"], stop="decisive", power_tv=0.2)
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks]
    step = acceptance_rows(good)[0]
    assert step.data["sequential"]["kind"] == "multinomial"
    bad = run_audit(make("draft-kv-rewind"), Context(samples=8000), ["engine_acceptance"], stop="decisive",
                    power_tv=0.2)
    assert bad.verdict == "fail"
    assert acceptance_rows(bad)[0].data["sequential"]["decision"] == "REJECTED"


def test_budget_follows_samples():
    assert engine_acceptance.runs_of(Context(samples=1000)) == 2000
    assert engine_acceptance.runs_of(Context(samples=100_000)) == 10_000


def test_an_unknown_draft_schedule_is_an_adapter_error():
    from specverify.adapters.protocol import check_adapter
    from specverify.errors import AdapterError

    class Sometimes(ReferenceEngine):
        draft_schedule = "sometimes"

    with pytest.raises(AdapterError, match="draft_schedule 'sometimes' is not one of fixed, capped"):
        check_adapter(Sometimes(), "adapter 'x'")
    check_adapter(ReferenceEngine(), "adapter 'reference'")


def test_decisive_totals_rows_spend_their_level_per_round():
    good = run_audit(TotalsOnly(), Context(samples=8000), ["engine_acceptance"], stop="decisive", power_tv=0.2)
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks]
    total = acceptance_rows(good)[0]
    assert "totals" in total.name and total.data["sequential"]["kind"] == "p-value"
    high = run_audit(Inflated(), Context(samples=8000), ["engine_acceptance"], stop="decisive", power_tv=0.2)
    assert high.verdict == "fail" and acceptance_rows(high)[0].data["sequential"]["decision"] == "REJECTED"


class ShiftedVocabDraft:
    """A draft model whose ids are mapped to the wrong target ids (id + 1 mod V): its rows, drafts and q
    all in the shifted ids, so the verifier still gets the q each draft was drawn from."""

    def __init__(self, model):
        self.model, self.vocab_size = model, model.vocab_size
        self.perm = (np.arange(self.vocab_size) - 1) % self.vocab_size     # new id j <- old id j - 1

    def probs_at(self, index, transform=None):
        return self.model.probs_at(index, transform)[:, self.perm]

    def table(self, max_len, transform=None):
        return self.model.table(max_len, transform)[:, self.perm]


class VocabMisaligned(ReferenceEngine):
    """The reference engine with the draft's vocabulary mapped to the wrong target ids."""

    name = "reference-draft-vocab-misaligned"
    capabilities = {"engine"}

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        return super().generate(target, ShiftedVocabDraft(draft), prompt, kappa, transform, seed, n, length, processors)


def test_a_draft_vocabulary_mapped_to_the_wrong_ids_is_exact_but_slow_greedy_and_sampled():
    result = run_audit(VocabMisaligned(), Context(samples=20_000), CHECKS)
    assert [r.verdict for r in result.checks if r.check == "runs"] == ["pass", "pass"]     # the output is exact
    rows = {r.name.split("[")[0]: r for r in acceptance_rows(result)}
    assert rows["engine.acceptance"].verdict == "fail" and rows["engine.acceptance_greedy"].verdict == "fail"
    assert result.deviation["kind"] == "exact-but-slow", result.deviation


class SampleMatchEngine(ReferenceEngine):
    """Sample-match speculation under the `to-length` schedule (MLX-LM's loop), simulated in numpy
    (`test_reference_acceptance.simulate_sample_match`): exact output law by another rule."""

    name = "toy-sample-match"
    capabilities = {"engine"}
    draft_schedule = "to-length"
    verify_rule = "sample-match"

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        from test_reference_acceptance import simulate_sample_match
        runs = simulate_sample_match(target, draft, prompt, kappa, length, transform, n, seed)
        traces = [t for _, t in runs]
        return np.array([list(s) for s, _ in runs], np.int64), {
            "num_accepted": sum(m for t in traces for _, m in t), "num_drafted": sum(k for t in traces for k, _ in t),
            "num_verifies": sum(len(t) for t in traces), "verify_counts": traces}


class SampleMatchDeclaredChain(SampleMatchEngine):
    name = "toy-sample-match-declared-chain"
    verify_rule = None


def test_the_declared_verify_rule_gives_the_law_sample_match_passes_and_fails_as_chain():
    """A sample-match engine passes the law of its declared rule and fails the chain rule's (it accepts
    less: exact-but-slow); an unknown rule is an adapter error."""
    from specverify.adapters.protocol import check_adapter
    from specverify.errors import AdapterError
    good = run_audit(SampleMatchEngine(), Context(samples=2000), ["engine_acceptance"])
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks]
    step = acceptance_rows(good)[0]
    assert "to-length, sample-match, per-step" in step.name and step.data["acceptance"]["rule"] == "sample-match"
    bad = run_audit(SampleMatchDeclaredChain(), Context(samples=2000), ["engine_acceptance"])
    assert bad.verdict == "fail" and acceptance_rows(bad)[0].data["acceptance"]["direction"] == "below"

    class Typical(SampleMatchEngine):
        verify_rule = "typical"

    with pytest.raises(AdapterError, match="verify_rule 'typical' is not one of chain, sample-match"):
        check_adapter(Typical(), "adapter 'x'")


class MiscountedDrafts(TotalsOnly):
    """Totals with verifies, one draft more than kappa a step allows: not the declared fixed schedule."""

    name = "reference-miscounted-drafts"

    def generate(self, *args, **kw):
        tokens, info = super().generate(*args, **kw)
        return tokens, {**info, "num_verifies": info["num_drafted"] // 2, "num_drafted": info["num_drafted"] + 1}


def test_totals_whose_drafts_contradict_a_fixed_schedule_fail():
    result = run_audit(MiscountedDrafts(), Context(samples=2000), ["engine_acceptance"])
    row = [r for r in acceptance_rows(result) if "totals" in r.name][0]
    assert row.verdict == "fail" and "not kappa = 2 each" in row.detail, row.detail
    good = run_audit(TotalsOnly(), Context(samples=2000), ["engine_acceptance"])
    assert all(r.verdict == "pass" for r in acceptance_rows(good)), [(r.name, r.detail) for r in acceptance_rows(good)]


SAMPLES_BLOCK = 2_000_000    # 200,000 runs: on the battery's toy block verification's E is only 0.0105 above
                             # the chain rule's (2.3094 vs 2.2989), ~5 standard errors of the totals at this size


class BlockEngine(ReferenceEngine):
    """The reference engine verifying by block verification: exact output, more accepted drafts."""

    name = "reference-block"
    capabilities = {"engine"}
    verify_rule = "block"

    def __init__(self):
        super().__init__()
        from test_reference_acceptance import block_engine
        self._engine = block_engine()


class BlockDeclaredChain(BlockEngine):
    name = "reference-block-declared-chain"
    verify_rule = None


def test_block_verification_passes_its_law_and_is_flagged_above_the_chain_law():
    """Declared `block`, the block engine passes; declared chain, its counters are above the chain
    rule's exact law -- impossible for the chain rule, so flagged (direction `above`), never passed."""
    good = run_audit(BlockEngine(), Context(samples=SAMPLES_BLOCK), ["engine_acceptance"])
    assert good.verdict == "pass", [(r.name, r.detail) for r in good.checks]
    assert acceptance_rows(good)[0].data["acceptance"]["rule"] == "block"
    bad = run_audit(BlockDeclaredChain(), Context(samples=SAMPLES_BLOCK), ["engine_acceptance"])
    assert bad.verdict == "fail" and acceptance_rows(bad)[0].data["acceptance"]["direction"] == "above"
