"""Multi-step joint law: whole speculative runs of L tokens on toy models, against the target's exact
autoregressive law prod_i p(x_i | x_<i) (`reference.laws.target_law`), by Pearson chi-squared over
the V^L sequences (impossible sequences fail exactly).

Two ways to get runs:
- engine level (capability "engine"): the adapter's own `generate(target, draft, prompt, kappa,
  transform, seed, n, length)`, a black box (rows `engine.*`);
- sampler level (capability "chain"): the harness is the engine (`reference.toy_engine.SpecEngine`:
  draft, score, commit) and every verify step goes through the adapter's `verify` (rows `chain.*`).

Catches what one step cannot: the KV cache keeping rejected drafts (stale-kv), a draft handed to the
verifier with the wrong q (greedy drafts verified with a soft q), keeping the tail after a rejection,
a bonus token from the wrong row -- anything that makes a later step condition on a prefix that did
not happen. `runs_greedy` (temperature 0) must reproduce the target's greedy path token for token.

Budget (`--samples`): samples whole runs per level (runs_greedy: 256 runs, fixed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.reference import laws
from specverify.reference.batch import Coins
from specverify.reference.toy import ToyModel
from specverify.reference.toy_engine import SpecEngine
from specverify.reference.transforms import Transform

from ..battery import harness
from ..battery.base import FAIL, PASS, CheckResult, Timer
from .joint import sequence_gof


@dataclass(frozen=True)
class ToySetup:
    """The toy target/draft pair and run shape every run check uses."""

    vocab: int = 4
    kappa: int = 2
    length: int = 4
    prompt: tuple = (1,)
    scale: float = 0.7
    zero_frac: float = 0.2

    def models(self, ctx):
        seed = int(ctx.rng("toy-models").integers(1, 2**31))
        target = ToyModel(self.vocab, seed, scale=self.scale, zero_frac=self.zero_frac)
        return target, target.draft(seed + 1, noise=1.0)


SETUP = ToySetup()


def target_law(target, transform: Transform, setup: ToySetup = SETUP, length: int | None = None,
               ctx=None) -> laws.SequenceLaw:
    """The exact law of runs of the transformed target (memoised in the audit's state when `ctx` is given)."""
    def build():
        return laws.target_law(laws.Transformed(target, transform), setup.prompt, length or setup.length)
    if ctx is None:
        return build()
    return ctx.state.shared.law(("runs", harness.law_key(target), transform, setup.prompt, length or setup.length), build)


def levels(engine) -> list[str]:
    """'engine' if the adapter generates itself, 'chain' if the harness can drive its sampler."""
    caps = set(getattr(engine, "capabilities", ()))
    out = []
    if "engine" in caps and hasattr(engine, "generate"):
        out.append("engine")
    if "chain" in caps and hasattr(engine, "verify"):
        out.append("chain")
    return out


def chunked_verify(engine, ctx, what: str):
    """verify(batch, coins) for the driver: the adapter's verify in CHUNK-request pieces, timed out."""
    def verify(batch, coins):
        if batch.batch_size <= harness.CHUNK:
            return harness.verified(engine, "verify", batch, coins, ctx, what)
        outs = []
        k = batch.num_draft_tokens
        d0, t0 = batch.draft_start, batch.target_row_start
        for s in range(0, batch.batch_size, harness.CHUNK):
            e = min(s + harness.CHUNK, batch.batch_size)
            d1 = int(d0[e - 1] + k[e - 1])
            t1 = int(t0[e - 1] + k[e - 1] + 1)
            sub = harness.trusted_batch(batch.draft_token_ids[d0[s]:d1], k[s:e], batch.target_probs[t0[s]:t1],
                                        None if batch.draft_probs is None else batch.draft_probs[d0[s]:d1], batch.greedy[s:e])
            outs.append(harness.verified(engine, "verify", sub, Coins(coins.accept[d0[s]:d1], coins.final[s:e]), ctx, what))
        return np.concatenate(outs)
    return verify


def generate(engine, level: str, ctx, what: str, **kw):
    """(tokens [n, length], info) from the adapter (engine level) or the harness-driven sampler."""
    if level == "engine":
        if getattr(engine, "models", "toy") == "torch":        # the adapter runs torch modules
            from specverify.reference.torch_toy import as_torch
            same = kw["draft"] is kw["target"]
            kw["target"] = as_torch(kw["target"])
            kw["draft"] = kw["target"] if same else as_torch(kw["draft"])
        return harness.generated(engine, ctx, what, **kw)
    driver = SpecEngine(verify=chunked_verify(engine, ctx, what))
    return driver.generate(**kw)


def joint_row(engine, level, ctx, name: str, transform: Transform, n: int, seed_key: str) -> CheckResult:
    target, draft = harness.models(engine, SETUP, ctx)
    seed = int(ctx.draws("runs", seed_key, level).integers(2**31))
    with Timer() as t:
        tokens, _ = generate(engine, level, ctx, name, target=target, draft=draft, prompt=SETUP.prompt,
                             kappa=SETUP.kappa, transform=transform, seed=seed, n=n, length=SETUP.length)
    return sequence_gof(name, tokens, target_law(target, transform, ctx=ctx), t.seconds, ctx)


def greedy_row(engine, level, ctx, n: int = 256) -> CheckResult:
    target, draft = harness.models(engine, SETUP, ctx)
    name = f"{level}.runs_greedy[toy V={SETUP.vocab} L={SETUP.length} kappa={SETUP.kappa}]"
    with Timer() as t:
        tokens, _ = generate(engine, level, ctx, name, target=target, draft=draft, prompt=SETUP.prompt,
                             kappa=SETUP.kappa, transform=Transform(temperature=0.0), seed=0, n=n, length=SETUP.length)
    path = []
    for _ in range(SETUP.length):
        path.append(int(np.argmax(target.probs(SETUP.prompt + tuple(path)))))
    bad = np.flatnonzero((tokens != np.array(path)[None, :]).any(axis=1))
    if bad.size:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                           detail=f"{bad.size} of {n} greedy runs differ from the target's greedy path {path}; "
                                  f"first: {tokens[bad[0]].tolist()}")
    return CheckResult(name, PASS, n=n, exact=True, seconds=t.seconds,
                       detail=f"all {n} runs equal the target's greedy path {path}")


def run(engine, ctx) -> list[CheckResult]:
    rows = []
    caps = set(getattr(engine, "capabilities", ()))
    for level in levels(engine):
        name = f"{level}.runs[toy V={SETUP.vocab} L={SETUP.length} kappa={SETUP.kappa}]"
        rows.append(joint_row(engine, level, ctx, name, Transform(), ctx.samples, "joint"))
        if level == "engine" or "greedy" in caps:
            rows.append(greedy_row(engine, level, ctx))
    return rows
