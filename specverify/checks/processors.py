"""Logits processors under speculation: whole runs with penalties, min_tokens, logit bias, min_p,
banned tokens and sequences, a grammar and stop tokens (`reference.processors` defines each and
their order), at engine level, against the exact law of the target with the processors applied to
the *real* prefix (`reference.laws.processed_law`).

The state the rows must be processed with is prompt + committed output + drafts 0..i-1 at draft
position i; masks advance through accepted drafts and fall back on rejection; a run ends at its
first stop token. Rows (toy V=5, prompt (1, 2), kappa 2, runs of L=4):

    engine.processors[<setting>]   Pearson chi-squared of whole runs (each processor alone, and the
                                   combined setting: penalties + min_p + top-k + temperature); an
                                   impossible run (a masked token, an EOS too early) fails exactly
    engine.processors_greedy[...]  exact: temperature 0 runs from 16 prompts equal the argmax path of
                                   the processed target, token for token (stop included)
    engine.stop[...]               exact: nothing but PAD after the first stop token, and a run shorter
                                   than L ends with a stop token; plus the chi-squared law of the
                                   run lengths (where the stop token falls)
    engine.grammar[...]            exact: every emitted token is allowed by the grammar state of the
                                   committed prefix before it; plus the law of the runs

An adapter declares which processors its `generate` implements (`processors`, `adapters.protocol`);
a row runs only when every processor it needs is declared, and the rest are listed in one skipped
row (and in the audit's `not_covered`). Processors exist at engine level only: a sampler-level
adapter gets no row here.

Power: the chi-squared rows state their min detectable TV (Holm at the audit's alpha, power 0.99;
`audit.apply_holm`): 0.036-0.061 in the default reference audit (200 000 samples: n = samples / 20 =
10 000 runs a row; the length law 0.036, the 625-sequence penalty laws about 0.06); the exact rows
see any single offending run. Time: 2.2-2.4 s for the whole check on the reference (0.15-0.25 s a
law row; it runs beside the other checks, so the default audit's wall moves within its noise, about
+1 s at most); about 64 s on our engine.

Budget (`--samples`): max(2000, samples // 20) whole runs per law row; exact rows of fixed size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify import stats
from specverify.reference import laws
from specverify.reference.batch import PAD
from specverify.reference.processors import Grammar, Processors, stopped
from specverify.reference.toy import ToyModel
from specverify.reference.transforms import Transform

from ..battery import harness
from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer
from .joint import sequence_gof
from .runs import generate, levels

MIN_RUNS = 2000
RUN_FRACTION = 20           # runs per law row: ctx.samples / RUN_FRACTION (at least MIN_RUNS)
GREEDY_PROMPTS = 16         # distinct prompts of the greedy rows (each one argmax path)
GREEDY_RUNS = 4             # runs per greedy prompt


@dataclass(frozen=True)
class ProcSetup:
    """The toy target/draft pair and run shape of the processor rows: a 5-token vocabulary (so a stop
    token and a grammar leave room), a two-token prompt (the repetition penalty reads it), no zero
    entries (a masked token is masked by a processor, never by the model)."""

    vocab: int = 5
    kappa: int = 2
    length: int = 4
    prompt: tuple = (1, 2)
    scale: float = 1.0

    def models(self, ctx):
        seed = int(ctx.rng("processor-models").integers(1, 2**31))
        target = ToyModel(self.vocab, seed, scale=self.scale)
        return target, target.draft(seed + 1, noise=1.0)

    @property
    def label(self) -> str:
        return f"toy V={self.vocab} L={self.length} kappa={self.kappa}"


SETUP = ProcSetup()
STOP = 0                    # the stop (EOS) token of the rows that use one
# a 3-state DFA over the 5 tokens: table[state][token] = next state, -1 = not allowed
GRAMMAR = Grammar(((1, -1, 2, 0, -1),
                   (0, 1, -1, -1, 0),
                   (-1, 2, 0, 1, 1)))
PENALTIES = dict(repetition_penalty=1.5, frequency_penalty=0.7, presence_penalty=0.5)

# label -> (settings, transform) of the law rows
LAW_ROWS = {
    "repetition_penalty=2": (Processors(repetition_penalty=2.0), Transform()),
    "frequency_penalty=1": (Processors(frequency_penalty=1.0), Transform()),
    "presence_penalty=1": (Processors(presence_penalty=1.0), Transform()),
    "logit_bias": (Processors(logit_bias=((3, 1.5), (4, -1.0))), Transform()),
    "min_p=0.2": (Processors(min_p=0.2), Transform()),
    "banned": (Processors(banned_tokens=(4,), banned_sequences=((2, 2), (1, 3, 0))), Transform()),
    "min_tokens=2": (Processors(min_tokens=2, stop_tokens=(STOP,), logit_bias=((STOP, 1.0),)), Transform()),
    "combined": (Processors(min_p=0.1, **PENALTIES), Transform(temperature=0.8, top_k=3)),
}
STOP_ROW = Processors(stop_tokens=(STOP,), logit_bias=((STOP, 1.0),))
GRAMMAR_ROW = Processors(grammar=GRAMMAR)
GREEDY_ROWS = {
    "penalties": Processors(**PENALTIES),
    "min_tokens+stop+grammar": Processors(min_tokens=2, stop_tokens=(STOP,), grammar=GRAMMAR,
                                          logit_bias=((STOP, 1.0),)),
}
# label -> (settings, transform) of the identity-draft rows (`checks.identity`)
IDENTITY_ROWS = {
    "penalties+min_p+logit_bias": (Processors(min_p=0.1, logit_bias=((3, 1.0),), **PENALTIES),
                                   Transform(temperature=0.7, top_k=3)),
    "min_tokens+stop+grammar": (Processors(min_tokens=2, stop_tokens=(STOP,), grammar=GRAMMAR), Transform()),
}


def declared(engine) -> set:
    """The processors the adapter declares (`processors`), as a set of names."""
    return set(getattr(engine, "processors", ()) or ())


def law_of(target, transform: Transform, settings: Processors, ctx, setup: ProcSetup = SETUP) -> laws.SequenceLaw:
    """The exact law of runs (memoised in the audit's state by target and settings)."""
    key = ("processors", harness.law_key(target), transform, settings, setup)
    return ctx.state.shared.law(key, lambda: laws.processed_law(target, transform, settings, setup.prompt, setup.length))


def runs_of(engine, ctx, name: str, settings: Processors, transform: Transform, n: int, seed_key: str,
            draft=None, setup: ProcSetup = SETUP, prompt=None, length=None):
    """(tokens [n, L], info, target, seconds) of n runs of the adapter with `settings`."""
    target, d = harness.models(engine, setup, ctx)
    seed = int(ctx.draws("processors", seed_key).integers(2**31))
    with Timer() as t:
        tokens, info = generate(engine, "engine", ctx, name, target=target, draft=d if draft is None else draft(target),
                                prompt=setup.prompt if prompt is None else prompt, kappa=setup.kappa,
                                transform=transform, seed=seed, n=n, length=length or setup.length,
                                processors=settings)
    return tokens, info, target, t.seconds


def law_row(engine, ctx, label: str, settings: Processors, transform: Transform, n: int) -> CheckResult:
    name = f"engine.processors[{label}, {SETUP.label}]"
    tokens, _, target, seconds = runs_of(engine, ctx, name, settings, transform, n, f"law {label}")
    with Timer() as t:
        law = law_of(target, transform, settings, ctx)
    return sequence_gof(name, tokens, law, seconds + t.seconds, ctx)


def greedy_row(engine, ctx, label: str, settings: Processors) -> CheckResult:
    name = f"engine.processors_greedy[{label}, {GREEDY_PROMPTS} prompts, {SETUP.label}]"
    target, draft = harness.models(engine, SETUP, ctx)
    rng = ctx.rng("processors greedy", label)
    prompts = [tuple(int(x) for x in rng.integers(0, SETUP.vocab, 2)) for _ in range(GREEDY_PROMPTS)]
    first, n, n_bad = "", 0, 0
    with Timer() as t:
        for prompt in prompts:
            tokens, _ = generate(engine, "engine", ctx, name, target=target, draft=draft, prompt=prompt,
                                 kappa=SETUP.kappa, transform=Transform(temperature=0.0), seed=0, n=GREEDY_RUNS,
                                 length=SETUP.length, processors=settings)
            path = laws.processed_greedy_path(target, settings, prompt, SETUP.length)
            want = np.full(SETUP.length, PAD, np.int64)
            want[:len(path)] = path
            n += tokens.shape[0]
            wrong = np.flatnonzero((tokens != want[None, :]).any(axis=1))
            if wrong.size and not first:
                first = f"prompt {list(prompt)}: expected {list(path)}, got {_run(tokens[wrong[0]])}"
            n_bad += wrong.size
    if n_bad:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                           detail=f"{n_bad} of {n} greedy runs differ from the processed target's argmax path; "
                                  f"first: {first}")
    return CheckResult(name, PASS, n=n, exact=True, seconds=t.seconds,
                       detail=f"all {n} runs from {len(prompts)} prompts equal the processed argmax path")


def _run(row) -> list:
    """A run's tokens as a list, the PAD after an early end dropped."""
    row = np.asarray(row)
    return row[row != PAD].tolist() if (row == PAD).any() else row.tolist()


def stop_rows(engine, ctx, n: int) -> list[CheckResult]:
    """Nothing after the first stop token (exact) and the law of the run lengths (chi-squared)."""
    base = f"{SETUP.label}, stop={STOP}"
    name = f"engine.stop[nothing after stop, {base}]"
    tokens, _, target, seconds = runs_of(engine, ctx, name, STOP_ROW, Transform(), n, "stop")
    first = stopped(tokens, STOP_ROW.stop_tokens)                 # position of the first stop, or L
    cols = np.arange(tokens.shape[1])[None, :]
    after = (cols > first[:, None]) & (tokens != PAD)
    short = (tokens == PAD).any(axis=1) & (first == tokens.shape[1])
    rows = []
    if after.any() or short.any():
        r = int(np.flatnonzero(after.any(axis=1) | short)[0])
        what = "tokens after the first stop token" if after.any() else "runs that end early without a stop token"
        rows.append(CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                                detail=f"{int((after.any(axis=1) | short).sum())} of {n} runs have {what}; "
                                       f"first: {tokens[r].tolist()}"))
    else:
        rows.append(CheckResult(name, PASS, n=n, exact=True, seconds=seconds,
                                detail=f"{int((first < tokens.shape[1]).sum())} of {n} runs stopped; PAD after every stop"))
    law = law_of(target, Transform(), STOP_ROW, ctx)
    want = np.zeros(SETUP.length)
    for s, p in zip(law.sequences, law.probs):
        want[len(s) - 1] += p
    got = np.bincount(np.minimum(first + 1, SETUP.length) - 1, minlength=SETUP.length)
    res = stats.pearson(got, want, alpha=ctx.alpha, min_expected=ctx.min_expected)
    rows.append(CheckResult(f"engine.stop[length law, {base}]", PASS, statistic=res.statistic, p_value=res.p_value,
                            dof=res.dof, n=n, seconds=0.0,
                            detail=f"run lengths 1..{SETUP.length}: observed {got.tolist()}, expected "
                                   f"{np.round(want * n, 1).tolist()}",
                            data={"observed": got.tolist(), "expected": (want * n).tolist()}))
    return rows


def grammar_rows(engine, ctx, n: int) -> list[CheckResult]:
    """Every emitted token legal for its committed prefix's grammar state (exact), and the law."""
    name = f"engine.grammar[legal tokens, {SETUP.label}, {len(GRAMMAR.table)}-state DFA]"
    tokens, _, target, seconds = runs_of(engine, ctx, name, GRAMMAR_ROW, Transform(), n, "grammar")
    table = GRAMMAR.array()
    state = np.zeros(n, np.int64)
    illegal = np.zeros(n, bool)
    where = np.full(n, -1, np.int64)
    for j in range(tokens.shape[1]):
        t = tokens[:, j]
        live = (t != PAD) & ~illegal
        nxt = table[state, np.where(t == PAD, 0, t)]
        newly = live & (nxt < 0)
        where[newly] = j
        illegal |= newly
        state = np.where(live & ~newly, nxt, state)
    rows = []
    if illegal.any():
        r = int(np.flatnonzero(illegal)[0])
        j = int(where[r])
        rows.append(CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                                detail=f"{int(illegal.sum())} of {n} runs emit a token the grammar does not allow; "
                                       f"first: run {tokens[r].tolist()}, token {int(tokens[r, j])} at position {j} "
                                       f"(state {GRAMMAR.state(tokens[r, :j].tolist())} allows "
                                       f"{np.flatnonzero(GRAMMAR.allowed(GRAMMAR.state(tokens[r, :j].tolist()))).tolist()})"))
    else:
        rows.append(CheckResult(name, PASS, n=n, exact=True, seconds=seconds,
                                detail=f"every token of {n} runs allowed by the state of its committed prefix"))
    rows.append(sequence_gof(f"engine.grammar[law, {SETUP.label}]", tokens, law_of(target, Transform(), GRAMMAR_ROW, ctx),
                             0.0, ctx))
    return rows


def needs(settings: Processors) -> set:
    """The processor names a setting uses."""
    return set(settings.active())


def run(engine, ctx) -> list[CheckResult]:
    if "engine" not in levels(engine):
        return []
    have = declared(engine)
    n = max(MIN_RUNS, ctx.samples // RUN_FRACTION)
    rows, skipped = [], []

    def want(label, settings):
        missing = needs(settings) - have
        if missing:
            skipped.append(f"{label} (needs {', '.join(sorted(missing))})")
        return not missing

    for label, (settings, transform) in LAW_ROWS.items():
        if want(label, settings):
            rows.append(law_row(engine, ctx, label, settings, transform, n))
    for label, settings in GREEDY_ROWS.items():
        if want(f"greedy {label}", settings):
            rows.append(greedy_row(engine, ctx, label, settings))
    if want("stop", STOP_ROW):
        rows.extend(stop_rows(engine, ctx, n))
    if want("grammar", GRAMMAR_ROW):
        rows.extend(grammar_rows(engine, ctx, n))
    if skipped:
        undeclared = sorted(set().union(*(needs(s) for s, _ in LAW_ROWS.values()), needs(GRAMMAR_ROW)) - have)
        rows.append(CheckResult(f"engine.processors[not declared: {', '.join(undeclared)}]", SKIP, exact=True,
                                detail=f"the adapter does not declare processors {', '.join(undeclared)}; rows not run: "
                                       f"{'; '.join(skipped)}",
                                data={"not_covered": undeclared}))
    return rows
