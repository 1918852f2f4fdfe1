"""Engine-level adapters with models of their own (`models = "own"`): tiny random Llamas
(`models.tiny`) whose laws the harness computes from a float64 forward (`reference.tabulated`)."""

import pickle

import numpy as np
import pytest

pytest.importorskip("transformers")

from specverify.models import tiny as tiny_llama
from specverify.adapters.protocol import check_adapter
from specverify.errors import AdapterError, InputError
from specverify.reference.tabulated import TabulatedModel, prefix_of
from specverify.reference.toy import prefix_index


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-llama")


def test_prefix_of_inverts_prefix_index():
    for vocab in (2, 3, 5):
        for prefix in [(), (0,), (vocab - 1,), (1, 0, 1), (0, 0, 0, 0), tuple(range(vocab))]:
            assert prefix_of(prefix_index(prefix, vocab), vocab) == prefix


def test_tabulated_memoises_and_groups_by_length():
    calls = []

    def fn(prefixes):
        calls.append(len(prefixes))
        return np.array([[float(sum(p)), 0.0, -1.0] for p in prefixes])

    m = TabulatedModel(3, fn, "sum")
    m.prefetch((1,), 2)
    assert calls == [1, 3, 9]
    np.testing.assert_allclose(m.logits((1, 2, 2)), [5.0, 0.0, -1.0])
    assert calls == [1, 3, 9]                         # memoised: no new call
    assert m.probs((1,)).sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(m.logits_at(np.array([prefix_index((1, 2), 3)]))[0], m.logits((1, 2)))
    with pytest.raises(InputError, match="outside"):
        m.logits((3,))


def test_tabulated_crosses_a_process_boundary_without_its_logits():
    m = TabulatedModel(3, lambda ps: np.zeros((len(ps), 3)), "z", handle="/some/folder")
    back = pickle.loads(pickle.dumps(m))
    assert (back.vocab_size, back.name, back.handle) == (3, "z", "/some/folder")
    with pytest.raises(InputError, match="crossed a process boundary"):
        back.logits((0,))


def test_tiny_llama_is_seeded_and_its_law_matches_the_float32_forward(root):
    import torch
    from transformers import LlamaForCausalLM

    t, d = tiny_llama.pair_folders(root, 4, 3)
    again = tiny_llama.build(root / "again", 4, 3)
    a = LlamaForCausalLM.from_pretrained(str(t), dtype=torch.float32)
    b = LlamaForCausalLM.from_pretrained(str(again), dtype=torch.float32)
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q)                      # same seed, same weights
    target, draft = tiny_llama.tabulated(t), tiny_llama.tabulated(d)
    row = target.probs((1, 2))
    assert row.min() > 1e-4 and row.max() < 0.99      # a real distribution, not uniform, not one-hot
    assert 0.5 * np.abs(row - 1 / 4).sum() > 0.05
    assert 0.5 * np.abs(row - draft.probs((1, 2))).sum() > 1e-3   # the draft differs
    with torch.no_grad():
        f32 = a(torch.tensor([[1, 2]])).logits[0, -1].numpy()
    np.testing.assert_allclose(f32, target.logits((1, 2)), atol=1e-5)


def test_extra_tokens_have_zero_head_rows_and_are_outside_the_law(root):
    import torch
    from transformers import LlamaForCausalLM

    folder = tiny_llama.build(root / "x2", 5, 1, extra_tokens=2)
    lm = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    assert lm.config.vocab_size == 7 and lm.config.eos_token_id == 5 and lm.config.bos_token_id == 6
    assert torch.count_nonzero(lm.lm_head.weight[5:]) == 0
    assert tiny_llama.tabulated(folder).probs((1,)).shape == (5,)
    with pytest.raises(InputError, match="not a folder written by tiny_llama"):
        tiny_llama.tabulated(root)


class _Own:
    name, version = "own-test", "0"
    capabilities = {"engine"}
    models = "own"

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length):
        raise NotImplementedError


def test_own_without_own_models_or_a_bad_models_value_is_refused():
    with pytest.raises(AdapterError, match="no own_models"):
        check_adapter(_Own(), "own")
    bad = _Own()
    bad.models = "onw"
    with pytest.raises(AdapterError, match="models must be one of"):
        check_adapter(bad, "bad")


def _audit(spec, isolated):
    from specverify.audit import prepare
    audit = prepare(spec, {"samples": 3000, "checks": ["runs"]}, isolated=isolated)
    return audit.run()


@pytest.mark.parametrize("isolated", [False, True], ids=["in-process", "worker"])
def test_a_correct_own_model_sampler_passes_and_a_biased_one_fails(tmp_path, monkeypatch, isolated):
    """runs at 3000 runs of V=4 L=4 (min detectable TV ~0.08 at alpha 0.001): plain sampling from the
    float32 forward passes against the float64 law; temperature 0.8 instead of 1 (TV ~0.2) fails."""
    import os
    monkeypatch.setenv("SPECVERIFY_CACHE", str(tmp_path))
    here = os.path.join(os.path.dirname(__file__), "plugins", "own_sampler.py")
    good = _audit(f"{here}:factory", isolated)
    assert good.verdict == "pass", [(c.name, c.verdict, c.detail) for c in good.checks]
    bad = _audit(f"{here}:biased", isolated)
    row = next(c for c in bad.checks if c.name.startswith("engine.runs["))
    assert row.verdict == "fail" and row.p_value < 1e-6


@pytest.mark.parametrize("damage, message", [
    ("stamp", "has an unreadable stamp"), ("stamp-list", "has a corrupt stamp"), ("weights", "cannot be loaded"),
])
def test_a_corrupt_own_model_folder_is_an_adapter_error(root, tmp_path, damage, message):
    # a corrupt stamp or truncated weights were a traceback (exit 1, the FAIL code)
    import re
    import shutil

    from specverify.audit import Context
    from specverify.battery import harness
    target, draft = tiny_llama.pair_folders(root, 4, 3)
    bad = tmp_path / damage
    shutil.copytree(target, bad)
    if damage == "stamp":
        (bad / tiny_llama.STAMP).write_text("{not json")
    elif damage == "stamp-list":
        (bad / tiny_llama.STAMP).write_text("[1, 2]")
    else:
        weights = bad / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:200])

    class Broken(_Own):
        def own_models(self, vocab, seed):
            return str(bad), str(draft)

    with pytest.raises(AdapterError, match=re.escape(message)):
        harness.own_models(Broken(), 4, 0, Context())
