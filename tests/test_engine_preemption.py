"""Preemption by recompute in our engine (`Engine._make_room`): under a KV budget too small for the
requests in flight, running requests are preempted and re-prefilled later, and each request's greedy and
seeded tokens (and the logits rows they were decided from) equal the request run alone; the broken
variant 51 (`preempt-keeps-draft-state`) resumes with a stale KV tail and is caught. Toy models (float64
rows): every comparison is exact."""

import numpy as np
import pytest

from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import Engine, SamplingParams
from specverify.server.models import tiny_models
from specverify.server.variants import PreemptKeepsDraftState

V, SEED = 4, 7
PROMPT_TOKENS, MAX_TOKENS = 6, 14
N_PROMPTS = 6
BLOCK = 4
TIGHT_BLOCKS = 12            # a lone request takes at most 7 blocks of 4; 12 requests at once must preempt


def _requests():
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, V, PROMPT_TOKENS)] for _ in range(N_PROMPTS)]
    sampling = []
    for i in range(N_PROMPTS):
        sampling.append(SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0))
        sampling.append(SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=900 + i))
    return [p for p in prompts for _ in range(2)], sampling


def _run(prompts, sampling, *, num_blocks=None, engine_class=Engine):
    target, draft = tiny_models(V, SEED)
    rows: dict = {}
    run = RunOptions(block_size=BLOCK, num_blocks=num_blocks, engine_class=engine_class,
                     record_logits=lambda rid, j, row: rows.setdefault(rid, []).append(np.asarray(row).tobytes()))
    got = generate(target, draft, prompts, sampling=sampling, spec=SpecOptions("draft", kappa=3), run=run)
    return got, rows


def _alone(prompts, sampling):
    out = []
    for p, s in zip(prompts, sampling):
        got, rows = _run([p], [s])
        out.append((got.tokens[0], rows[0]))
    return out


def test_preempted_requests_equal_each_request_alone():
    prompts, sampling = _requests()
    together, rows = _run(prompts, sampling, num_blocks=TIGHT_BLOCKS)
    assert together.metrics.num_preemptions > 0                  # the stress happened
    assert 0 < together.metrics.num_decode_preemptions <= together.metrics.num_preemptions   # some while decoding
    for i, (tokens, alone_rows) in enumerate(_alone(prompts, sampling)):
        assert together.tokens[i] == tokens, i
        assert rows[i] == alone_rows, i                          # the rows' bytes: recompute is exact on a toy


def test_default_budget_never_preempts_and_the_variant_is_then_exact():
    prompts, sampling = _requests()
    exact, _ = _run(prompts, sampling)
    broken, _ = _run(prompts, sampling, engine_class=PreemptKeepsDraftState)
    assert exact.metrics.num_preemptions == 0 and broken.metrics.num_preemptions == 0
    assert exact.tokens == broken.tokens


def test_variant_51_resumes_with_a_stale_kv_tail_and_differs():
    prompts, sampling = _requests()
    exact, exact_rows = _run(prompts, sampling, num_blocks=TIGHT_BLOCKS)
    broken, broken_rows = _run(prompts, sampling, num_blocks=TIGHT_BLOCKS, engine_class=PreemptKeepsDraftState)
    assert broken.metrics.num_preemptions > 0
    assert exact.tokens != broken.tokens or exact_rows != broken_rows


def test_a_lone_request_is_never_preempted():
    target, draft = tiny_models(V, SEED)
    eng_prompts, sampling = _requests()
    got = generate(target, draft, eng_prompts[:1], sampling=sampling[:1], spec=SpecOptions("draft", kappa=3),
                   run=RunOptions(block_size=BLOCK, num_blocks=7))
    assert got.metrics.num_preemptions == 0 and len(got.tokens[0]) == MAX_TOKENS


@pytest.mark.parametrize("budget", ["0", "10"])
def test_serve_refuses_a_budget_below_one_request(budget, capsys):
    from specverify.cli import main
    rc = main(["serve", "--model", "tiny:4,7", "--kv-budget", budget, "--port", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "--kv-budget" in err and "Traceback" not in err
