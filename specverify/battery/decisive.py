"""Decisive audits (`--stop decisive`): every statistical row is sampled in rounds until its evidence
decides it, and an audit may end at its first failing row (`--fail-fast`).

Rounds. Round r runs the checks that still have undecided rows with `ctx.samples` = n_r =
min(cap, FIRST_ROUND * 2**r) (cap: `--samples`) and fresh draws (`Context.round` salts the draw seeds;
problems, laws and fixed inputs stay those of round 0). A check whose budget does not scale with
`--samples` (`checks.Check.scales` False: exact rows, real-vocabulary rows) runs once, in round 0.

Evidence. Each statistical row keeps one e-process over the draws of all its rounds
(`specverify.stats.sequential`):

    multinomial   a row that tabulates observed against expected counts of its cells (the marginal,
                  joint, whole-run, processor and length-law rows): Dirichlet-multinomial mixture on
                  the pooled counts
    rate          a row that counts successes against an exact rate (acceptance: accepted vs 1 - TV;
                  far tail: hits vs the tail mass): beta-binomial mixture
    p-value       any other statistical row: its fixed-n p-value of each round, at a level spent per
                  round (alpha_row / 2**(r + 1) at round r, so the rounds together spend alpha_row)

Family-wise control. The audit's alpha is split equally over the C checks it runs and, within a check,
over the m_c rows its round 0 produced: alpha_row = alpha / (C m_c). An e-process row fails the first
time its e-value reaches 1 / alpha_row (Ville's inequality: probability <= alpha_row under the exact
law, at whatever round it stops); summed over rows the probability that an exact engine fails any row
is <= alpha (Bonferroni; the rows may stop at different rounds). A row name that first appears after
round 0 is decided by its exact part only.

Decisions (`row.data["sequential"]["decision"]`):

    REJECTED      the e-process crossed 1 / alpha_row (or a p-value row its round's level): FAIL
    POWERED       not rejected, and the smallest TV it rejects with probability `ctx.power` at its pooled
                  n is <= power_tv: PASS, stating that TV
    BUDGET        the cap was reached first: PASS but inconclusive, with the TV it reached; the audit lists
                  these rows under `not_covered` (never a silent pass)
    STOPPED       --fail-fast ended the audit before this row decided: SKIP, listed under `not_covered`

Exact rows decide on their own in the round that produced them (an impossible token fails in any round).

A check whose budget does not follow `--samples` may still stop its own draws early, in round 0: it is
given its share of alpha (`Context.check_level` = alpha / C), builds the same e-process its row's track
will (level alpha / (C m_c), mixture tuned for its planned n, stated as `data["n_target"]`) and stops
drawing when that crosses its threshold; the track then rejects the row at the n drawn (`far_tail`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from specverify import stats
from specverify.verdicts import FAIL, PASS, SKIP

FIRST_ROUND = 1000          # ctx.samples in round 0; doubled each round up to the cap (--samples)
STOPPED = "STOPPED"         # decision of a row that --fail-fast left undecided


@dataclass
class _Track:
    """One statistical row followed across rounds."""

    check: str
    level: float                    # alpha_row: its share of the audit's alpha
    kind: str                       # "multinomial", "rate" or "p-value"
    law: np.ndarray | None = None   # exact cell probabilities (multinomial) or (p0,) (rate)
    process: object = None          # the e-process (None for p-value rows)
    n: int = 0                      # pooled observations
    looks: int = 0
    p_spent: float = 0.0            # p-value rows: the level spent so far
    min_tv: float = math.inf
    decision: str | None = None
    row: object = None              # the latest CheckResult of this row
    result: object = None           # the latest EProcessResult


def _evidence(row):
    """("multinomial", counts, law) or ("rate", successes, trials, p0) from what a row recorded, or None."""
    data = row.data or {}
    if "observed" in data and "expected" in data and len(data["observed"]) == len(data["expected"]):
        counts = np.asarray(data["observed"], dtype=np.int64)
        expected = np.asarray(data["expected"], dtype=np.float64)
        total = expected.sum()
        if counts.size >= 2 and total > 0:
            return ("multinomial", counts, expected / total)
    if "accepted" in data and "alpha" in data:
        return ("rate", int(data["accepted"]), int(row.n), float(data["alpha"]))
    if "tail_hits" in data and "tail_mass" in data:
        return ("rate", int(data["tail_hits"]), int(row.n), float(data["tail_mass"]))
    return None


def _trackable(row) -> bool:
    return row.verdict in (PASS, FAIL) and not (row.exact and row.verdict == FAIL) and (
        _evidence(row) is not None or row.statistical)


@dataclass
class Outcome:
    rows: dict = field(default_factory=dict)          # check -> [CheckResult] (final)
    not_covered: dict = field(default_factory=dict)
    contexts: list = field(default_factory=list)      # every round's context (their call counters)
    rounds: int = 0
    stopped_at: str | None = None                     # the row --fail-fast stopped at


def run(ctx, names, run_check, *, scales, power_tv: float, fail_fast: bool, first: int = FIRST_ROUND) -> Outcome:
    """Run the checks `names` decisively. `run_check(ctx_r, name) -> [CheckResult]` runs one check in
    a round's context; `scales(name)` says whether its budget follows `--samples`."""
    cap = int(ctx.samples)
    out = Outcome()
    tracks: dict = {}
    failed_exact: dict = {}
    latest: dict = {}                               # check -> [row names, in the latest round's order]
    pending = list(names)
    levels: dict = {}
    late: dict = {}                                 # check -> rows first seen after round 0
    r = 0
    while pending and out.stopped_at is None:
        n_r = min(cap, first * 2 ** r)
        ctx_r = replace(ctx, samples=n_r, round=r, state=ctx.state if r == 0 else ctx.state.job(),
                        check_level=ctx.alpha / len(names))
        out.contexts.append(ctx_r)
        ctx.say(f"round {r}: {n_r} samples, {len(pending)} check(s) to decide ({', '.join(pending)})")
        for name in pending:
            rows = run_check(ctx_r, name)
            if r == 0:
                m = sum(1 for row in rows if _trackable(row))
                levels[name] = ctx.alpha / (len(names) * max(m, 1))
            latest[name] = [row.name for row in rows]
            for row in rows:
                key = (name, row.name)
                if row.exact and row.verdict == FAIL:
                    failed_exact.setdefault(key, row)
                    continue
                track = tracks.get(key)
                if track is None:
                    if r > 0 or not _trackable(row):
                        if r > 0 and _trackable(row):       # not in round 0's family: its exact part only
                            late.setdefault(name, set()).add(row.name)
                        out.rows.setdefault(name, {})[row.name] = row
                        continue
                    track = tracks[key] = _new_track(name, row, levels[name], ctx, cap if scales(name) else n_r, n_r)
                _update(track, row, r, ctx, scales(name), power_tv)
            out.rows.setdefault(name, {})
            for key, row in failed_exact.items():
                if key[0] == name:
                    out.rows[name][row.name] = row
            for key, track in tracks.items():
                if key[0] == name:
                    out.rows[name][key[1]] = track.row
            if fail_fast and out.stopped_at is None:
                bad = [row for row in out.rows[name].values() if row.verdict == FAIL]
                if bad:
                    out.stopped_at = bad[0].name
                    break
        out.rounds = r + 1
        pending = [c for c in pending if scales(c) and n_r < cap
                   and any(t.decision is None for (ch, _), t in tracks.items() if ch == c)]
        r += 1
    _finish(out, names, tracks, latest, power_tv, cap)
    for name, rows in late.items():                 # said, never a silent skip
        why = f"{len(rows)} row(s) first seen after round 0 were decided by their exact part only (not in the family)"
        out.not_covered[name] = f"{out.not_covered[name]}; {why}" if name in out.not_covered else why
    return out


def _new_track(name, row, level, ctx, cap, n_r) -> _Track:
    """The track of a row first seen in round 0; its mixture is tuned for the n the row can reach: its
    own `data["n_target"]` where it drew less than planned (stopped early), else scaled to the cap."""
    ev = _evidence(row)
    n_target = int((row.data or {}).get("n_target") or max(1, int(row.n * cap / max(n_r, 1))))
    if ev is None:
        return _Track(name, level, "p-value")
    if ev[0] == "multinomial":
        process = stats.MultinomialEProcess(ev[2], n_target=n_target, alpha=level, power=ctx.power)
        return _Track(name, level, "multinomial", law=ev[2], process=process)
    process = stats.RateEProcess(ev[3], "two", n_target=n_target, alpha=level, power=ctx.power)
    return _Track(name, level, "rate", law=np.array([ev[3]]), process=process)


def _update(track: _Track, row, r: int, ctx, scales: bool, power_tv: float) -> None:
    """Add one round's row to its track and decide it if the evidence now suffices."""
    if track.decision is not None:          # a decided row keeps its decision and its row (later rounds
        return                              # run for the check's other rows)
    track.row, track.looks = row, track.looks + 1
    ev = _evidence(row)
    if track.kind == "p-value" or ev is None:
        level = track.level / 2 ** (r + 1) if scales else track.level
        track.p_spent += level
        track.n = int(row.n)
        if row.p_value is not None and row.p_value <= level:
            track.decision = stats.REJECTED
        elif row.power_fn is not None:
            track.min_tv = float(row.power_fn(level))
        elif row.dof and row.n > 0:
            track.min_tv = float(stats.min_detectable_tv(row.n, row.dof, level, ctx.power))
        if track.decision is None and track.min_tv <= power_tv:
            track.decision = stats.POWERED
        _stamp(track, row, threshold=level, p_value=row.p_value)
        return
    if ev[0] == "multinomial":
        if ev[2].size != track.law.size or not np.allclose(ev[2], track.law, rtol=1e-9, atol=1e-12):
            raise RuntimeError(f"row {row.name}: its exact law changed between rounds (a problem seeded by a draw key)")
        res = track.process.update(ev[1])
        track.min_tv = float(stats.sequential_min_detectable_tv(track.process.k, res.n, track.level, ctx.power,
                                                                track.process.concentrations)) if track.process.k >= 2 else 0.0
    else:
        res = track.process.update(ev[1], ev[2])
        track.min_tv = float(stats.rate_min_detectable_diff(track.law[0], res.n, track.level, ctx.power,
                                                            track.process.concentrations))
    track.result, track.n = res, int(res.n)
    if res.max_log_e >= math.log(1.0 / track.level):
        track.decision = stats.REJECTED
    elif track.min_tv <= power_tv:
        track.decision = stats.POWERED
    _stamp(track, row, threshold=1.0 / track.level, p_value=res.p_value_anytime)


def _stamp(track: _Track, row, *, threshold: float, p_value) -> None:
    """Write the track's pooled state onto its latest row."""
    row.n = track.n
    row.min_detectable_tv = None if not math.isfinite(track.min_tv) else track.min_tv
    row.verdict = FAIL if track.decision == stats.REJECTED else PASS
    seq = {"kind": track.kind, "n": track.n, "looks": track.looks, "level": track.level, "min_tv": row.min_detectable_tv}
    if track.result is not None:
        res = track.result
        row.p_value = float(res.p_value_anytime)
        row.statistic = float(res.max_log_e) if math.isfinite(res.max_log_e) else None
        seq.update({"log_e": float(res.log_e) if math.isfinite(res.log_e) else "inf",
                    "max_log_e": float(res.max_log_e) if math.isfinite(res.max_log_e) else "inf",
                    "threshold_e": threshold, "impossible": bool(res.impossible)})
        if "observed" in row.data and track.kind == "multinomial":
            row.data["observed"] = track.process.counts.tolist()
            row.data["expected"] = (track.law * track.n).tolist()
    else:
        seq.update({"p_value": p_value, "level_this_look": threshold, "level_spent": track.p_spent})
    row.data["sequential"] = seq


def _finish(out: Outcome, names, tracks, latest, power_tv: float, cap: int) -> None:
    """Decide what is still open, order every check's rows as its latest round gave them, list what
    was not covered."""
    inconclusive: dict = {}
    for (name, row_name), track in tracks.items():
        row = track.row
        seq = row.data.setdefault("sequential", {})
        if track.decision is None:
            if track.min_tv <= power_tv:
                track.decision = stats.POWERED
            elif out.stopped_at is not None:
                track.decision = STOPPED
                row.verdict = SKIP
                row.detail = f"not decided: --fail-fast stopped the audit at {out.stopped_at}; " + row.detail
            else:
                track.decision = stats.BUDGET
                inconclusive.setdefault(name, []).append(track)
        seq["decision"] = track.decision
        row.detail = _say(track, power_tv) + ("; " + row.detail if row.detail else "")
    for name in names:
        if name not in out.rows:
            if out.stopped_at is not None:
                out.not_covered[name] = f"not run: --fail-fast stopped the audit at {out.stopped_at}"
            continue
        order = latest.get(name, [])
        got = out.rows[name]
        out.rows[name] = [got[n] for n in order if n in got] + [row for n, row in got.items() if n not in order]
        undecided = [row for row in out.rows[name] if row.data.get("sequential", {}).get("decision") == STOPPED]
        if undecided:
            out.not_covered[name] = f"{len(undecided)} row(s) not decided: --fail-fast stopped the audit at {out.stopped_at}"
    for name, open_tracks in inconclusive.items():
        worst = max(t.min_tv for t in open_tracks)
        out.not_covered[name] = (f"{len(open_tracks)} row(s) inconclusive at the cap (--samples {cap}): they pass, but "
                                 f"would reject only TV >= {worst:.3g} (> --power-tv {power_tv:g})")


def _say(track: _Track, power_tv: float) -> str:
    tv = "n/a" if not math.isfinite(track.min_tv) else f"{track.min_tv:.3g}"
    if track.decision == stats.REJECTED:
        return f"rejected after {track.looks} look(s), n={track.n}"
    if track.decision == stats.POWERED:
        return f"decided after {track.looks} look(s), n={track.n}: min detectable TV {tv} <= {power_tv:g}"
    if track.decision == stats.BUDGET:
        return f"inconclusive at the cap after {track.looks} look(s), n={track.n}: min detectable TV {tv} > {power_tv:g}"
    return f"undecided after {track.looks} look(s), n={track.n}"
