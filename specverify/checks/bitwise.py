"""Greedy bitwise and batch invariance, for any engine on the protocol's bitwise level
(`specverify.adapters.bitwise_level`: `bitwise_info()` and `decode_greedy(GreedyRequest)`).

For each variant the adapter offers, the baseline is plain greedy decode at batch 1. Then:

- `greedy.bitwise[<model>,<variant>]`: speculative decode (each proposer, each kappa, each layout)
  must equal the baseline in token ids and, where the adapter returns logits, in every logits row's
  bytes;
- `batch.invariance[<model>,<variant>]`: plain decode at batch N and in a ragged layout must equal
  the baseline the same way (one request's logits must not depend on its neighbours).

- `verify.width[...]` and `rollback[...,j=<j>]`, where the adapter takes the harness's drafters
  (`BitwiseInfo.drafted`): the oracle's full verify chunks and the adversarial drafter's rollbacks,
  each compared row by row with the baseline and localised to a step and chunk position
  (`specverify.battery.drafted`).

Exact rows: one differing id or logit byte fails them. The first divergence is reported as prompt,
output index, both tokens, both logits rows' first differing entry and the baseline's top-2 margin
there, and classified: a token flip at a relative top-2 margin below REDUCTION_ORDER_MARGIN (or a
logits-only difference) is a reduction-order bug (last bits differ, a near tie flips); a flip at a
larger margin is a logic bug (the engine computed something else). A variant with the role
"negative-control" (ours: torch's default ops) runs small; its rows pass when the harness sees a
divergence there (proof that the comparison can see one) and warn when it sees none.

Prompts are sent in calls of at most CHUNK prompts (or the layout's batch size if larger), logits as
digests; on a divergence the two calls are repeated with rows to report values.

Budget (`--samples`): prompts and tokens from --size (quick, standard, full); --samples unused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from specverify.adapters.bitwise_level import (BATCH, DIGESTS, LAYOUT_KINDS, NEGATIVE_CONTROL, NO_SPEC, RAGGED, ROWS, SUBJECT,
                                               GreedyRequest, Layout, Spec, check_info, check_result, digests_of)
from specverify.errors import AdapterError

from ..battery.harness import invoke
from ..battery import drafted
from ..battery.base import FAIL, PASS, SKIP, WARN, CheckResult, Timer

REDUCTION_ORDER_MARGIN = 1e-3     # relative top-2 margin below which a flipped token is a reduction-order bug
REDUCTION_ORDER, LOGIC, LOGITS_ONLY, NO_LOGITS = "reduction-order", "logic", "reduction-order (logits only)", "unknown"
CHUNK = 8                         # prompts per decode_greedy call (at least the layout's batch size)
RANDOM_PROMPT_LENGTHS = (5, 24)   # synthetic prompts (adapter offers none): lengths drawn in this range


@dataclass(frozen=True)
class Sizes:
    """How much the check runs: prompts x new tokens, the kappas and the layouts (batch 1 is the
    baseline, and also a speculative layout).

    spec_pairs None: the speculative runs are the cross product kappas x (batch 1 + every layout);
    else exactly these (kappa, Layout) pairs (a covering design, see FULL). plain_max_tokens None: the
    plain layouts decode max_tokens like the baseline; else only their first plain_max_tokens tokens
    (compared with the baseline's first as many; greedy decode without EOS makes those a prefix).
    spec_weights / plain_weights None: every run decodes every prompt; else the prompts are dealt out
    over the runs (`shares`): prompt i goes to the run owning slot i mod sum(weights), run j owning
    weights[j] consecutive slots, so each prompt is decoded once speculatively and once in a plain
    layout, and each run's prompts are spread over the whole prompt list."""

    n_prompts: int
    max_tokens: int
    kappas: tuple
    batch_sizes: tuple            # speculative and batch-invariance layouts besides batch 1
    ragged_batch: int | None      # the ragged layout's batch size (None: no ragged layout)
    spec_pairs: tuple | None = None       # ((kappa, Layout), ...) or None: the cross product
    plain_max_tokens: int | None = None   # tokens of the plain layouts' runs (None: max_tokens)
    spec_weights: tuple | None = None     # a weight per spec pair: each runs on its share of the prompts
    plain_weights: tuple | None = None    # a weight per plain layout (batch_sizes, then ragged): the same


QUICK = Sizes(16, 32, (1, 3, 7), (8,), 8)         # the main job's size for our own engine (about 3 CPU-min)
STANDARD = Sizes(32, 64, (1, 3, 7), (8,), 8)      # every other engine's default
FULL_PROMPTS, FULL_TOKENS, FULL_PLAIN_TOKENS = 256, 256, 128
FULL = Sizes(FULL_PROMPTS, FULL_TOKENS, (1, 2, 3, 4, 5, 6, 7), (2, 4, 8, 16, 32, 64), 8,
             spec_pairs=((1, Layout(1)), (2, Layout(2)), (3, Layout(4)), (4, Layout(8)), (5, Layout(16)),
                         (6, Layout(32)), (7, Layout(64)), (3, Layout(8, ragged=True))),
             plain_max_tokens=FULL_PLAIN_TOKENS,
             spec_weights=(1, 2, 2, 2, 2, 2, 4, 1),        # prompts: 16, 32, 32, 32, 32, 32, 64, 16
             plain_weights=(2, 2, 2, 2, 2, 4, 2))          # batch 2..32: 32 each, 64: 64, ragged 8: 32
"""The full run: 256 prompts x 256 tokens, a covering design, not the cross product (49 speculative
runs + 7 plain ones over every prompt measured ~3.5 h on 2 cores; this design ~47 min at --jobs 2).

Every prompt is decoded three times: plain at batch 1 (the baseline, once per prompt, reused by every
comparison), speculatively in one (kappa, layout) pair, and plain in one other layout. The pairs deal
the prompts out by weight (`Sizes`, `shares`): (kappa, batch) = (1,1) 16 prompts, (2,2) (3,4) (4,8)
(5,16) (6,32) 32 each, (7,64) 64 and ragged 8 at kappa 3 16; plain batch 2, 4, 8, 16, 32 32 each, 64
64 and ragged 8 32 -- enough that every batch fills (64 prompts for batch 64), each run's prompts spread
over the whole list (the engine's own prompts of every category, then the seeded synthetic ones).

Why it covers the reduction orders. Every kernel of the invariant backend fixes each row's reduction
order whatever the launch (`batch.invariance` and tests/test_kernels_invariant.py check that), so
what a speculative run can change is (a) the launch size M: from batch (no draft found) to
batch x (kappa+1) rows per step, (b) the attention query length kappa+1 over the paged cache, (c) the
cache positions written and rolled back on rejection. Each kappa 1..7 appears once (b, c), paired
with a different layout: (kappa, batch) = (1,1) (2,2) (3,4) (4,8) (5,16) (6,32) (7,64), and ragged 8
at kappa 3 (request i drafting at most i % 4: launches mixing prefills, decodes and verifies of 1..4
rows). Each layout 1, 2, 4, ..., 64 and ragged 8 thus runs once with speculation and once plain (a).
The largest launches M = 2, 6, 16, 40, 96, 224, 512 sit on both sides of the one M-dependent block
in the kernels, the linear's ROW_BLOCK = 4 rows a pass (kernels/cpu_linear.py, cpu_linear_q.py):
M = 1..3 run only the remainder micro-kernel, larger M full 4-row blocks plus remainders 1..3 (the
steps with fewer drafts give every M between batch and the maximum). The other blocks are along
columns, K or positions, not rows: PANEL_N output columns, the GGUF BLOCK of 32 weights along K,
the attention's POS_CHUNK = 64 KV positions (prompts of 13..121 tokens + 256 new ones cross 64,
128, ..., 320, with verify queries straddling them) and the engine's 16-position KV blocks (rolled
back across their edges).

Sized to fit 50 minutes at --jobs 2 on the 2 cores measured here (ms a token: plain batch 1 ~45 at 256
tokens, speculative ~41 at batch 1 and ~30 above, plain batched ~20): the baseline is ~2,900 CPU-s of
the ~5,600. The plain layouts decode the first FULL_PLAIN_TOKENS tokens (positions past 128 are
covered by the speculative runs), as their row's detail says."""
SIZES = {"quick": QUICK, "standard": STANDARD, "full": FULL}    # by `settings.SIZES` name
CONTROL = Sizes(4, 16, (3,), (8,), None)     # the negative control: enough to see last-bit divergence


def plain_tokens(sizes: Sizes) -> int:
    """Tokens per prompt of the plain layouts' runs (the baseline always decodes max_tokens)."""
    return sizes.max_tokens if sizes.plain_max_tokens is None else min(sizes.plain_max_tokens, sizes.max_tokens)


def shares(n_prompts: int, weights) -> list[tuple]:
    """The prompt indices of each run when `weights` deal n_prompts out (`Sizes`); every prompt once."""
    slots = [j for j, w in enumerate(weights) for _ in range(int(w))]
    out = [[] for _ in weights]
    for i in range(n_prompts):
        out[slots[i % len(slots)]].append(i)
    return [tuple(x) for x in out]


def _dealt(n_prompts: int, weights, n_runs: int) -> list:
    """Each run's prompt share (`shares`), or None for every run when there are no weights."""
    if weights is None:
        return [None] * n_runs
    if len(weights) != n_runs:
        raise ValueError(f"{len(weights)} weights for {n_runs} runs")
    return shares(n_prompts, weights)


def spec_pairs(sizes: Sizes, layouts: list) -> list:
    """The (kappa, Layout) pairs of the speculative runs: the cross product of the kappas with batch 1
    and `layouts` (the adapter's), or `sizes.spec_pairs` as given."""
    if sizes.spec_pairs is None:
        return [(k, x) for k in sizes.kappas for x in [Layout(1)] + list(layouts)]
    return [(int(k), x) for k, x in sizes.spec_pairs]


@dataclass
class Divergence:
    prompt: int
    output_index: int                        # first output index where ids or logits rows differ
    kind: str                                # REDUCTION_ORDER, LOGIC, LOGITS_ONLY or NO_LOGITS
    baseline_token: int | None = None        # the tokens at the first differing id (None: ids equal)
    other_token: int | None = None
    first_token_index: int | None = None
    first_logit_token_index: int | None = None
    vocab_id: int | None = None              # first differing vocabulary entry of that row
    baseline_logit: float | None = None
    other_logit: float | None = None
    max_abs_diff: float | None = None
    top2_margin: float | None = None         # baseline row's top-1 minus top-2 logit there
    relative_margin: float | None = None     # top2_margin / max(1, |top-1 logit|)

    def text(self) -> str:
        parts = [f"prompt {self.prompt}"]
        if self.first_logit_token_index is not None and self.vocab_id is not None:
            parts.append(f"first differing logit at output {self.first_logit_token_index}, vocab {self.vocab_id}: "
                         f"{self.baseline_logit!r} vs {self.other_logit!r} (max |diff| {self.max_abs_diff:.2g})")
        if self.first_token_index is not None:
            parts.append(f"first differing token at output {self.first_token_index}: {self.baseline_token} vs "
                         f"{self.other_token}")
        else:
            parts.append("token ids identical")
        if self.top2_margin is not None:
            parts.append(f"top-2 margin there {self.top2_margin:.3g} (relative {self.relative_margin:.2g})")
        parts.append(f"kind: {self.kind}")
        return "; ".join(parts)


@dataclass
class Comparison:
    spec: str
    layout: str
    n_prompts: int
    n_identical: int = 0                     # token ids and every logits row identical
    n_tokens_identical: int = 0
    logits_compared: bool = True
    info: dict = field(default_factory=dict)
    divergence: Divergence | None = None


def _layouts(sizes: Sizes, info) -> list:
    out = []
    if BATCH in info.layouts:
        out += [Layout(b) for b in sizes.batch_sizes if b <= info.max_batch_size]
    if RAGGED in info.layouts and sizes.ragged_batch:
        out.append(Layout(min(sizes.ragged_batch, info.max_batch_size), ragged=True))
    return out


def _offered(layout, spec_layouts, info):
    """The adapter's layout for a design pair's `layout` (a ragged one at the adapter's ragged batch size),
    or None where it speculates in no such layout."""
    if layout.ragged:
        return next((x for x in spec_layouts if x.ragged), None)
    return layout if layout in spec_layouts else None


def _prompts(info, n: int, rng) -> tuple:
    """The adapter's own prompts first, then seeded random ones with repeated spans (so that prompt
    lookup finds something to propose)."""
    prompts = list(info.prompts[:n])
    while len(prompts) < n:
        span = rng.integers(0, info.vocab_size, int(rng.integers(*RANDOM_PROMPT_LENGTHS)))
        prompts.append(tuple(int(t) for t in np.concatenate([span, span[: len(span) // 2]])))
    return tuple(prompts)


class _Runner:
    """decode_greedy calls for one variant, in chunks, validated."""

    def __init__(self, engine, info, variant, prompts, max_tokens, ctx, plain_max_tokens=None):
        self.engine, self.info, self.variant, self.prompts, self.L, self.ctx = engine, info, variant, prompts, max_tokens, ctx
        self.plain_L = max_tokens if plain_max_tokens is None else plain_max_tokens   # plain runs but the baseline
        self.subsets: dict = {}       # (spec, layout) -> its prompt indices, for a run on a share of them
        self._baseline_rows = None    # (chunk, its logits rows) of the last baseline chunk re-decoded

    def tokens_of(self, spec, layout) -> int:
        """New tokens per prompt of the run (spec, layout): plain_L for plain layouts, L otherwise."""
        return self.plain_L if spec == Spec() and layout != Layout(1) else self.L

    def prompts_of(self, spec, layout) -> tuple:
        """The prompt indices the run (spec, layout) decodes: all, or its share."""
        return self.subsets.get((spec, layout), tuple(range(len(self.prompts))))

    def chunks(self, layout, spec=None):
        """The run's calls: its prompt indices in groups of max(CHUNK, batch size)."""
        idx = self.prompts_of(spec, layout) if spec is not None else tuple(range(len(self.prompts)))
        size = max(CHUNK, layout.batch_size)
        return [idx[i:i + size] for i in range(0, len(idx), size)]

    def call(self, idx, spec, layout, logits):
        req = GreedyRequest(tuple(self.prompts[i] for i in idx), self.tokens_of(spec, layout), spec, layout, self.variant, logits)
        what = f"{self.engine.name}.decode_greedy({spec}, batch {layout}, variant {self.variant})"
        return check_result(invoke(self.engine, "decode_greedy", req, ctx=self.ctx, what=what), req,
                            self.info.vocab_size, what)

    def run_chunk(self, spec, layout, idx):
        """(tokens, digests or None, info) of one call: the prompts `idx` under (spec, layout)."""
        r = self.call(idx, spec, layout, DIGESTS)
        d = digests_of(r)
        return [tuple(int(t) for t in row) for row in r.tokens], None if d is None else list(d), r.info

    def run(self, spec, layout):
        """(tokens per prompt, digests per prompt or None, info of the last call)."""
        return _joined([self.run_chunk(spec, layout, idx) for idx in self.chunks(layout, spec)])

    def rows_of(self, prompt, spec, layout):
        """The logits rows of `prompt` in the call it belongs to under (spec, layout), or None. The
        baseline's chunk is kept (one chunk: its rows are up to prompts x tokens x V floats), since
        every divergence in it is judged against the same baseline rows."""
        for idx in self.chunks(layout, spec):
            if prompt in idx:
                baseline = spec == Spec() and layout == Layout(1)
                if baseline and self._baseline_rows is not None and self._baseline_rows[0] == idx:
                    logits = self._baseline_rows[1]
                else:
                    logits = self.call(idx, spec, layout, ROWS).logits
                    if baseline:
                        self._baseline_rows = (idx, logits)
                return None if logits is None else np.asarray(logits[list(idx).index(prompt)])


def _span(idx) -> str:
    """Prompt indices for a status line: "0..7", or "3, 19, ... (8)" for a share."""
    idx = tuple(idx)
    if idx == tuple(range(idx[0], idx[0] + len(idx))):
        return f"{idx[0]}..{idx[-1]}"
    return f"{', '.join(map(str, idx[:3]))}, ... ({len(idx)})" if len(idx) > 3 else ", ".join(map(str, idx))


def _joined(parts):
    """One run's (tokens, digests or None, info of its last call that gave one) from its chunks' in order."""
    tokens, digests, info = [], [], {}
    for t, d, i in parts:
        tokens += t
        digests = None if d is None or digests is None else digests + d
        info = i or info
    return tokens, digests, info


ROW_COST = {1: 3.2, 2: 1.8}   # relative cost of a row in a launch of M rows (M >= 3: 1), our engine measured


def _cost(spec, layout, n_prompts, n_tokens) -> float:
    """A rough relative cost of one call, only to hand the longest calls out first (results do not
    depend on it): rows ~ (1 + 0.3 kappa) per token, dearer per row in launches of 1 or 2 rows."""
    rows = n_prompts * n_tokens * (1 + 0.3 * spec.kappa)
    return rows * ROW_COST.get(layout.batch_size * (spec.kappa + 1), 1.0)


def classify(base_row, other_row, token_flipped: bool):
    """(top-2 margin, relative margin, kind) of a divergence judged at the baseline row `base_row` and
    the other run's row at the same output index: a flipped token at a relative margin below
    REDUCTION_ORDER_MARGIN is REDUCTION_ORDER, above it LOGIC, and so is a flip from identical rows;
    rows that differ without a flip are LOGITS_ONLY."""
    b = np.asarray(base_row, np.float64)
    top = np.sort(b)[-2:]
    margin = float(top[1] - top[0])
    relative = margin / max(1.0, abs(float(top[1])))
    if not token_flipped:
        return margin, relative, LOGITS_ONLY
    if np.array_equal(np.asarray(base_row), np.asarray(other_row)):
        return margin, relative, LOGIC       # the same row, a different token: the decision is wrong
    return margin, relative, REDUCTION_ORDER if relative < REDUCTION_ORDER_MARGIN else LOGIC


def _divergence(runner, base, other, spec, layout, i, prompt=None) -> Divergence:
    """The first divergence of result i of the run (spec, layout) -- prompt `prompt` (default i) --
    from the baseline's result for that prompt (`base` and `other` in the run's prompt order)."""
    (bt, bd), (ot, od) = base, other
    prompt = i if prompt is None else prompt
    tok_j = next((j for j, (x, y) in enumerate(zip(bt[i], ot[i])) if x != y), None)
    log_j = None if bd is None or od is None else next(
        (j for j, (x, y) in enumerate(zip(bd[i], od[i])) if x != y), None)
    first = min(j for j in (tok_j, log_j) if j is not None)
    d = Divergence(prompt=prompt, output_index=first, kind=NO_LOGITS, first_token_index=tok_j,
                   first_logit_token_index=log_j)
    if tok_j is not None:
        d.baseline_token, d.other_token = bt[i][tok_j], ot[i][tok_j]
    b_rows = runner.rows_of(prompt, Spec(), Layout(1))
    o_rows = runner.rows_of(prompt, spec, layout)
    if b_rows is None or o_rows is None:
        return d
    j = first if log_j is None else log_j            # the first differing logits row, if any
    diff = np.flatnonzero(b_rows[j] != o_rows[j])
    if diff.size:
        b, o = b_rows[j].astype(np.float64), o_rows[j].astype(np.float64)
        v = int(diff[0])
        d.first_logit_token_index = j
        d.vocab_id, d.baseline_logit, d.other_logit = v, float(b[v]), float(o[v])
        d.max_abs_diff = float(np.abs(b - o).max())
    k = first if tok_j is None else tok_j             # judged where the token flipped
    d.top2_margin, d.relative_margin, d.kind = classify(b_rows[k], o_rows[k], tok_j is not None)
    return d


def _run_all(runner, runs: list, ctx, helpers: bool) -> dict:
    """{(spec, layout): ((tokens, digests, info), seconds)} of every run. Each run is its calls
    (`_Runner.chunks`). Where the audit may run several adapter processes (`ctx.jobs` > 1 with
    `ctx.open_engine`) and `helpers`, the calls of all runs are shared out, the costliest first (`_cost`),
    over this adapter and jobs - 1 more opened for the purpose (closed after): greedy decoding is
    deterministic, so the tokens and digests are those of one process doing them all in order. A run's
    seconds are the sum of its calls'. Progress: a status line per call, with the calls done so far
    (the CLI's heartbeat repeats the last one on a long call)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    calls = [(r, j, idx) for r in runs for j, idx in enumerate(runner.chunks(r[1], r[0]))]
    done_count, lock = [0], threading.Lock()

    def one(call, who):
        (spec, layout), j, idx = call
        with lock:
            n_done = done_count[0]
        ctx.say(f"bitwise: {runner.info.model} variant {runner.variant}: {spec}, batch {layout}, prompts "
                f"{_span(idx)} ({n_done}/{len(calls)} calls done)")
        with Timer() as t:
            out = who.run_chunk(spec, layout, idx)
        with lock:
            done_count[0] += 1
        return out, t.seconds

    def assemble(results):
        out = {}
        for r in runs:
            parts = [results[(r, j)] for j in range(len(runner.chunks(r[1], r[0])))]
            out[r] = (_joined([p for p, _ in parts]), sum(s for _, s in parts))
        return out

    extra = max(0, min(int(getattr(ctx, "jobs", 1)) - 1, len(calls) - 1))
    if not helpers or not extra or getattr(ctx, "open_engine", None) is None:
        return assemble({(c[0], c[1]): one(c, runner) for c in calls})
    order = sorted(calls, key=lambda c: -_cost(c[0][0], c[0][1], len(c[2]), runner.tokens_of(*c[0])))
    handles = []
    try:
        for _ in range(extra):
            handles.append(ctx.open_engine())
        runners = [runner] + [_Runner(h, runner.info, runner.variant, runner.prompts, runner.L, ctx, runner.plain_L)
                              for h in handles]
        for other in runners[1:]:
            other.subsets = runner.subsets
        free = list(runners)

        def task(c):
            with lock:
                who = free.pop()
            try:
                return (c[0], c[1]), one(c, who)
            finally:
                with lock:
                    free.append(who)

        with ThreadPoolExecutor(len(runners), thread_name_prefix="specverify-bitwise") as pool:
            return assemble(dict(pool.map(task, order)))
    finally:
        for h in handles:
            h.close()


def _compare(runner, base, spec, layout, other=None) -> Comparison:
    """The run (spec, layout) -- `other` if it was run already -- against the baseline `base`."""
    ot, od, info = runner.run(spec, layout) if other is None else other
    prompts = runner.prompts_of(spec, layout)    # the run's prompts, in the order of its results
    n = len(ot[0]) if ot else 0                  # a plain layout may decode fewer tokens: the baseline's first n
    bt = [base[0][p][:n] for p in prompts]
    bd = None if base[1] is None else [base[1][p][:n] for p in prompts]
    c = Comparison(str(spec), str(layout), len(bt), logits_compared=bd is not None and od is not None, info=info)
    for i in range(len(bt)):
        ids_same = bt[i] == ot[i]
        rows_same = not c.logits_compared or bd[i] == od[i]
        c.n_tokens_identical += ids_same
        c.n_identical += ids_same and rows_same
        if c.divergence is None and not (ids_same and rows_same):
            c.divergence = _divergence(runner, (bt, bd), (ot, od), spec, layout, i, prompts[i])
    return c


def _layout_key(name: str):
    return name.startswith("ragged"), len(name), name


def _shape(sizes: Sizes, comps, kappas=True) -> str:
    layouts = sorted({c.layout for c in comps}, key=_layout_key)
    text = f"{sizes.n_prompts} prompts x {sizes.max_tokens if kappas else plain_tokens(sizes)} tokens"
    if not kappas and plain_tokens(sizes) < sizes.max_tokens:
        text += f" (the first {plain_tokens(sizes)} of the baseline's {sizes.max_tokens})"
    dealt = sizes.spec_weights if kappas else sizes.plain_weights
    if kappas and sizes.spec_pairs is not None:
        counts = {}
        for c in comps:
            counts[(c.spec.rsplit("=", 1)[-1], c.layout)] = c.n_prompts
        pairs = sorted(counts, key=lambda p: (int(p[0]), _layout_key(p[1])))
        if dealt is not None:
            return text + (" dealt out over (kappa, batch) {" + ", ".join(f"({k},{x}): {counts[k, x]}" for k, x in pairs)
                           + "} (a covering design: each prompt in one pair)")
        return text + f" x (kappa, batch) {{{','.join(f'({k},{x})' for k, x in pairs)}}} (a covering design)"
    if kappas:
        text += f" x kappa {{{','.join(map(str, sizes.kappas))}}}"
    if dealt is not None:
        counts = {c.layout: c.n_prompts for c in comps}
        return text + " dealt out over batch {" + ", ".join(f"{x}: {counts[x]}" for x in layouts) + "} (each prompt in one)"
    return text + f" x batch {{{','.join(layouts)}}}"


def _summary(comps) -> dict:
    return {"n_comparisons": sum(c.n_prompts for c in comps), "n_identical": sum(c.n_identical for c in comps),
            "runs": [asdict(c) for c in comps]}


def _first(comps):
    return next(((c, c.divergence) for c in comps if c.divergence is not None), None)


def _row(name, comps, sizes, info, *, control, what, seconds, kappas, extra=None) -> CheckResult:
    s = _summary(comps)
    n, same = s["n_comparisons"], s["n_identical"]
    logits = all(c.logits_compared for c in comps)
    compared = "token ids and every logits row" if logits else "token ids (the adapter returned no logits rows)"
    first = _first(comps)
    div = "none" if first is None else f"{first[0].spec} batch {first[0].layout}: {first[1].text()}"
    spec_kappas = sorted({int(c.spec.rsplit("=", 1)[-1]) for c in comps if c.spec != "plain"})
    data = {"bitwise": dict(s, n_tokens_identical=sum(c.n_tokens_identical for c in comps), n_prompts=sizes.n_prompts,
                            max_tokens=sizes.max_tokens if kappas else plain_tokens(sizes),
                            kappas=spec_kappas if kappas else [],
                            batches=sorted({c.layout for c in comps}, key=_layout_key), logits_compared=logits,
                            pairs=[[c.spec, c.layout] for c in comps],
                            first_divergence=None if first is None else asdict(first[1])),
            "model": info.model}
    data.update(extra or {})
    if control:
        seen = same < n
        data["divergence_seen"] = seen
        detail = (f"negative control, {info.model} variant {control}: {same}/{n} runs bitwise identical "
                  f"({_shape(sizes, comps, kappas)}); first divergence: {div}")
        verdict = PASS if seen else WARN
    else:
        detail = f"{info.model}: {same}/{n} {what} identical to plain decode at batch 1 in {compared} ({_shape(sizes, comps, kappas)})"
        ids_same = sum(c.n_tokens_identical for c in comps)
        if logits and ids_same != same:
            detail += f"; token ids alone identical in {ids_same}/{n}"
        if first is not None:
            detail += f"; first divergence: {div}"
        verdict = PASS if n and same == n else FAIL
    if info.note:
        detail += f"; {info.note}"
    return CheckResult(name, verdict, n=n, exact=True, seconds=seconds, detail=detail, data=data)


def _label(info, variant, role, proposer=None) -> str:
    parts = [info.model]
    if variant is not None:
        parts.append(f"{variant}:negative-control" if role == NEGATIVE_CONTROL else str(variant))
    if proposer is not None:
        parts.append(proposer)
    return ",".join(parts)


def run(engine, ctx, sizes: Sizes | None = None) -> list[CheckResult]:
    if "bitwise" not in getattr(engine, "capabilities", ()):
        return []
    what = f"{engine.name}.bitwise_info()"
    info = check_info(invoke(engine, "bitwise_info", ctx=ctx, what=what), what)
    if not any(role == SUBJECT for role in info.variants.values()):
        raise AdapterError(f"{what}: no variant has the role {SUBJECT!r}: nothing would be checked")
    rows = []
    for variant, role in info.variants.items():
        sz = CONTROL if role == NEGATIVE_CONTROL else sizes or SIZES[getattr(ctx, "size", "standard")]
        layouts = _layouts(sz, info)
        prompts = _prompts(info, sz.n_prompts, ctx.rng("bitwise", "prompts"))
        runner = _Runner(engine, info, variant, prompts, sz.max_tokens, ctx, plain_tokens(sz))
        control = variant if role == NEGATIVE_CONTROL else None
        many = len(info.proposers) > 1
        spec_max = info.max_batch_size if info.spec_max_batch_size is None else info.spec_max_batch_size
        spec_layouts = [Layout(1)] + [x for x in layouts if x.batch_size <= spec_max]
        pairs, left_pairs, pair_prompts = [], [], []
        designed = spec_pairs(sz, layouts)
        for (k, x), share in zip(designed, _dealt(len(prompts), sz.spec_weights, len(designed))):
            got = _offered(x, spec_layouts, info)
            if got is None:
                left_pairs.append((k, x))
            else:
                pairs.append((k, got))
                pair_prompts.append(share)
        spec_runs = {p: [(Spec(p, k), x) for k, x in pairs] for p in info.proposers}
        plain_runs = [(Spec(), x) for x in layouts]
        for p in info.proposers:
            for (k, x), share in zip(pairs, pair_prompts):
                if share is not None:
                    runner.subsets[(Spec(p, k), x)] = share
        plain_design = [Layout(b) for b in sz.batch_sizes] + ([Layout(sz.ragged_batch, ragged=True)] if sz.ragged_batch else [])
        plain_share = _dealt(len(prompts), sz.plain_weights, len(plain_design))
        for x in layouts:
            j = next(j for j, y in enumerate(plain_design) if (y.ragged, y.batch_size) == (x.ragged, x.batch_size)
                     or x.ragged and y.ragged)
            if plain_share[j] is not None:
                runner.subsets[(Spec(), x)] = plain_share[j]
        done = _run_all(runner, [(Spec(), Layout(1))] + [r for p in info.proposers for r in spec_runs[p]] + plain_runs,
                        ctx, helpers=role == SUBJECT)
        (tokens, digests, _), base_s = done[(Spec(), Layout(1))]
        base = (tokens, digests)
        for proposer in info.proposers:
            comps = [_compare(runner, base, sp, x, done[(sp, x)][0]) for sp, x in spec_runs[proposer]]
            seconds = sum(done[r][1] for r in spec_runs[proposer])
            rows.append(_row(f"greedy.bitwise[{_label(info, variant, role, proposer if many else None)}]", comps, sz,
                             info, control=control, what="speculative runs", seconds=seconds + base_s, kappas=True,
                             extra={"proposer": proposer, "baseline_seconds": base_s}))
        left_out = [str(x) for x in layouts if x.batch_size > spec_max]
        if left_out and info.proposers and role == SUBJECT and sz.spec_pairs is None:
            rows.append(CheckResult(f"greedy.bitwise[{_label(info, variant, role)},batch>{spec_max}]", SKIP, exact=True,
                                    detail=f"not covered: the adapter speculates at batch <= {spec_max} only "
                                           f"(left out: batch {', '.join(left_out)})"))
        elif left_pairs and info.proposers and role == SUBJECT:
            rows.append(CheckResult(f"greedy.bitwise[{_label(info, variant, role)},pairs]", SKIP, exact=True,
                                    detail="not covered: the adapter offers no such layout for the (kappa, batch) "
                                           f"pair(s) {', '.join(f'({k},{x})' for k, x in left_pairs)}"))
        if info.drafted:            # the harness's drafters on the baseline's tokens (`battery.drafted`)
            rows += drafted.rows(runner, base, info, lambda extra: _label(info, variant, role, extra),
                                 kappas=sz.kappas, control=control)
        if layouts:
            comps = [_compare(runner, base, sp, x, done[(sp, x)][0]) for sp, x in plain_runs]
            rows.append(_row(f"batch.invariance[{_label(info, variant, role)}]", comps, sz, info, control=control,
                             what="plain runs", seconds=sum(done[r][1] for r in plain_runs), kappas=False))
    if not info.proposers:
        rows.append(CheckResult(f"greedy.bitwise[{info.model}]", SKIP, exact=True,
                                detail="the adapter offers no proposer: speculative decode not compared"))
    if not info.drafted:
        rows.append(CheckResult(f"verify.width[{info.model}]", SKIP, exact=True, data={"not_covered": True},
                                detail="not covered: the adapter takes no external drafts (BitwiseInfo.drafted): the "
                                       "verify pass and rollback are not isolated (oracle and adversarial drafters)"))
    for kind in LAYOUT_KINDS:
        if kind not in info.layouts:
            rows.append(CheckResult(f"batch.invariance[{info.model},{kind}]", SKIP, exact=True,
                                    detail=f"not covered: the adapter offers no {kind} layout"))
    return rows
