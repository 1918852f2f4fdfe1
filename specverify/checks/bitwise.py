"""Greedy bitwise: speculative greedy decode must equal plain greedy decode token for token, and
every logits row a token was decided from must be bitwise the plain decode's row.

Runs on engines with capability "bitwise" (`adapter.bitwise(backend, full=, small=, progress=)`,
see `adapters.specverify_engine`). With the batch-invariant backend the row is exact: one differing
token id or logit byte fails it. The same harness on the default backend is the negative control:
its row passes when the harness sees the default backend's logits diverge (the problem the invariant
backend exists to fix), and warns if it sees nothing.
"""

from __future__ import annotations

from .base import FAIL, PASS, WARN, CheckResult, Timer


def _shape(r) -> str:
    return (f"{r.n_prompts} prompts x {r.max_tokens} tokens x kappa {{{','.join(map(str, r.kappas))}}} x "
            f"batch {{{','.join(r.batches)}}}")


def _divergence(r) -> str:
    d = r.first_divergence
    if d is None:
        return "none"
    run, div = d
    parts = [f"kappa={run.kappa} batch={run.batch} prompt {div.prompt}"]
    if div.first_logit_token_index is not None:
        parts.append(f"first differing logit at output {div.first_logit_token_index}, vocab {div.vocab_id}: "
                     f"{div.baseline_logit!r} vs {div.spec_logit!r} (max |diff| {div.max_abs_diff:.2g})")
    if div.first_token_index is not None:
        parts.append(f"first differing token at output {div.first_token_index}: {div.baseline_token} vs {div.spec_token}")
    else:
        parts.append("token ids identical")
    return "; ".join(parts)


def run(engine, ctx) -> list[CheckResult]:
    if "bitwise" not in getattr(engine, "capabilities", ()):
        return []
    rows = []
    full = bool(getattr(ctx, "full", False))
    ctx.say("greedy bitwise: invariant backend (speculative vs plain decode)")
    with Timer() as t:
        label, note, r = engine.bitwise("invariant", full=full, progress=ctx.say)
    tokens_same = sum(x.n_tokens_identical for x in r.runs)
    detail = (f"{label}: {r.n_identical}/{r.n_comparisons} speculative runs identical to plain decode in token ids "
              f"and every logits row ({_shape(r)})")
    if note:
        detail += f"; {note}"
    if not r.passed:
        detail += f"; first divergence: {_divergence(r)}"
    rows.append(CheckResult(f"greedy.bitwise[{label},invariant]", PASS if r.passed else FAIL, n=r.n_comparisons,
                            exact=True, seconds=t.seconds, detail=detail,
                            data={"bitwise": r.to_dict(), "model": label, "tokens_identical_runs": tokens_same}))
    ctx.say("greedy bitwise: default backend (negative control)")
    with Timer() as t:
        label, note, r = engine.bitwise("default", small=not full, progress=ctx.say)
    seen = r.n_identical < r.n_comparisons
    detail = (f"negative control, {label} on the default (not batch-invariant) backend: {r.n_identical}/{r.n_comparisons} "
              f"runs bitwise identical ({_shape(r)}); first divergence: {_divergence(r)}")
    rows.append(CheckResult(f"greedy.bitwise[{label},default:negative-control]", PASS if seen else WARN,
                            n=r.n_comparisons, exact=True, seconds=t.seconds, detail=detail,
                            data={"bitwise": r.to_dict(), "model": label, "divergence_seen": seen}))
    return rows
