"""Paged KV cache: allocation, rollback (a stale-KV mutant must change the logits), prefix cache
(hits, reuse gives the same result, only finalized tokens are ever committed)."""

import pytest
import torch

from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import Engine, SamplingParams
from specverify.engine.kv_cache import OutOfBlocks, PagedKVCache, SeqKV
from specverify.engine.model import random_llama
from specverify.engine.proposers import RandomProposer
from specverify.zoo.our_engine import StaleKvEngine


def test_alloc_release_evict():
    c = PagedKVCache(1, 1, 2, num_blocks=3, block_size=2)
    s = SeqKV()
    c.ensure_capacity(s, 5)
    assert len(s.block_ids) == 3 and c.num_available() == 0
    with pytest.raises(OutOfBlocks):
        c.ensure_capacity(SeqKV(), 1)
    s.num_computed = 5
    c.commit(s, [1, 2, 3, 4, 5], num_finalized=5)          # blocks [1,2] and [3,4] are full
    assert len(c.cached) == 2
    c.release(s)
    assert c.num_available() == 3 and len(c.evictable) == 2
    s2 = SeqKV()
    assert c.match_prefix(s2, [1, 2, 3, 4, 9]) == 4          # both cached blocks reused
    assert c.match_prefix(SeqKV(), [1, 2, 7, 7, 7]) == 2
    s3 = SeqKV()
    c.ensure_capacity(s3, 2)                                  # takes the free block first
    s4 = SeqKV()
    with pytest.raises(OutOfBlocks):
        c.ensure_capacity(s4, 2)


def test_commit_excludes_unfinalized_positions():
    c = PagedKVCache(1, 1, 2, num_blocks=8, block_size=4)
    s = SeqKV()
    c.ensure_capacity(s, 12)
    s.num_computed = 12                                       # a verify wrote 12 positions ...
    c.commit(s, list(range(6)), num_finalized=6)              # ... but only 6 tokens are final
    assert s.num_committed_blocks == 1 and len(c.cached) == 1


def test_rollback_only_shrinks():
    s = SeqKV(num_computed=10)
    PagedKVCache.rollback(s, 7)
    assert s.num_computed == 7
    PagedKVCache.rollback(s, 9)
    assert s.num_computed == 7


def _run(model, prompts, *, spec, engine_class=Engine, prefix_caching=True, kappa=3, temperature=0.0, bsz=None):
    rows = {}

    def rec(rid, j, row):
        rows[(rid, j)] = row.clone()
    r = generate(model, None, prompts, sampling=SamplingParams(temperature=temperature, max_tokens=24),
                 spec=SpecOptions(spec, kappa=kappa),
                 run=RunOptions(seed=5, record_logits=rec, engine_class=engine_class, prefix_caching=prefix_caching,
                                max_batch_size=bsz))
    return r, rows


PROMPTS = [[5, 9, 2, 7, 1, 3, 3, 8], [11, 4, 4, 60, 2], list(range(20, 40))]


def test_speculative_with_rollback_equals_plain_and_stale_kv_differs():
    model = random_llama(4)
    plain, plain_rows = _run(model, PROMPTS, spec="none")
    spec, spec_rows = _run(model, PROMPTS, spec="uniform")          # nearly every draft rejected
    assert spec.metrics.num_rejections > 10
    assert spec.tokens == plain.tokens
    for key, row in plain_rows.items():
        torch.testing.assert_close(spec_rows[key], row, rtol=1e-4, atol=1e-4)
    stale, stale_rows = _run(model, PROMPTS, spec="uniform", engine_class=StaleKvEngine)
    diffs = [float((stale_rows[k] - plain_rows[k]).abs().max()) for k in plain_rows if k in stale_rows]
    assert max(diffs) > 1e-2                                           # rejected K/V were read
    assert stale.tokens != plain.tokens


def test_stale_kv_changes_toy_model_outputs():
    from specverify.reference.toy import ToyModel
    toy = ToyModel(5, seed=3)
    prompts = [[1, 2]] * 40
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    good = generate(toy, None, prompts, sampling=sampling, spec=SpecOptions("uniform", kappa=3), run=RunOptions(seed=1))
    plain = generate(toy, None, prompts, sampling=sampling, spec=SpecOptions("none", kappa=0))
    bad = generate(toy, None, prompts, sampling=sampling, spec=SpecOptions("uniform", kappa=3),
                   run=RunOptions(seed=1, engine_class=StaleKvEngine))
    assert good.tokens == plain.tokens
    assert bad.tokens != plain.tokens


def test_prefix_cache_hits_and_same_result():
    model = random_llama(5)
    shared = list(range(40, 80))
    prompts = [shared + [1, 2], shared + [3], shared + [4, 5, 6]]
    eng = Engine(model, RandomProposer(model.vocab_size, "uniform"), kappa=2, max_batch_size=1, num_blocks=64,
                 block_size=4)
    for p in prompts:
        eng.add_request(p, SamplingParams(max_tokens=10))
    out = [o.token_ids for o in eng.run()]
    assert eng.cache.hits >= 2 * 40                                    # later prompts reuse the 40 shared tokens
    ref = generate(model, None, prompts, sampling=SamplingParams(max_tokens=10), spec=SpecOptions("uniform", kappa=2),
                   run=RunOptions(prefix_caching=False, max_batch_size=1))
    assert out == ref.tokens


def test_prefix_cache_never_commits_a_draft():
    """After runs full of rejected drafts, every cached block holds exactly the finalized tokens
    of some request at those positions (checked against the cache's token store)."""
    model = random_llama(6)
    eng = Engine(model, RandomProposer(model.vocab_size, "uniform", seed=2), kappa=4, max_batch_size=3,
                 num_blocks=128, block_size=4)
    prompts = [[7] * 9, list(range(9)), [3, 1, 4, 1, 5, 9, 2, 6]]
    for p in prompts:
        eng.add_request(p, SamplingParams(max_tokens=30, temperature=1.0))
    outs = eng.run()
    finals = [o.prompt_token_ids + o.token_ids for o in outs]
    assert eng.metrics.num_rejections > 10
    store = eng.cache.token_ids.numpy()
    assert eng.cache.cached
    for (parent, toks), block in eng.cache.cached.items():
        assert list(store[block * 4:(block + 1) * 4]) == list(toks)
        assert any(tuple(f[i:i + 4]) == toks for f in finals for i in range(0, len(f) - 3, 4))
