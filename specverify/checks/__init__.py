"""The battery: every check, in the order an audit runs them, in one static table.

Each row names the check, its kind (what it draws), its **budget** (what `--samples` means for it:
the same sentence opens the "Budget:" paragraph of the check's module docstring) and its `run(engine,
ctx) -> list[CheckResult]`, and carries what the audit needs to know about it: which checks share one
context (they read the same one-step samples), which start first when checks run side by side, and
what a failure of the check alone says about the engine (`audit.deviation_of`).

Adding a check: a module here with `run`, one `Check(...)` row below (and its column head).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specverify.battery.base import OUTPUT_LAW, RULE_LAW
from specverify.battery.deviations import NOT_BITWISE, RANKS_DISAGREE

from . import (acceptance, acceptance_invariance, bitwise, composition, endpoints, engine_acceptance, far_tail, greedy,
               engine_serving, hostile, identity, joint, large_vocab, marginal, processors, rank_agreement, rare_event,
               reproducibility, rng_discipline, runs, server, serving, transforms)

# what a check draws (Check.kind)
ONE_STEP = "one-step"               # statistical rows of one verify step, on the shared one-step samples
WHOLE_RUN = "whole-run"             # statistical rows of whole runs (engine level, or the harness as engine)
SEEDED = "seeded"                   # seeded-mode calls on fresh adapters: exact rows and one law row
REAL_VOCAB = "real-vocabulary"      # one-step rows at real vocabulary sizes, sized by V (not by --samples)
EXACT = "exact"                     # exact rows on fixed problems (no statistics)
SERVER = "server"                   # rows of an OpenAI-compatible server over HTTP (`specverify audit URL`):
                                    # run only against a server, and by default only there

# what --samples (ctx.samples) means for a check (Check.budget)
SHARED_ONESTEP = "samples one-step draws per (rule, problem), shared by marginal, joint and acceptance"

PER_ROW = "per-row"                 # Check.law: every row of the check declares CheckResult.law itself


@dataclass(frozen=True)
class Check:
    name: str
    kind: str                       # ONE_STEP, WHOLE_RUN, SEEDED, REAL_VOCAB, EXACT or SERVER
    budget: str                     # what --samples means for this check
    run: Callable                   # run(engine, ctx) -> list[CheckResult]
    short: str                      # its column head in the zoo's matrix
    shares: str | None = None       # "onestep": reads the shared one-step samples, runs in one context with
                                    # the other checks that do
    long: int | None = None         # started first when checks run side by side (0 first)
    fails_as: str | None = None     # the deviation kind of an audit where only this check failed
    law: str = ""                   # (required) what its rows test: OUTPUT_LAW, RULE_LAW (failing alone, with whole
                                    # runs exact, says "another rule", not "biased") or PER_ROW (each row
                                    # declares its own CheckResult.law)
    whole_run: bool = False         # its rows are whole-run laws (exact ones rule out a bias)
    heavy: int = 0                  # seconds even when it passes: a decisive audit runs the heavy ones last,
                                    # in this order (1 first), so --fail-fast reaches the cheap checks first
                                    # (docs/statistics.md, "Decisive audits")
    needs: tuple = ()               # modules it cannot run without, each from an extra (`specverify.extras`): checked
                                    # before any work (`unavailable`, `specverify.extras`)

    def __post_init__(self):
        if self.law not in (OUTPUT_LAW, RULE_LAW, PER_ROW):
            raise ValueError(f"check {self.name!r} must declare law = OUTPUT_LAW, RULE_LAW or PER_ROW, got {self.law!r}")

    @property
    def scales(self) -> bool:
        """Whether its budget follows --samples (a decisive audit then samples it in rounds)."""
        return self.kind in (ONE_STEP, WHOLE_RUN, SEEDED)


TABLE = (
    Check("marginal", ONE_STEP, SHARED_ONESTEP, marginal.run, "marg", law=OUTPUT_LAW, shares="onestep"),
    Check("joint", ONE_STEP, SHARED_ONESTEP, joint.run, "joint", law=RULE_LAW, shares="onestep"),
    Check("acceptance", ONE_STEP, SHARED_ONESTEP, acceptance.run, "accept", law=RULE_LAW, shares="onestep"),
    Check("endpoints", EXACT, "exact rows on fixed batches (every coin endpoint); --samples unused",
          endpoints.run, "endpt", law=OUTPUT_LAW),
    Check("composition", EXACT, "exact rows on fixed probe batches; --samples unused", composition.run, "compos", law=OUTPUT_LAW),
    Check("greedy", EXACT, "exact rows on fixed problems; --samples unused", greedy.run, "greedy", law=OUTPUT_LAW),
    Check("reproducibility", SEEDED, "exact replay rows of fixed size; seeded.joint draws samples one-step "
          "samples (one request per seed)", reproducibility.run, "seeded", law=PER_ROW),
    Check("rng_discipline", EXACT, "exact rows on fixed seeded calls; --samples unused", rng_discipline.run, "rng", law=OUTPUT_LAW),
    Check("runs", WHOLE_RUN, "samples whole runs per level (runs_greedy: 256 runs, fixed)", runs.run, "runs", law=OUTPUT_LAW,
          long=2, whole_run=True),
    Check("transforms", WHOLE_RUN, "max(1000, samples // 2) whole runs per transform row", transforms.run,
          "transf", law=OUTPUT_LAW, long=1, whole_run=True),
    Check("identity", EXACT, "2000 runs per row, fixed; --samples unused", identity.run, "ident", law=RULE_LAW),
    Check("engine_acceptance", WHOLE_RUN, "max(2000, samples // 10) whole runs (engine.acceptance_greedy: 256 runs, "
          "fixed)", engine_acceptance.run, "eacc", law=RULE_LAW),
    Check("acceptance_invariance", WHOLE_RUN, "max(500, samples // 100) whole runs per arm, two arms per row",
          acceptance_invariance.run, "ainv", law=RULE_LAW),
    Check("bitwise", EXACT, "prompts and tokens from --size (quick, standard, full); --samples unused",
          bitwise.run, "bitwise", law=OUTPUT_LAW, long=0, fails_as=NOT_BITWISE),
    Check("processors", WHOLE_RUN, "max(2000, samples // 20) whole runs per law row; exact rows of fixed size",
          processors.run, "procs", law=OUTPUT_LAW),
    Check("rank_agreement", EXACT, "exact rows of fixed size (world sizes x calls x requests); --samples unused",
          rank_agreement.run, "ranks", law=OUTPUT_LAW, fails_as=RANKS_DISAGREE, heavy=1,
          needs=("torch",)),   # torch.distributed
    Check("large_vocab", REAL_VOCAB, "samples sized from the vocabulary (bytes of rows per problem) x "
          "large_scale; --samples unused", large_vocab.run, "largeV", law=PER_ROW, heavy=3),
    Check("far_tail", REAL_VOCAB, "6400 draws x large_scale; --samples unused", far_tail.run, "ftail", law=OUTPUT_LAW, heavy=2),
    Check("rare_event", EXACT, "draws_for_rate(--rare-rate, --alpha) draws per level, in shards; --samples unused", rare_event.run, "rare", law=OUTPUT_LAW, heavy=4),
    Check("hostile", EXACT, "exact rows on fixed hostile rows; --samples unused", hostile.run, "hostil", law=OUTPUT_LAW),
    Check("engine_serving", EXACT, "fixed prompts, runs and offsets (about 500 requests); --samples unused",
          engine_serving.run, "eserve", law=OUTPUT_LAW),
    Check("server", SERVER, "samples // 20 runs per law row and per arm of spec_vs_plain (at least 500); fixed "
          "prompts and tokens for greedy_bitwise and needle", server.run, "server", law=OUTPUT_LAW),
    Check("serving", SERVER, "fixed prompts, runs and offsets (about 500 requests); --samples unused", serving.run,
          "serve", law=OUTPUT_LAW),
)
BY_NAME = {c.name: c for c in TABLE}
NAMES = [c.name for c in TABLE]


def unavailable(name: str) -> str | None:
    """Why check `name` cannot run in this environment ("needs torch: pip install 'specverify[engine]'"),
    or None: every module it needs is installed (looked up, not imported: `specverify.extras`)."""
    from specverify import extras

    gone = extras.missing(BY_NAME[name].needs)
    return f"needs {', '.join(gone)}: {extras.install_line(gone)}" if gone else None


def describe() -> str:
    """One "name: kind, budget" line per check, in battery order (for `--help`)."""
    width = max(len(c.name) for c in TABLE)
    return "\n".join(f"{c.name + ':':{width + 1}} {c.kind}, {c.budget}" for c in TABLE)


__all__ = ["Check", "TABLE", "BY_NAME", "NAMES", "describe", "unavailable", "ONE_STEP", "WHOLE_RUN", "SEEDED",
           "REAL_VOCAB", "EXACT", "SERVER", "PER_ROW"]
