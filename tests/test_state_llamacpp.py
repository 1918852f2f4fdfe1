"""llama.cpp (llama-cpp-python) on the state families of issue 28: the GGUF export of the sliding-window
family (arch "granite_swa") and the hybrid family (arch "lfm2"), and the rows of
`findings.state_families` through llama-cpp-python's own API.

Skips where llama-cpp-python is absent (install: bash specverify/findings/install_llamacpp.sh VENV).
Each test can fail: the exports are compared with the float64 law (and, for the window, with the law of
the same weights without it: the window must matter); the rows are run on small inputs and their
verdicts checked both ways -- the sliding family's rollback passes while its no-rollback control
differs; the hybrid family's rollback is refused, and speculative decoding on it fails mid-run
(reports/llamacpp-state-0.3.36).
"""

from __future__ import annotations

import numpy as np
import pytest

INSTALL = "llama-cpp-python not installed: bash specverify/findings/install_llamacpp.sh VENV"
V = 16


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    pytest.importorskip("llama_cpp", reason=INSTALL)
    pytest.importorskip("transformers", reason="pip install 'specverify[transformers]'")
    pytest.importorskip("gguf", reason="pip install 'specverify[engine]'")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECVERIFY_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def eng(cache):
    from specverify.findings.state_families import LlamaCpp
    return LlamaCpp()


def _logits(eng, family, folder, seq):
    llm = eng.load(family, folder)
    logits, _ = eng.step(llm, None, seq)
    return logits[:, :V]                                    # [len(seq), V]


def _law_rows(model_cls, folder, seq, **load):
    import torch
    m = model_cls.from_pretrained(str(folder), dtype=torch.float64, attn_implementation="eager", **load).eval()
    with torch.no_grad():
        return m(torch.tensor([seq])).logits[0, :, :V].numpy()


def test_the_hybrid_gguf_runs_the_float64_law(eng):
    from transformers import Lfm2ForCausalLM

    from specverify.findings.state_families import family_folders
    target, draft = family_folders("hybrid", V)
    seq = [int(t) for t in np.random.default_rng(0).integers(0, V, 24)]
    got = _logits(eng, "hybrid", target, seq)
    assert np.abs(got - _law_rows(Lfm2ForCausalLM, target, seq)).max() < 1e-5
    assert np.abs(got - _law_rows(Lfm2ForCausalLM, draft, seq)).max() > 0.1     # another model's law is far


def test_the_sliding_gguf_applies_the_window(eng):
    from transformers import MistralForCausalLM

    from specverify.findings.state_families import family_folders
    from specverify.models.sliding import WINDOW
    target, _ = family_folders("sliding", V)
    seq = [int(t) for t in np.random.default_rng(1).integers(0, V, 3 * WINDOW)]
    for family in ("sliding", "sliding-ring"):
        got = _logits(eng, family, target, seq)
        assert np.abs(got - _law_rows(MistralForCausalLM, target, seq)).max() < 1e-5
        full = _law_rows(MistralForCausalLM, target, seq, sliding_window=None)   # the same weights, no window
        assert np.abs(got[:WINDOW] - full[:WINDOW]).max() < 1e-5                 # before the edge: the same
        assert np.abs(got[WINDOW:] - full[WINDOW:]).max() > 0.1                  # past it: the window matters


def _by_name(rows):
    return {r.name: r for r in rows}


def test_rows_on_the_sliding_family_pass_and_the_control_differs(eng, monkeypatch):
    from specverify.battery.base import PASS
    from specverify.findings import state_families as sf
    monkeypatch.setattr(sf, "GREEDY_TOKENS", 10)
    target, draft = sf.family_folders("sliding", V)
    model, dmodel = eng.load("sliding", target), eng.load("sliding", draft)
    prompts = sf.greedy_prompts(V)[2:4]                      # lengths 7, 8: the window's edge inside the run
    rows = _by_name(sf.teacher_forced_rows(eng, "sliding", model, prompts, "t"))
    assert rows["verify.chunk[t]"].verdict == PASS, rows["verify.chunk[t]"].detail
    for j in range(sf.KAPPA):
        assert rows[f"rollback[t,j={j}]"].verdict == PASS, rows[f"rollback[t,j={j}]"].detail
        assert rows[f"rollback[t,j={j}]"].n > 0
    control = _by_name(sf.teacher_forced_rows(eng, "sliding", model, prompts[:1], "t", control=True))
    for j in range(sf.KAPPA):                                # without the rollback the logits differ
        assert control[f"rollback[t,j={j},no-rollback]"].data["max_abs"] > 0.1
    assert sf.greedy_row(eng, model, dmodel, prompts, "t").verdict == PASS
    scripted = _by_name(sf.scripted_rows(eng, model, prompts, "t"))
    assert [r.verdict for r in scripted.values()] == [PASS] * (sf.KAPPA + 1), [r.detail for r in scripted.values()]


def test_the_hybrid_rollback_is_refused_and_speculation_fails_mid_run(eng, monkeypatch):
    from specverify.battery.base import FAIL, PASS, SKIP
    from specverify.findings import state_families as sf
    monkeypatch.setattr(sf, "GREEDY_TOKENS", 10)
    target, draft = sf.family_folders("hybrid", V)
    model = eng.load("hybrid", target)
    prompts = sf.greedy_prompts(V)[:1]
    rows = _by_name(sf.teacher_forced_rows(eng, "hybrid", model, prompts, "t"))
    assert rows["verify.chunk[t]"].verdict == PASS, rows["verify.chunk[t]"].detail
    for j in range(sf.KAPPA):
        r = rows[f"rollback[t,j={j}]"]
        assert r.verdict == SKIP and r.data["not_covered"] and "returned false" in r.detail
    scripted = _by_name(sf.scripted_rows(eng, model, prompts, "t"))
    assert scripted["greedy.oracle[t]"].verdict == PASS          # every draft accepted: no removal needed
    for j in range(sf.KAPPA):
        r = scripted[f"greedy.adversarial[t,j={j}]"]
        assert r.verdict == FAIL and "llama_decode returned -1" in r.detail, r.detail
