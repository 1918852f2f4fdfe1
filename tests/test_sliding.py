"""Sliding-window attention in our engine (`engine.sliding`: a ring-buffer KV cache, exact rollback) and the
tiny sliding-window family (`models.sliding`): the ring's layout, its bitwise agreement with plain
decode under the oracle and adversarial drafters, the planted ring bug (a ring sized for plain decode:
rejected drafts overwrite slots the window still reads) caught by `rollback[j]` and not by
`verify.width`, the float32 forward against the float64 law, and (slow) the family's run laws."""

import numpy as np
import pytest

from specverify.adapters.bitwise_level import ADVERSARIAL, ORACLE, SUBJECT, BitwiseInfo, check_request
from specverify.adapters.specverify_engine import backend_available, decode_greedy
from specverify.audit import Context
from specverify.checks import bitwise
from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.engine.kv_cache import SeqKV
from specverify.engine.model import random_llama
from specverify.engine.sliding import RingKVCache, SlidingLlama, ring_length
from specverify.errors import InputError
from specverify.zoo.our_engine import PlainDecodeRing

pytestmark = pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")

V, W = 96, 8


def sliding(window=W, cls=SlidingLlama, ring_len=None, backend="invariant"):
    m = random_llama(0, vocab_size=V)
    return cls(m.config, m.tok_embeddings, m.layers, m.norm, backend, name="random-sliding", head=m.head,
               window=window, ring_len=ring_len)


class SlidingEngine:
    """Our engine on a sliding-window model at the bitwise level, taking the harness's drafters."""

    name, version, capabilities = "sliding-engine", "0", {"bitwise"}

    def __init__(self, model):
        self.model = model

    def bitwise_info(self):
        from specverify.adapters.specverify_sliding import window_prompts
        return BitwiseInfo(model="sliding", vocab_size=V, proposers=("ngram",), layouts=("batch", "ragged"),
                           variants={"invariant": SUBJECT}, prompts=window_prompts(W, V), drafted=(ORACLE, ADVERSARIAL))

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), self.name)
        return decode_greedy(self.model, request, backend=request.variant)


def test_ring_slots_and_rollback_worked_example():
    """docs/sliding-window.md's example: W = 4, chunks of up to 3 tokens -> R = 5 slots, position t in t % 5."""
    R = ring_length(4, max_chunk=3)
    assert R == 5
    cache = RingKVCache(1, 1, 2, num_rings=2, ring_len=R)
    seq = SeqKV()
    cache.ensure_capacity(seq, 9)
    ring = seq.block_ids[0]
    assert cache.slots(seq, np.arange(5, 10)).tolist() == [ring * R + t % R for t in range(5, 10)]
    seq.num_computed = 10
    cache.rollback(seq, 8)
    assert seq.num_computed == 8 and cache.blocks_needed(10_000) == 1
    cache.release(seq)
    assert cache.num_available() == 2


def test_a_window_longer_than_every_run_is_the_plain_llama_bit_for_bit():
    """The gathered one-query attention equals the paged attention when nothing leaves the window."""
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7]]
    runs = []
    for model in (random_llama(0, vocab_size=V), sliding(window=1000)):
        rows = {}
        out = generate(model, None, prompts, sampling=SamplingParams(max_tokens=12, ignore_eos=True),
                       spec=SpecOptions("ngram", kappa=3),
                       run=RunOptions(backend="invariant", record_logits=lambda r, j, row: rows.__setitem__((r, j), row.numpy().copy())))
        runs.append((out.tokens, rows))
    (t0, r0), (t1, r1) = runs
    assert t0 == t1 and all(np.array_equal(r0[k], r1[k]) for k in r0)


def test_the_window_changes_the_logits_past_it():
    prompt = list(range(1, 20))
    rows = []
    for model in (sliding(window=1000), sliding(window=W)):
        got = {}
        generate(model, None, [prompt], sampling=SamplingParams(max_tokens=1, ignore_eos=True), spec=SpecOptions("none"),
                 run=RunOptions(backend="invariant", record_logits=lambda r, j, row: got.__setitem__(j, row.numpy().copy())))
        rows.append(got[0])
    assert np.abs(rows[0] - rows[1]).max() > 1e-2


SIZES = bitwise.Sizes(6, 40, (1, 3), (4,), 4)     # prompts 5..8 and 1, 2 tokens long: the window edge at outputs 0..7


def test_sliding_window_engine_passes_every_bitwise_row():
    got = {r.name: r for r in bitwise.run(SlidingEngine(sliding()), Context(), SIZES)}
    names = ["greedy.bitwise[sliding,invariant]", "batch.invariance[sliding,invariant]",
             "verify.width[sliding,invariant]"] + [f"rollback[sliding,invariant,j={j}]" for j in range(3)]
    for name in names:
        assert got[name].verdict == "pass", (name, got[name].detail)
    assert got["verify.width[sliding,invariant]"].n == 4 * 2


def test_a_ring_sized_for_plain_decode_fails_rollback_not_verify_width():
    got = {r.name: r for r in bitwise.run(SlidingEngine(sliding(cls=PlainDecodeRing, ring_len=W - 1)), Context(),
                                          bitwise.Sizes(4, 40, (3,), (), None))}
    assert got["verify.width[sliding,invariant]"].verdict == "pass"        # all accepted: nothing overwritten early
    for j in range(3):
        r = got[f"rollback[sliding,invariant,j={j}]"]
        assert r.verdict == "fail", r.detail
        d = r.data["drafted"]["first_divergence"]
        assert d["step"] is not None and d["step"] >= 2 and d["chunk_position"] == 0, d   # the step after a rejection


def test_a_verify_chunk_wider_than_the_ring_allows_is_refused():
    model = sliding(ring_len=W + 1)                  # exact up to chunks of 3 tokens (kappa 2)
    with pytest.raises(InputError, match="rolls back exactly up to 3"):
        generate(model, None, [[1, 2, 3]], sampling=SamplingParams(max_tokens=8, ignore_eos=True),
                 spec=SpecOptions("external", kappa=3, drafts_of=lambda rid, n, k: [1] * k),
                 run=RunOptions(backend="invariant"))


@pytest.mark.slow
def test_the_family_float32_forward_is_the_float64_law_within_1e_5():
    """The HF folder (transformers' Mistral with sliding_window) loaded by our engine: every logits row of a
    run crossing the window within 1e-5 of the float64 law (measured: ~1.2e-6); the same weights without
    the window are O(1) off (the window is applied on both sides, the same way)."""
    import torch
    from transformers import MistralForCausalLM

    from specverify.engine.sliding import load_sliding
    from specverify.models import sliding as family

    target, _ = family.pair_folders(None, vocab=16, seed=3, window=W)
    law = family.tabulated(target)
    prompt = np.random.default_rng(0).integers(0, 16, 20).tolist()
    rows = {}
    out = generate(load_sliding(target, "invariant"), None, [prompt], sampling=SamplingParams(max_tokens=12, ignore_eos=True),
                   spec=SpecOptions("none"),
                   run=RunOptions(backend="invariant", record_logits=lambda r, j, row: rows.__setitem__(j, row.numpy().astype(np.float64))))
    toks = out.tokens[0]
    gap = max(np.abs(law.logits(tuple(prompt + toks[:j])) - rows[j]).max() for j in range(12))
    assert 0 < gap < 1e-5
    hf = MistralForCausalLM.from_pretrained(str(target), dtype=torch.float64, attn_implementation="eager")
    hf.config.sliding_window = None
    with torch.no_grad():
        no_window = hf(torch.tensor([prompt])).logits[0, -1].numpy()
    assert np.abs(no_window - law.logits(tuple(prompt))).max() > 0.1


@pytest.mark.slow
def test_the_family_through_its_adapter_and_the_ring_mutant():
    from specverify.adapters.specverify_sliding import SpecverifySliding
    from specverify.zoo.our_engine import plain_decode_ring

    sizes = bitwise.Sizes(8, 40, (1, 3), (4,), 4)
    ok = {r.name: r for r in bitwise.run(SpecverifySliding(), Context(), sizes)}
    assert all(r.verdict == "pass" for r in ok.values()), [(r.name, r.detail) for r in ok.values() if r.verdict != "pass"]
    bad = {r.name: r for r in bitwise.run(SpecverifySliding(model_loader=plain_decode_ring), Context(), sizes)}
    label = "tiny-sliding(W=8),invariant"
    assert bad[f"verify.width[{label}]"].verdict == "pass"
    assert all(bad[f"rollback[{label},j={j}]"].verdict == "fail" for j in range(3))


@pytest.mark.slow
def test_the_family_run_laws_on_our_engine():
    """Runs of 3 tokens at temperature 1 with the family's draft model (kappa 2), from prompts that put the
    window's edge at output 0, 1, 2 and the ring's wrap at output 0, against the float64 law: every row
    passes at alpha 0.01 (fixed seeds; 4 rows, so a correct engine fails one with probability <= 0.04 over
    seeds; each row detects TV >= ~0.15 with probability 0.99 at n = 600), and the planted ring bug fails one."""
    from specverify.battery.window_laws import edge_prompts, run_rows
    from specverify.engine.sliding import load_sliding
    from specverify.models import sliding as family

    target, draft = family.pair_folders(None, vocab=4, seed=5, window=W)
    law = family.tabulated(target)
    prompts = edge_prompts(W, 3, ring_length(W), 4)
    assert [len(p) for p in prompts] == [6, 7, 8, ring_length(W)]
    rows = run_rows(load_sliding(target), load_sliding(draft), law, prompts, n=600, length=3, kappa=2)
    assert all(r.verdict == "pass" for r in rows), [(r.name, r.detail) for r in rows]
    assert all(r.min_detectable_tv < 0.2 for r in rows)
    # the ring sized for plain decode: the prompt of 7 (window edge at output 1) row fails (measured p ~ 1e-5,
    # below alpha / 4 too); the others stay near their law at this n
    from specverify.zoo.our_engine import plain_decode_ring
    bad = run_rows(plain_decode_ring(target), plain_decode_ring(draft), law, prompts, n=600, length=3, kappa=2)
    assert any(r.verdict == "fail" and r.p_value < 0.01 / 4 for r in bad), [(r.name, r.detail) for r in bad]
