"""The verify pass and the rollback, localised: `verify.width` and `rollback[j]`, with the harness's own
drafters (`specverify.adapters.bitwise_level`: ORACLE and ADVERSARIAL), for an adapter on the bitwise
level that takes them (`BitwiseInfo.drafted`). Run by `checks.bitwise` after its baseline (plain greedy
decode at batch 1), whose tokens are the drafts.

- `verify.width[<model>,<variant>]`: the oracle drafter proposes the target's own greedy tokens, so every
  draft is accepted and every verify step is a full kappa + 1 chunk (for each of the size's kappas).
  Each emitted token's logits row must equal plain decode's, bytes and all: a verify pass that computes
  one chunk position another way (another reduction, the single-token kernel, a wrong mask) differs
  there, even when no near tie flips a token, which the whole-run `greedy.bitwise` row would need.
- `rollback[<model>,<variant>,j=<j>]`: the adversarial drafter proposes the same tokens with the one at
  chunk position j wrong, for every j < kappa (kappa the size's largest): each step accepts exactly j
  drafts and must forget the state (K/V, ring slots, recurrent state) of the rejected positions j ..
  kappa - 1; every later row must still equal plain decode's.

A first difference is reported as prompt, output index, the verify step and the position in its chunk
(from the steps the adapter reports in `GreedyResult.info[STEPS]`; "not reported" otherwise), the first
differing logit and the baseline's top-2 margin there (`bitwise.classify`). With the steps reported, the
row also says how many steps took the width the drafter forces (the oracle: kappa + 1 tokens; the
adversarial drafter: j + 1), and a verify row whose drafts were never accepted is a warning (it checked
no chunk), not a pass. The runs decode the first PROMPTS prompts (QUICK_PROMPTS at --size quick) for at
most TOKENS tokens at batch 1.

Budget: PROMPTS prompts x TOKENS tokens (the size's tokens if fewer) per run: one oracle run per kappa,
one adversarial run per j < the largest kappa; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.adapters.bitwise_level import (ADVERSARIAL, DIGESTS, ORACLE, ROWS, STEPS, GreedyRequest, Layout, Spec,
                                               check_result, digests_of)

from .base import FAIL, PASS, WARN, CheckResult, Timer
from .harness import invoke

PROMPTS = 4                  # prompts per drafted run (the first of the bitwise check's prompts)
QUICK_PROMPTS = 1            # at --size quick (the main job's size): one prompt per drafted run
TOKENS = 64                  # tokens per drafted run at most (runs must cross windows and KV blocks)


def _steps_of(info, i):
    """Prompt i's tokens emitted per step from a result's info, or None when not reported."""
    steps = (info or {}).get(STEPS)
    if steps is None or i >= len(steps):
        return None
    return [int(n) for n in steps[i]]


def locate(steps, index: int):
    """(step, position in its chunk) of output `index`, given the tokens emitted at each step (step 0
    is the prefill's), or (None, None) without steps."""
    if steps is None:
        return None, None
    start = 0
    for s, n in enumerate(steps):
        if index < start + n:
            return s, index - start
        start += n
    return None, None


def expected_width(spec: Spec) -> int:
    """Tokens a verify step with a full set of drafts emits under the drafter: kappa + 1 (oracle), j + 1."""
    return spec.kappa + 1 if spec.proposer == ORACLE else spec.wrong_at + 1


def widths(steps_per_prompt, spec: Spec) -> dict:
    """How many verify steps (every step after the prefill's but the last) took the drafter's width."""
    want = expected_width(spec)
    mids = [n for steps in steps_per_prompt if steps for n in steps[1:-1]]
    return {"verify_steps": len(mids), "at_width": sum(n == want for n in mids), "width": want,
            "widest": max(mids, default=0)}


class _Drafted:
    """One variant's drafted runs: the baseline's first prompts, their tokens as drafts."""

    def __init__(self, runner, base, ctx):
        self.runner, self.ctx = runner, ctx
        self.n = min(QUICK_PROMPTS if getattr(ctx, "size", "standard") == "quick" else PROMPTS, len(runner.prompts))
        self.L = min(TOKENS, runner.L)
        self.idx = tuple(range(self.n))
        self.base_tokens = [tuple(base[0][p][:self.L]) for p in self.idx]
        self.base_digests = None if base[1] is None else [tuple(base[1][p][:self.L]) for p in self.idx]

    def call(self, spec: Spec, logits: str):
        r = self.runner
        req = GreedyRequest(tuple(r.prompts[i] for i in self.idx), self.L, spec, Layout(1), r.variant, logits,
                            drafts=tuple(self.base_tokens))
        what = f"{r.engine.name}.decode_greedy({spec}, batch 1, variant {r.variant})"
        return check_result(invoke(r.engine, "decode_greedy", req, ctx=self.ctx, what=what), req,
                            r.info.vocab_size, what)

    def compare(self, spec: Spec) -> dict:
        """One run against the baseline: counts, widths and the first divergence (localised)."""
        with Timer() as t:
            res = self.call(spec, DIGESTS)
        digests = digests_of(res)
        tokens = [tuple(int(x) for x in row) for row in res.tokens]
        logits = digests is not None and self.base_digests is not None
        steps = [_steps_of(res.info, i) for i in range(self.n)]
        out = {"spec": str(spec), "n": self.n, "identical": 0, "logits_compared": logits, "seconds": t.seconds,
               "divergence": None, "steps_reported": all(s is not None for s in steps)}
        if out["steps_reported"]:
            out["widths"] = widths(steps, spec)
        for i in range(self.n):
            same = tokens[i] == self.base_tokens[i] and (not logits or tuple(digests[i]) == self.base_digests[i])
            out["identical"] += same
            if not same and out["divergence"] is None:
                out["divergence"] = self._divergence(spec, i, tokens[i], None if not logits else digests[i],
                                                     steps[i])
        return out

    def _divergence(self, spec, i, tokens, digests, steps) -> dict:
        from specverify.checks.bitwise import classify
        bt = self.base_tokens[i]
        tok_j = next((j for j, (x, y) in enumerate(zip(bt, tokens)) if x != y), None)
        log_j = None if digests is None else next(
            (j for j, (x, y) in enumerate(zip(self.base_digests[i], digests)) if x != y), None)
        first = min(j for j in (tok_j, log_j) if j is not None)
        step, pos = locate(steps, first)
        d = {"prompt": i, "output_index": first, "step": step, "chunk_position": pos,
             "first_token_index": tok_j, "baseline_token": None if tok_j is None else bt[tok_j],
             "other_token": None if tok_j is None else tokens[tok_j], "kind": "unknown"}
        b_rows = self.runner.rows_of(i, Spec(), Layout(1))
        o_rows = self.call(spec, ROWS).logits
        if b_rows is None or o_rows is None:
            return d
        b, o = np.asarray(b_rows[first], np.float64), np.asarray(o_rows[i][first], np.float64)
        diff = np.flatnonzero(np.asarray(b_rows[first]) != np.asarray(o_rows[i][first]))
        if diff.size:
            v = int(diff[0])
            d.update(vocab_id=v, baseline_logit=float(b[v]), other_logit=float(o[v]),
                     max_abs_diff=float(np.abs(b - o).max()))
        k = first if tok_j is None else tok_j
        d["top2_margin"], d["relative_margin"], d["kind"] = classify(b_rows[k], o_rows[i][k], tok_j is not None)
        return d


def _text(d: dict) -> str:
    where = (f"verify step {d['step']}, chunk position {d['chunk_position']}" if d["step"] is not None
             else "step not reported")
    parts = [f"prompt {d['prompt']} output {d['output_index']} ({where})"]
    if d.get("vocab_id") is not None:
        parts.append(f"first differing logit vocab {d['vocab_id']}: {d['baseline_logit']!r} vs {d['other_logit']!r} "
                     f"(max |diff| {d['max_abs_diff']:.2g})")
    if d["first_token_index"] is not None:
        parts.append(f"first differing token at output {d['first_token_index']}: {d['baseline_token']} vs "
                     f"{d['other_token']}")
    else:
        parts.append("token ids identical")
    if d.get("top2_margin") is not None:
        parts.append(f"top-2 margin there {d['top2_margin']:.3g} (relative {d['relative_margin']:.2g})")
    parts.append(f"kind: {d['kind']}")
    return "; ".join(parts)


def _row(name, runs, drafted, info, *, control, what, seconds) -> CheckResult:
    n = sum(r["n"] for r in runs)
    same = sum(r["identical"] for r in runs)
    logits = all(r["logits_compared"] for r in runs)
    first = next((r for r in runs if r["divergence"] is not None), None)
    compared = "token ids and every logits row" if logits else "token ids only (the adapter returned no logits rows)"
    shape = f"{drafted.n} prompts x {drafted.L} tokens, {', '.join(r['spec'] for r in runs)}, batch 1"
    data = {"drafted": {"runs": runs, "n_prompts": drafted.n, "max_tokens": drafted.L, "logits_compared": logits,
                        "first_divergence": None if first is None else first["divergence"]}, "model": info.model}
    div = "none" if first is None else f"{first['spec']}: {_text(first['divergence'])}"
    if control:
        detail = (f"negative control, {info.model} variant {control}: {same}/{n} {what} identical to plain decode "
                  f"({shape}); first divergence: {div}")
        return CheckResult(name, PASS if same < n else WARN, n=n, exact=True, seconds=seconds, detail=detail, data=data)
    detail = f"{info.model}: {same}/{n} {what} identical to plain decode at batch 1 in {compared} ({shape})"
    if all(r["steps_reported"] for r in runs):
        at = sum(r["widths"]["at_width"] for r in runs)
        total = sum(r["widths"]["verify_steps"] for r in runs)
        detail += f"; {at}/{total} verify steps at the drafter's width"
    else:
        detail += "; steps not reported (widths unchecked, differences not placed in a chunk)"
    if first is not None:
        detail += f"; first divergence: {div}"
    verdict = PASS if n and same == n else FAIL
    unexercised = [r["spec"] for r in runs if r.get("widths") and r["spec"].startswith(ORACLE)
                   and r["widths"]["widest"] < 2]
    if verdict == PASS and unexercised:
        verdict = WARN
        detail += f"; no draft accepted in {', '.join(unexercised)}: no verify chunk checked"
    if info.note:
        detail += f"; {info.note}"
    return CheckResult(name, verdict, n=n, exact=True, seconds=seconds, detail=detail, data=data)


def rows(runner, base, info, label_of, *, kappas, control=None) -> list[CheckResult]:
    """The drafted rows of one variant: `runner` (`bitwise._Runner`) and `base` (the baseline's tokens and
    digests per prompt); `label_of(extra)` names a row; `kappas`: the oracle's. A negative control (its
    variant name in `control`) runs the oracle at the largest kappa only."""
    drafted = _Drafted(runner, base, runner.ctx)
    out = []
    if ORACLE in info.drafted:
        ks = [max(kappas)] if control else sorted(kappas)
        runs = [drafted.compare(Spec(ORACLE, k)) for k in ks]
        out.append(_row(f"verify.width[{label_of(None)}]", runs, drafted, info, control=control,
                        what="oracle runs", seconds=sum(r["seconds"] for r in runs)))
    if ADVERSARIAL in info.drafted and not control:
        k = max(kappas)
        for j in range(k):
            runs = [drafted.compare(Spec(ADVERSARIAL, k, wrong_at=j))]
            out.append(_row(f"rollback[{label_of(f'j={j}')}]", runs, drafted, info, control=None,
                            what=f"adversarial runs (drafts wrong at chunk position {j})",
                            seconds=runs[0]["seconds"]))
    return out
