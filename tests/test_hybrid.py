"""The hybrid recurrent model in our engine (`engine.hybrid`: window attention + a per-channel linear
recurrence, checkpointed and rolled back exactly) and the state mutants of the zoo (`zoo.state`, 38-41):
the exact sliding and hybrid adapters pass `verify.width` and every `rollback[j]`; each mutant fails the
rows its bug reaches and passes the others (the signature that localises it)."""

import numpy as np
import pytest

from specverify.adapters.specverify_engine import backend_available
from specverify.audit import Context
from specverify.checks import bitwise
from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.engine.hybrid import HybridCache, random_hybrid
from specverify.engine.kv_cache import SeqKV
from specverify.engine.sliding import MAX_CHUNK
from specverify.errors import InputError
from specverify.zoo import TARGETS, make
from specverify.zoo.state import HybridBitwise, SlidingBitwise

pytestmark = pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")

SIZES = bitwise.Sizes(4, 32, (3,), (), None)      # drafted rows: 1 prompt at quick, here 4; kappa 3 -> j = 0, 1, 2


def rows_of(adapter, sizes=SIZES):
    return {r.name: r for r in bitwise.run(adapter, Context(), sizes)}


def drafted(got, label):
    width = got[f"verify.width[{label},invariant]"]
    back = [got[f"rollback[{label},invariant,j={j}]"] for j in range(3)]
    return width, back


def logits_of(model, prompt, n, spec=SpecOptions("none")):
    rows = {}
    out = generate(model, None, [prompt], sampling=SamplingParams(max_tokens=n, ignore_eos=True), spec=spec,
                   run=RunOptions(backend="invariant", record_logits=lambda r, j, row: rows.__setitem__(j, row.numpy().copy())))
    return out.tokens[0], rows


def test_the_checkpoints_restore_the_last_accepted_position():
    cache = HybridCache(1, 1, 2, num_rings=2, ring_len=8, dim=3)
    seq = SeqKV()
    cache.ensure_capacity(seq, 4)
    ring = seq.block_ids[0]
    for t in range(6):                                   # the state after position t: t + 1 in every channel
        cache.ckpt[:, ring, t % MAX_CHUNK] = float(t + 1)
    cache.state[:, ring] = 6.0
    seq.num_computed = 6
    cache.rollback(seq, 4)                               # positions 4, 5 rejected: back to the state after 3
    assert seq.num_computed == 4 and cache.state[0, ring].tolist() == [4.0, 4.0, 4.0]
    cache.rollback(seq, 4)                               # nothing rejected: unchanged
    assert cache.state[0, ring].tolist() == [4.0, 4.0, 4.0]
    seq.num_computed = 4 + MAX_CHUNK
    with pytest.raises(InputError, match="no checkpoint"):
        cache.rollback(seq, 4)


def test_the_recurrence_carries_information_across_the_window():
    """Tokens that left the attention's reach (3 layers of window 4: 9 positions back) still change the
    logits through the recurrent state (so a stale state is visible), and without the recurrence (g = 0)
    they do not."""
    tail = list(range(2, 14))                            # the first token is 12 positions back from the last
    model = random_hybrid(0, window=4, backend="invariant")
    _, a = logits_of(model, [1] + tail, 1)
    _, b = logits_of(model, [90] + tail, 1)
    assert np.abs(a[0] - b[0]).max() > 1e-3
    flat = random_hybrid(0, window=4, backend="invariant")
    flat.rec = [(a_, w, 0.0 * g) for a_, w, g in flat.rec]
    _, c = logits_of(flat, [1] + tail, 1)
    _, d = logits_of(flat, [90] + tail, 1)
    assert np.array_equal(c[0], d[0])


def test_a_verify_chunk_gives_the_decode_steps_bits():
    """Prompt lookup on a repetitive prompt: every emitted row of the speculative run equals plain decode's."""
    model = random_hybrid(0, backend="invariant")
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7]
    t0, r0 = logits_of(model, prompt, 24)
    t1, r1 = logits_of(model, prompt, 24, SpecOptions("ngram", kappa=4))
    assert t0 == t1 and all(np.array_equal(r0[j], r1[j]) for j in r0)


@pytest.mark.parametrize("adapter,label", [(SlidingBitwise, "random-sliding(W=8)"), (HybridBitwise, "random-hybrid(W=8)")])
def test_the_exact_state_adapters_pass_verify_width_and_every_rollback(adapter, label):
    width, back = drafted(rows_of(adapter()), label)
    assert width.verdict == "pass" and "verify steps at the drafter's width" in width.detail, width.detail
    at = width.data["drafted"]["runs"][0]["widths"]
    assert at["at_width"] > 0 and at["widest"] == 4                    # full kappa + 1 chunks were checked
    assert all(r.verdict == "pass" for r in back), [r.detail for r in back]


# name -> (label, verify.width verdict, rollback[j] verdicts for j = 0, 1, 2)
SIGNATURES = {
    "ring-slot-overwritten": ("random-sliding(W=8)", "pass", ("fail", "fail", "fail")),
    "verify-chunk-single-token-path": ("random-sliding(W=8)", "fail", ("pass", "fail", "fail")),
    "recurrent-state-not-rolled-back": ("random-hybrid(W=8)", "pass", ("fail", "fail", "fail")),
    "state-from-first-checkpoint": ("random-hybrid(W=8)", "pass", ("pass", "fail", "fail")),
}


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_each_state_mutant_fails_the_rows_its_bug_reaches(name):
    label, width_verdict, back_verdicts = SIGNATURES[name]
    assert TARGETS[name] == ("bitwise",)
    width, back = drafted(rows_of(make(name)), label)
    assert width.verdict == width_verdict, width.detail
    assert tuple(r.verdict for r in back) == back_verdicts, [r.detail for r in back]
    first = next(r for r in [width, *back] if r.verdict == "fail")
    d = first.data["drafted"]["first_divergence"]
    assert d["step"] is not None and d["chunk_position"] is not None        # localised: step and chunk position


@pytest.mark.slow
def test_the_hybrid_family_float32_forward_is_the_float64_law_within_1e_5():
    """The LFM2 folder (`models.hybrid`) in float32 through transformers' cached decode (conv state + KV
    cache, one token a step) against the float64 law of the whole prefix: within 1e-5 in every row
    (measured ~1e-6); zeroing the short convolutions moves the logits O(0.1), so the state matters."""
    import torch

    from specverify.models import hybrid

    target, draft = hybrid.pair_folders(None, vocab=16, seed=3)
    assert hybrid.params_of(draft)["draft_of"] == str(target.resolve())
    law = hybrid.tabulated(target)
    model = hybrid.load(target)
    seq = np.random.default_rng(0).integers(0, 16, 20).tolist()
    gap, cache = 0.0, None
    with torch.no_grad():
        for t in range(len(seq)):
            out = model(torch.tensor([[seq[t]]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            gap = max(gap, float(np.abs(out.logits[0, -1].double().numpy() - law.logits(tuple(seq[:t + 1]))).max()))
    assert 0 < gap < 1e-5
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer, "conv"):
                layer.conv.conv.weight.zero_()
        flat = model(torch.tensor([seq])).logits[0, -1].double().numpy()
    assert np.abs(flat - law.logits(tuple(seq))).max() > 0.1
    with pytest.raises(InputError, match="not a folder written by models.hybrid.build"):
        hybrid.params_of(target.parent)


@pytest.mark.slow
def test_transformers_teacher_forced_rows_on_the_hybrid_family_and_their_negative_control():
    """`findings.state_families` on transformers' LFM2: the verify chunk and every rollback[j] agree with
    plain decode within TOL, and the same rows without the rollback fail (their control rows pass by
    differing), so the rows can see a state left unrolled."""
    from specverify.findings import state_families as sf

    eng = sf.HF()
    target, _ = sf.family_folders("hybrid", sf.VOCAB)
    model = eng.load("hybrid", target)
    prompts = sf.greedy_prompts(sf.VOCAB)[:1]
    rows = sf.teacher_forced_rows(eng, "hybrid", model, prompts, "t,hybrid")
    assert [r.verdict for r in rows] == ["pass"] * (1 + sf.KAPPA), [r.detail for r in rows]
    assert all(r.data["max_abs"] < 1e-5 for r in rows)
    control = sf.teacher_forced_rows(eng, "hybrid", model, prompts, "t,hybrid", control=True)
    assert len(control) == sf.KAPPA and all(r.verdict == "pass" and r.data["max_abs"] > 0.1 for r in control)
