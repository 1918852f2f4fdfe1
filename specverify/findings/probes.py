"""Engine-specific probes that the general battery does not pose, each aimed at one suspected bug.

Every probe returns `CheckResult` rows (exact, or a chi-squared with its p-value and power) and is
run by `specverify.findings` after the battery. Names start with `probe.`.

    residual_zero      p <= q everywhere with p(x) < q(x) at the drafted x (a draft row whose float32
                       softmax sums to 1 + 2**-24, the target's exactly 1): a coin in [p(x)/q(x), 1)
                       rejects, and max(0, p - q) is 0 everywhere. The exact rule still must not emit
                       a token of probability 0 (the reference falls back to p). Exact.
    padded_recovered   a padded draft (-1) with draft_probs given: nothing was proposed, so the token
                       emitted there must be drawn from p (the reference: draw(p)); vLLM's recovered
                       kernel ignores the -1 and draws from max(0, p - q). Chi-squared of the emitted
                       token against p, n = PADDED_N.
    tree_greedy        random draft trees against the greedy tree walk (accept the first child whose
                       token is the target's argmax at its parent; else emit the argmax). Exact.
    assisted_law       transformers' assisted generation (do_sample) on tiny Llamas: chi-squared of the
                       L-token sequences against the target's exact law prod p (float64).
    identity_draft     the same with the target as its own assistant at T = 0.7: every draft must be
                       accepted; exact on the counts (plus the control at T = 1).
"""

from __future__ import annotations

import numpy as np

from specverify import stats
from specverify.battery.base import FAIL, PASS, CheckResult, Timer
from specverify.reference import rules
from specverify.reference.batch import PAD, Coins, VerifyBatch

# residual_zero rows (V = 4): zeros at both ends, where the fallbacks of vLLM (token 0: argmax of an
# all-zero score row) and SGLang (token V - 1: CDF walk finds nothing) land
RZ_P = np.array([0.0, 0.5, 0.5, 0.0])
RZ_Q = np.array([0.0, 0.5 + 2.0**-24, 0.5, 0.0])      # float32-exact; sums to 1 + 6e-8
RZ_COINS = {"1-2^-24": 1.0 - 2.0**-24, "1-2^-53": 1.0 - 2.0**-53}

# padded_recovered rows (V = 4): the residual max(0, p - q) = [0, .15, .15, .15] never emits token 0,
# which p gives 1/4
PAD_P = np.array([0.25, 0.25, 0.25, 0.25])
PAD_Q = np.array([0.7, 0.1, 0.1, 0.1])
PADDED_N = 2000


def residual_zero(engine, method: str = "verify") -> list[CheckResult]:
    rows = []
    rule = rules.of_method(method).name
    for label, c in RZ_COINS.items():
        with Timer() as t:
            reqs = [(np.array([1]), np.vstack([RZ_P, RZ_P]), RZ_Q[None], False),
                    (np.array([1, 2]), np.vstack([RZ_P, RZ_P, RZ_P]), np.vstack([RZ_Q, RZ_Q]), False)]
            batch = VerifyBatch.from_requests(reqs)
            coins = Coins(np.full(3, c), np.full(2, 0.5))
            try:
                out = np.asarray(getattr(engine, method)(batch, coins))
                err = None
            except Exception as exc:  # noqa: BLE001 - the engine's own error is the finding
                out, err = None, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        name = f"probe.residual_zero[{rule}, coin={label}]" if rule == "block" else f"probe.residual_zero[coin={label}]"
        data = {"p": RZ_P.tolist(), "q": RZ_Q.tolist(), "coin": c, "drafts": [[1], [1, 2]]}
        if err is not None:
            rows.append(CheckResult(name, FAIL, n=2, exact=True, seconds=t.seconds, data={**data, "error": err},
                                    detail=f"the engine raised on an all-zero residual: {err}"))
            continue
        bad = [(r, int(tok)) for r, row in enumerate(out) for tok in row[row != PAD] if RZ_P[tok] == 0.0]
        data["emitted"] = out.tolist()
        rows.append(CheckResult(name, FAIL if bad else PASS, n=2, exact=True, seconds=t.seconds, data=data,
                                detail=(f"all-zero residual: emitted token(s) {sorted({b[1] for b in bad})} of target "
                                        f"probability 0 (rows {out.tolist()})") if bad else
                                       f"all-zero residual handled: emitted {out.tolist()}"))
    return rows


def residual_zero_block(engine) -> list[CheckResult]:
    return residual_zero(engine, method="verify_block")


def padded_recovered(engine, rng: np.random.Generator, n: int = PADDED_N) -> list[CheckResult]:
    rows = []
    for with_q in (True, False):
        with Timer() as t:
            batch = VerifyBatch(draft_token_ids=np.full(n, PAD), num_draft_tokens=np.ones(n, np.int64),
                                target_probs=np.tile(PAD_P, (2 * n, 1)),
                                draft_probs=np.tile(PAD_Q, (n, 1)) if with_q else None)
            out = np.asarray(engine.verify(batch, Coins.random(batch, rng)))
        first = out[:, 0]
        name = f"probe.padded_recovered[{'draft_probs' if with_q else 'no draft_probs'}]"
        accepted = int((first == PAD).sum())
        if accepted:            # the placeholder itself came out as the first token: it was accepted
            rows.append(CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                                    detail=f"a padded (-1) draft was accepted: -1 emitted as the first token in "
                                           f"{accepted} of {n} requests (first rows {out[:3].tolist()})",
                                    data={"accepted": accepted, "first_rows": out[:3].tolist(),
                                          "p": PAD_P.tolist(), "q": PAD_Q.tolist() if with_q else None}))
            continue
        counts = np.bincount(first, minlength=PAD_P.size)[:PAD_P.size]
        res = stats.pearson(counts, PAD_P, min_expected=10.0)
        rows.append(CheckResult(name, PASS, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n,
                                seconds=t.seconds, detail=f"token at a padded (-1) draft vs p: counts {counts.tolist()}, "
                                                          f"expected {(PAD_P * n).tolist()}",
                                data={"observed": counts.tolist(), "expected": (PAD_P * n).tolist(),
                                      "p": PAD_P.tolist(), "q": PAD_Q.tolist() if with_q else None}))
    return rows


def greedy_tree_walk(tokens, parents, target_predict) -> list[int]:
    """The exact greedy tree rule for one tree (node 0 the root)."""
    out, node = [], 0
    while True:
        a = int(target_predict[node])
        kids = [j for j in range(1, len(tokens)) if parents[j] == node]
        match = [j for j in kids if tokens[j] == a]
        out.append(a)
        if not match:
            return out
        node = match[0]


def random_trees(rng, b: int, branching=(3, 2, 1), vocab: int = 4):
    """b trees of one shape; tokens drawn so that matches, sibling matches and misses all occur."""
    parents, frontier = [-1], [0]
    for k in branching:
        nxt = []
        for par in frontier:
            for _ in range(k):
                parents.append(par)
                nxt.append(len(parents) - 1)
        frontier = nxt
    n = len(parents)
    tokens = rng.integers(0, vocab, (b, n))
    target_predict = rng.integers(0, vocab, (b, n))
    return tokens, np.broadcast_to(np.array(parents), (b, n)).copy(), target_predict, len(branching)


def tree_greedy(engine, rng: np.random.Generator, b: int = 3000) -> list[CheckResult]:
    with Timer() as t:
        tokens, parents, predict, depth = random_trees(rng, b)
        out = engine.verify_trees(tokens, parents, predict, depth)
    want = np.full_like(out, PAD)
    for r in range(b):
        w = greedy_tree_walk(tokens[r], parents[r], predict[r])
        want[r, :len(w)] = w
    bad = np.flatnonzero((out != want).any(axis=1))
    return [CheckResult("probe.tree_greedy[branching=3,2,1]", FAIL if bad.size else PASS, n=b, exact=True,
                        seconds=t.seconds,
                        detail=(f"{bad.size} of {b} trees differ from the greedy tree walk" if bad.size else
                                f"all {b} random trees equal the greedy tree walk"),
                        data={"first_bad": int(bad[0]) if bad.size else None})]


def assisted_law(n: int, seed: int = 0, vocab: int = 6, length: int = 3, kappa: int = 2,
                 temperature: float = 0.7) -> list[CheckResult]:
    from specverify.findings import hf_assisted as hf
    with Timer() as t:
        target, assistant = hf.tiny_llama(seed, vocab), hf.tiny_llama(seed + 1, vocab)
        seqs, probs = hf.exact_law(target, (1, 2), length, temperature)
        runs = hf.generate(target, assistant, (1, 2), length, kappa, temperature, n, seed=1000)
    codes = runs.tokens @ (vocab ** np.arange(length)[::-1])
    counts = np.bincount(codes, minlength=vocab ** length)
    res = stats.pearson(counts, probs, min_expected=10.0)
    alpha = runs.accepted / max(runs.drafted, 1)
    return [CheckResult(f"probe.assisted_law[V={vocab},L={length},kappa={kappa},T={temperature}]", PASS,
                        statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n, seconds=t.seconds,
                        detail=f"{n} assisted runs vs prod p (float64): {res.cells} cells; acceptance "
                               f"{runs.accepted}/{runs.drafted} = {alpha:.3f}",
                        data={"accepted": runs.accepted, "drafted": runs.drafted})]


def identity_draft(n: int, seed: int = 0, vocab: int = 6, length: int = 3, kappa: int = 2,
                   temperatures=(0.7, 1.0)) -> list[CheckResult]:
    from specverify.findings import hf_assisted as hf
    rows = []
    target, assistant = hf.identity_pair(seed, vocab)
    for temperature in temperatures:
        with Timer() as t:
            runs = hf.generate(target, assistant, (1, 2), length, kappa, temperature, n, seed=2000)
        ok = runs.accepted == runs.drafted
        power = None if not runs.drafted else float(1.0 - 0.01 ** (1.0 / runs.drafted))
        rows.append(CheckResult(f"probe.identity_draft[T={temperature}]", PASS if ok else FAIL, n=runs.drafted,
                                exact=True, seconds=t.seconds, min_detectable_tv=power,
                                detail=f"assistant = copy of the target: accepted {runs.accepted} of {runs.drafted} "
                                       f"drafts (exact rule with identical transforms: all)",
                                data={"accepted": runs.accepted, "drafted": runs.drafted, "temperature": temperature}))
    return rows


# two logit rows 1-2 ulp apart whose float32 softmaxes satisfy q >= p everywhere, q > p at token 0
# (found by search; the target and the same model as its own assistant under another batch shape)
RZL_TARGET = [0.8395664095878601, 1.0999702215194702, -0.08768881112337112]
RZL_DRAFT = [0.8395665884017944, 1.0999702215194702, -0.08768880367279053]


def residual_zero_logits(engine) -> list[CheckResult]:
    """transformers takes logits and normalises both rows itself: the all-zero residual from logits."""
    torch = engine.torch
    new_logits = torch.tensor([RZL_TARGET, RZL_TARGET])[None]
    cand = torch.tensor(RZL_DRAFT)[None, None]
    p = new_logits.softmax(-1)[0, 0].double().numpy()
    with Timer() as t:
        engine._accept, engine._final = np.array([1.0 - 2.0**-24]), 0.5
        try:
            with engine.injected():
                tokens, _ = engine.utils._speculative_sampling(torch.tensor([[0]]), cand, 1, new_logits)
            err, out = None, tokens.reshape(-1).tolist()
        except Exception as exc:  # noqa: BLE001 - the engine's own error is the finding
            err, out = f"{type(exc).__name__}: {str(exc).splitlines()[0]}", None
    name = "probe.residual_zero_logits[coin=1-2^-24]"
    data = {"target_logits": RZL_TARGET, "draft_logits": RZL_DRAFT, "emitted": out, "error": err}
    if err:
        return [CheckResult(name, FAIL, n=1, exact=True, seconds=t.seconds, data=data,
                            detail=f"all-zero residual (float32 softmaxes, q >= p): the engine raised {err}")]
    bad = [x for x in out if p[x] == 0]
    return [CheckResult(name, FAIL if bad else PASS, n=1, exact=True, seconds=t.seconds, data=data,
                        detail=f"all-zero residual: emitted {out}")]
