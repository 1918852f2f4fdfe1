"""The serving path at the engine level: the rows of `checks/serving.py` against an in-process adapter
that declares "serving" (`adapters/serving_level.py`: `complete(requests)` returns per kept token its
logprob, the text, the finish reason, usage and step events), without a server.

Each row is the server row of the same name (docs/serving-path.md) -- the same requests, comparisons and
exactness -- with "engine." for "server." in its name; the adapter's `complete` answers the client calls
(`EngineLevelClient`: requests the rows send concurrently form one batch, admitted together). Rows:

    engine.logprobs      every returned logprob bit for bit against the toy target's log-softmax at its
                         prefix and the teacher-forced one; top entries equal
    engine.stop          a stop string completed at every offset of seeded runs: ids, text, logprobs,
                         finish_reason equal `reference.serving.finish` of the unstopped run
    engine.length        every cap 1..12: len(ids) <= cap, finish_reason, completion_tokens == len(ids)
    engine.stream        the step events' text concatenated == the text == the detokenised ids
    engine.seeds         seeded probes alone, after warm-up requests and among concurrent fillers: equal
    engine.prefix_cache  cold vs warm (the adapter must report cached_tokens)
    engine.preemption    a wave preempted while decoding (the adapter's counters()) equals each alone
    engine.preemption.law
                         unseeded runs in waves preempted while decoding against the toy's exact run law
                         (chi-squared at the audit's alpha; the only statistical row here)

The n = 2 independence row of the server level is not run: the protocol has no n > 1 (listed under not
covered). An adapter without a feature gets that row as a SKIP (not covered), with the reason its API
gives where the adapter states one (`serving_skips`). Exact rows, but the law row.

Budget (`--samples`): fixed prompts, runs and offsets (about 500 requests); --samples unused.
"""

from __future__ import annotations

from dataclasses import replace

from ..battery.base import SKIP, CheckResult
from . import serving

NOT_AT_ENGINE_LEVEL = "server.seeds.n_independent"     # needs n > 1 choices: the protocol has none


def _renamed(row: CheckResult, skips: dict) -> CheckResult:
    """A server row as the engine level's: "engine." for "server." in its name, "the engine" in its words;
    a SKIP gets the adapter's reason from its API (`serving_skips`), where it gives one."""
    base = row.name.removeprefix("server.").split("[")[0]
    detail = row.detail.replace("the server ", "the engine ")
    why = skips.get(base) or skips.get(base.split(".")[0])      # a sub-row (preemption.law) shares its row's reason
    if row.verdict == SKIP and why:
        detail = f"{detail} -- the engine's API: {why}"
    return replace(row, name="engine." + row.name.removeprefix("server."), detail=detail)


def run(engine, ctx) -> list[CheckResult]:
    if "serving" not in getattr(engine, "capabilities", ()):
        return []
    from specverify.adapters.serving_level import EngineLevelEngine
    level = EngineLevelEngine(engine)
    length = serving.length_row(level, ctx)
    rows = [serving.logprobs_row(level, ctx), serving.stop_row(level, ctx), length, *serving.usage_rows(length),
            serving.stream_row(level, ctx)]
    rows += [r for r in serving.seeds_rows(level, ctx) if not r.name.startswith(NOT_AT_ENGINE_LEVEL)]
    rows.append(serving.prefix_cache_row(level, ctx))
    rows.append(serving.preemption_row(level, ctx))
    rows.append(serving.preemption_law_row(level, ctx))
    rows.append(CheckResult("server.seeds.n_independent", SKIP, data={"not_covered": True},
                            detail="n > 1 choices: the engine-level protocol has none (a server audit runs this row)"))
    skips = dict(getattr(engine, "serving_skips", None) or {})
    return [_renamed(r, skips) for r in rows]


__all__ = ["run"]
