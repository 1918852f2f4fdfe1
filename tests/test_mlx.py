"""MLX-LM (`specverify.adapters.mlx`): the transform mapping (always), and where MLX-LM is installed
(bash specverify/findings/install_mlx.sh VENV) small end-to-end runs of the engine-level adapter on its
own tiny Llamas, a mutated mapping caught, and the bitwise level on the tiny model."""

import numpy as np
import pytest

from specverify.adapters import mlx as mlx_adapter
from specverify.errors import InputError
from specverify.reference.transforms import Transform

INSTALL = "MLX-LM not installed: bash specverify/findings/install_mlx.sh VENV (pip install 'mlx[cpu]==0.32.4' mlx-lm==0.32.2)"


def test_transform_mapping_is_exact_or_refused():
    """MLX-LM applies top_p / min_p / top_k to the untempered row and the temperature last: the adapter
    maps what commutes and refuses the rest (never a silently different law)."""
    args = mlx_adapter.sampler_args
    assert args(Transform(temperature=0.0), 4) == {"temp": 0.0}
    assert args(Transform(temperature=0.6), 4) == {"temp": 0.6, "top_k": 0, "top_p": 0.0}
    assert args(Transform(top_k=2), 4)["top_k"] == 2
    assert args(Transform(top_k=4), 4)["top_k"] == 0          # top_k >= V is off (MLX-LM raises for it)
    assert args(Transform(top_p=0.8), 4)["top_p"] == 0.8
    assert args(Transform(temperature=0.8, top_k=3), 5, min_p=0.1)["min_p"] == pytest.approx(0.1 ** 0.8)
    with pytest.raises(InputError, match="top_p"):
        args(Transform(temperature=0.7, top_p=0.8), 4)
    with pytest.raises(InputError, match="top_p"):
        args(Transform(top_k=2, top_p=0.8), 4)


def test_min_p_mapping_keeps_the_reference_set():
    """min_p m after temperature T (the reference) keeps the same tokens as min_p m^T before it (MLX-LM)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        logits, T, m = rng.normal(size=6) * 2, rng.uniform(0.3, 2.0), rng.uniform(0.05, 0.5)
        p_t = np.exp((logits - logits.max()) / T)
        p_1 = np.exp(logits - logits.max())
        np.testing.assert_array_equal(p_t >= m, p_1 >= mlx_adapter.sampler_args(Transform(temperature=T), 6, m)["min_p"])


def test_prefill_calls_follow_mlx_lms_chunks():
    assert [mlx_adapter.prefill_calls(n, 512) for n in (1, 2, 513, 514)] == [0, 1, 1, 2]


@pytest.mark.parametrize("name", ["mlx", "mlx-bitwise-tiny"])
def test_audit_without_mlx_exits_2_with_the_install_line(name):
    import importlib.util
    import subprocess
    import sys
    if importlib.util.find_spec("mlx") is not None and importlib.util.find_spec("mlx_lm") is not None:
        pytest.skip("MLX-LM is installed here: the not-installed path cannot be shown")
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", name], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not installed" in lines[0] and "install_mlx.sh" in lines[0], proc.stderr


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    pytest.importorskip("mlx.core", reason=INSTALL)
    pytest.importorskip("mlx_lm", reason=INSTALL)
    pytest.importorskip("transformers")
    return mlx_adapter.MlxLm(root=tmp_path_factory.mktemp("mlx-tiny"))


@pytest.fixture(scope="module")
def pair(engine):
    from specverify.models import tiny as tiny_llama
    t, d = engine.own_models(4, 3)
    return tiny_llama.tabulated(t), tiny_llama.tabulated(d)


def _p_value(tokens, target, transform, prompt=(1,), law=None):
    """Pearson chi-squared p-value of runs [n, L] against the exact law of the transformed target
    (or `law`); a run outside the law's support fails the test outright."""
    from specverify import stats
    from specverify.reference import laws
    if law is None:
        law = laws.target_law(laws.Transformed(target, transform), prompt, tokens.shape[1])
    counts = stats.observed_counts(laws.encode(tokens, law.vocab_size), law.codes())
    return stats.pearson(counts, law.probs).p_value


def test_export_is_float32_and_matches_the_float64_law(engine, pair):
    import mlx.core as mx
    target, _ = pair
    model, _ = engine._model(target.handle)
    for prefix in [(1,), (0, 3), (2, 2, 1, 0)]:
        row = np.array(model(mx.array([list(prefix)]))[0, -1])
        assert row.dtype == np.float32
        np.testing.assert_allclose(row, target.logits(prefix), atol=2e-5)


def test_runs_have_the_target_law_and_are_reproducible(engine, pair):
    """400 speculative runs of V=4 L=4 against the float64 law (min detectable TV ~0.2 at alpha 1e-3:
    a smoke test, the audit has the power), reproducible from seed + i."""
    target, draft = pair
    tokens, info = engine.generate(target, draft, (1,), 2, Transform(), 11, 400, 4)
    again, _ = engine.generate(target, draft, (1,), 2, Transform(), 11, 400, 4)
    np.testing.assert_array_equal(tokens, again)
    assert 0 < info["num_accepted"] < info["num_drafted"]
    assert _p_value(tokens, target, Transform()) > 1e-3
    # per-step counts: each run's (drafted, accepted) trace is one the declared law allows, and they add up
    from specverify.reference import acceptance as law_mod
    law = law_mod.run_acceptance_law(target, draft, (1,), 2, 4, Transform(), engine.draft_schedule, engine.verify_rule)
    traces = [tuple(map(tuple, t)) for t in info["verify_counts"]]
    assert len(traces) == 400 and all(t in law.index() for t in traces), set(traces) - set(law.traces)
    assert sum(k for t in traces for k, _ in t) == info["num_drafted"]
    assert sum(m for t in traces for _, m in t) == info["num_accepted"]


def test_a_mutated_mapping_is_caught(engine, pair, monkeypatch):
    """Temperature 0.5 sent to MLX-LM as 1.0 (the mapping dropped): the law row rejects it."""
    target, draft = pair
    real = mlx_adapter.sampler_args
    monkeypatch.setattr(mlx_adapter, "sampler_args", lambda t, v, m=0.0: {**real(t, v, m), "temp": 1.0})
    tokens, _ = engine.generate(target, draft, (1,), 2, Transform(temperature=0.5), 5, 400, 4)
    assert _p_value(tokens, target, Transform(temperature=0.5)) < 1e-6


def test_greedy_runs_follow_the_argmax_path(engine, pair):
    target, draft = pair
    tokens, info = engine.generate(target, draft, (1,), 2, Transform(temperature=0.0), 0, 8, 6)
    path = []
    for _ in range(6):
        path.append(int(np.argmax(target.probs((1,) + tuple(path)))))
    assert (tokens == np.array(path)).all()
    assert info["num_drafted"] > 0


def test_identity_draft_accepts_like_sample_match(engine, pair):
    """draft = target: MLX-LM keeps a draft while it equals the target's sample, so fewer than all
    drafts are kept; the first draft of each run is kept with probability sum_x p(x)^2."""
    target, _ = pair
    tokens, info = engine.generate(target, target, (1,), 1, Transform(), 3, 600, 1)
    p = target.probs((1,))
    rate = info["num_accepted"] / info["num_drafted"]
    assert info["num_drafted"] == 600
    assert abs(rate - float((p ** 2).sum())) < 4 * np.sqrt(0.25 / 600)


def test_stop_token_ends_a_run_and_repetition_penalty_maps(engine):
    from specverify.models import tiny as tiny_llama
    from specverify.reference import laws
    from specverify.reference.processors import Processors
    t, d = engine.own_models(5, 4)
    target, draft = tiny_llama.tabulated(t), tiny_llama.tabulated(d)
    stop = Processors(stop_tokens=(0,), logit_bias=((0, 1.0),))
    tokens, _ = engine.generate(target, draft, (1, 2), 2, Transform(), 1, 200, 4, stop)
    for row in tokens:
        cut = np.flatnonzero(row == 0)
        if cut.size:
            assert (row[cut[0] + 1:] == -1).all()
        else:
            assert (row >= 0).all()
    assert (tokens == -1).any()
    # a one-token prompt: MLX-LM's speculative history loses nothing (it drops all but the last prompt
    # token), so the penalty's law is the reference's
    rep = Processors(repetition_penalty=2.0)
    runs, _ = engine.generate(target, draft, (1,), 2, Transform(), 2, 400, 3, rep)
    law = laws.processed_law(target, Transform(), rep, (1,), 3)
    assert _p_value(runs, target, Transform(), law=law) > 1e-3


def test_bitwise_tiny_speculative_equals_plain(engine):
    from specverify.adapters.bitwise_level import BATCH, GreedyRequest, Layout, Spec
    adapter = mlx_adapter.tiny()
    info = adapter.bitwise_info()
    assert info.proposers == ("self", "draft") and info.layouts == (BATCH,)
    prompts = ((5, 6, 7), (9, 1), (200, 3, 3, 4))
    base = adapter.decode_greedy(GreedyRequest(prompts=prompts, max_new_tokens=8))
    for spec in (Spec("self", 2), Spec("draft", 3)):
        res = adapter.decode_greedy(GreedyRequest(prompts=prompts, max_new_tokens=8, spec=spec))
        assert res.tokens == base.tokens
    for row, rows in zip(base.tokens, base.logits):
        assert list(row) == np.argmax(rows, axis=1).tolist()
    batched = adapter.decode_greedy(GreedyRequest(prompts=prompts, max_new_tokens=8, layout=Layout(batch_size=3)))
    assert batched.tokens == base.tokens
    with pytest.raises(InputError, match="one request at a time"):
        adapter.decode_greedy(GreedyRequest(prompts=prompts, max_new_tokens=8, spec=Spec("self", 2),
                                            layout=Layout(batch_size=2)))
