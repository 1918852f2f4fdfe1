"""RNG discipline (seeded mode, exact): a request with no drafts consumes no randomness beyond its own
step, whatever its neighbours draft.

M probe requests each go through three seeded calls -- no drafts, then 2 drafts, then 3 drafts -- on
two fresh adapters. On the first adapter the zero-draft call holds only the probes (nothing in the
batch speculates); on the second the probes share it with speculating, greedy and padded neighbours
(other seeds). The probes' tokens in all three calls must be identical on both adapters: if the
zero-draft call advanced a probe's generator by an amount that depends on the batch (a row of
max_spec_len acceptance uniforms, say), its later tokens change.

This is vLLM's rule (vllm/v1/sample/rejection_sampler.py, generate_uniform_probs: "Do not generate
random numbers for requests with no draft tokens. This can be important for reproducibility.").

Budget (`--samples`): exact rows on fixed seeded calls; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.batch import PAD, VerifyBatch

from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer
from .composition import VOCAB
from ..battery.problems import drafted_request
from .reproducibility import applies, fresh, seeded_call

M = 64


def _request(rng, k, greedy=False, pad=False):
    x, p, q = drafted_request(rng, k, VOCAB, 0.6)
    if pad and k:
        x[1:] = PAD
    return (x, p, q, greedy)


def run(engine, ctx) -> list[CheckResult]:
    if not applies(engine, ctx):
        return []
    name = "rng.zero_draft"
    if ctx.factory is None:
        return [CheckResult(name, SKIP, exact=True, detail="no engine factory: fresh adapters cannot be built")]
    rng = ctx.rng("rng-discipline")
    seeds = rng.integers(1, 2**62, M)
    steps = [[_request(rng, k) for _ in range(M)] for k in (0, 2, 3)]
    neighbours = [_request(rng, 3) for _ in range(24)] + [_request(rng, 2, greedy=True) for _ in range(8)] + \
                 [_request(rng, 3, pad=True) for _ in range(8)]
    n_seeds = rng.integers(1, 2**62, len(neighbours))
    with Timer() as t:
        quiet, busy = fresh(ctx, "rng quiet"), fresh(ctx, "rng busy")
        diffs = []
        # call 1: zero drafts; alone vs among speculating neighbours
        a = seeded_call(quiet, VerifyBatch.from_requests(steps[0]), seeds, ctx, "zero-draft, quiet batch")
        order = rng.permutation(M + len(neighbours))
        allreq = steps[0] + neighbours
        allseed = np.concatenate([seeds, n_seeds])
        out = seeded_call(busy, VerifyBatch.from_requests([allreq[i] for i in order]), allseed[order], ctx,
                          "zero-draft, busy batch")
        b = np.empty_like(a)
        for pos, i in enumerate(order):
            if i < M:
                b[i] = out[pos, :a.shape[1]]
        diffs += [f"call 1 (no drafts) probe {i}: {a[i].tolist()} vs {b[i].tolist()}" for i in range(M) if (a[i] != b[i]).any()]
        for call, reqs in ((2, steps[1]), (3, steps[2])):
            batch = VerifyBatch.from_requests(reqs)
            a = seeded_call(quiet, batch, seeds, ctx, f"call {call}")
            b = seeded_call(busy, batch, seeds, ctx, f"call {call}")
            diffs += [f"call {call} probe {i}: {a[i][a[i] >= 0].tolist()} after a quiet zero-draft call, "
                      f"{b[i][b[i] >= 0].tolist()} after a busy one" for i in range(M) if (a[i] != b[i]).any()]
    if diffs:
        return [CheckResult(name, FAIL, n=3 * M, exact=True, seconds=t.seconds,
                            detail=f"{len(diffs)} probe outputs depend on what the zero-draft call's neighbours drafted; "
                                   f"first: {diffs[0]}", data={"differences": diffs[:20]})]
    return [CheckResult(name, PASS, n=3 * M, exact=True, seconds=t.seconds,
                        detail=f"{M} probes: identical tokens after a zero-draft call alone or among speculating neighbours")]
