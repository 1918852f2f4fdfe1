"""The exact acceptance law of whole speculative runs at engine level: how many drafts each verify step
accepts, computed from the same tables as the output law (`reference.laws`), not from samples.

A run starts from `prompt` and emits `length` tokens (the last step may overshoot; the engine cuts it).
Each step drafts k tokens from a known draft (a draft model, or any drafter whose drafts are a function
of the context) and verifies them by the chain rule (`laws.EXACT`; temperature 0: `laws.GREEDY` with
the draft's argmax). A verify step is a step with k >= 1; it accepts m of its k drafts (m = emitted - 1).
How many drafts a step makes is the engine's draft **schedule** (it changes the law, so an engine
must declare it):

    FIXED    every step drafts kappa, the first one included (`reference.toy_engine.SpecEngine`)
    CAPPED   the first token comes from the prefill (a plain step, no drafts); every later step drafts
             min(kappa, length - emitted - 1), a step with 0 drafts is a plain decode
             (`specverify.engine`; vLLM caps drafts by the tokens left the same way; OpenVINO GenAI's
             draft pipeline stops at max_new_tokens - 1, `adapters.openvino`)
    TOKENS_LEFT  every step, the first included, drafts min(kappa, length - emitted - 1) (transformers'
             assisted generation: the target verifies the first drafts with the prompt, no plain prefill;
             `AssistedCandidateGenerator._calculate_new_tokens`)
    TO_LENGTH    every step, the first included, drafts min(kappa, length - emitted): a last step may draft
             every token left, and then has no bonus when all are accepted (MLX-LM's
             `speculative_generate_step`: num_draft = min(max_tokens - ntoks, num_draft_tokens))
    PREFILL_FIXED  the prefill emits the first token (a plain step); every later step drafts kappa, the
             last one's overshoot cut after its verification (vLLM v1: the scheduler never caps the
             drafts by max_tokens, and its counters count the whole verified chunk)
    PREFILL_TO_LENGTH  the prefill emits the first token (a plain step); every later step drafts
             min(kappa, length - emitted) (llama-cpp-python: kappa drafts, of which a run that stops
             reading at `length` verifies only those up to it -- it samples lazily)

How the drafts are drawn (`draft_sampling`): "sampled" (x ~ q, the draft's transformed row) or "argmax"
(x = the draft's argmax whatever the transform, q one-hot there: vLLM's default
draft_sample_method="greedy"; `ArgmaxDraft`).

A **span drafter** (`reference.span_drafters`: llama-cpp-python's prompt lookup, vLLM's n-gram proposer)
may stand in for the draft model: its drafts are a span chosen from the context at the step's start, and
their number depends on the context. A step then drafts min(schedule's k, len(span)) tokens -- the span
cut by the schedule, which caps it as it would a draft model's kappa -- and a step whose span is empty is
a plain decode (no verify step in the trace). Its rows are one-hot, so the chain rule and sample-match
accept alike: draft j with p(d_j).

The verify rule (`rule`): "chain" (`laws.EXACT`, accept x with min(1, p(x)/q(x))), "sample-match"
(`laws.MATCH`: the target samples each position, a draft is kept while it equals the sample; accept x
with p(x)) or "block" (block verification, `reference.block`: the drafts are verified jointly;
`laws.block_chunk_law`). All three are exact in law; their acceptance differs (block >= chain >=
sample-match in expectation). Temperature 0 is `laws.GREEDY` for all three.

The law of one run is the law of its **trace**, the tuple of (k, m) of its verify steps in order,
by recursion over the prefix tree: P(trace) = sum over the emitted sequences that give it of the
product of the steps' chunk probabilities (`laws.chunk_law`). From it (`RunAcceptanceLaw`):

    A        accepted drafts of a run, sum of m           (law `accepted_pmf`, mean `mean_accepted`)
    N        verify steps of a run                        (mean `mean_verifies`)
    E        1 + E[A] / E[N]: the mean acceptance length, bonus included, that an engine's counters
             1 + accepted / verifies converge to over many runs (the seed's E)
    r_i      E[# verifies whose first i drafts are accepted] / E[# verifies with >= i drafts]: the
             per-position unconditional rate of `engine.metrics.SpecMetrics.acceptance_rates`
    step law the law of m over all verify steps (each counted with its expected number per run)

The speed this buys (the seed's cost model, memory-bound regime): S = E / (1 + kappa c), with c the
draft's cost per token over the target's; `speedup`.

Worked example (one step: V = 2, prompt (), length 1, kappa 1, FIXED, target p = (0.75, 0.25),
draft q = (0.5, 0.5) at the root): the draft is accepted with probability sum_x min(p, q) = 0.75, so
the trace law is {((1, 1),): 0.75, ((1, 0),): 0.25}, A ~ Bernoulli(0.75), N = 1, E = 1.75, r_1 = 0.75.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from .laws import EXACT, GREEDY, MATCH, Transformed, block_chunk_law, chunk_law
from .sampling import argmax_lowest
from .span_drafters import is_span_drafter
from .transforms import Transform

FIXED = "fixed"
CAPPED = "capped"
TOKENS_LEFT = "tokens-left"
TO_LENGTH = "to-length"
PREFILL_TO_LENGTH = "prefill-to-length"
PREFILL_FIXED = "prefill-fixed"
SCHEDULES = (FIXED, CAPPED, TOKENS_LEFT, TO_LENGTH, PREFILL_TO_LENGTH, PREFILL_FIXED)

SAMPLED = "sampled"
ARGMAX = "argmax"
DRAFT_SAMPLING = (SAMPLED, ARGMAX)

CHAIN = "chain"
SAMPLE_MATCH = "sample-match"
BLOCK = "block"


class _BlockSteps:
    """The sentinel RULES holds for block verification, which is not chain-shaped: its steps' laws come
    from `laws.block_chunk_law`, not from an accept/residual pair."""

    def __repr__(self) -> str:
        return "BLOCK_RULE"


BLOCK_RULE = _BlockSteps()
RULES = {CHAIN: EXACT, SAMPLE_MATCH: MATCH, BLOCK: BLOCK_RULE}

C_DRAFT = 0.165
"""The draft's cost per token over the target's the speed-up is stated at when none is given: the seed's
derived ratio for a Llama-3.2-1B draft of Llama-3-8B (0.74 ms / 4.48 ms of streamed weights, H100)."""


def check_schedule(schedule) -> str:
    if schedule not in SCHEDULES:
        raise InputError(f"draft schedule {schedule!r}: must be one of {', '.join(SCHEDULES)}")
    return schedule


def check_rule(rule) -> str:
    if rule not in RULES:
        raise InputError(f"verify rule {rule!r}: must be one of {', '.join(RULES)}")
    return rule


def drafts_at(schedule: str, kappa: int, emitted: int, length: int) -> int:
    """Drafts of the step that starts after `emitted` tokens of a run of `length` (0: a plain step)."""
    if schedule == FIXED:
        return kappa
    if emitted == 0 and schedule in (CAPPED, PREFILL_TO_LENGTH, PREFILL_FIXED):
        return 0                                    # the prefill emits the first token
    if schedule == PREFILL_FIXED:
        return kappa
    if schedule in (TO_LENGTH, PREFILL_TO_LENGTH):
        return max(0, min(kappa, length - emitted))
    return max(0, min(kappa, length - emitted - 1))


def speedup(e: float, kappa: int, c: float = C_DRAFT) -> float:
    """S = E / (1 + kappa c): tokens per unit of target time against plain decode (one token per pass)."""
    return float(e) / (1.0 + kappa * float(c))


@dataclass(frozen=True)
class RunAcceptanceLaw:
    """The exact law of a run's trace: `traces[j]` (a tuple of (drafted, accepted) per verify step) has
    probability `probs[j]`."""

    traces: tuple
    probs: np.ndarray
    kappa: int
    length: int
    schedule: str
    rule: str = CHAIN

    def index(self) -> dict:
        return {t: j for j, t in enumerate(self.traces)}

    def counts(self, runs) -> tuple:
        """(counts over `traces`, how many runs have a trace of probability 0) for observed run traces,
        each a sequence of (drafted, accepted) per verify step."""
        index = self.index()
        out = np.zeros(len(self.traces), np.int64)
        impossible = 0
        for run in runs:
            j = index.get(tuple(tuple(int(x) for x in step) for step in run))
            if j is None:
                impossible += 1
            else:
                out[j] += 1
        return out, impossible

    def accepted(self) -> np.ndarray:
        """A of each trace: int [len(traces)]."""
        return np.array([sum(m for _, m in t) for t in self.traces], np.int64)

    def verifies(self) -> np.ndarray:
        return np.array([len(t) for t in self.traces], np.int64)

    def drafted(self) -> np.ndarray:
        return np.array([sum(k for k, _ in t) for t in self.traces], np.int64)

    def accepted_pmf(self) -> np.ndarray:
        """P(A = a) for a = 0..max A: float64 [max A + 1]."""
        a = self.accepted()
        return np.bincount(a, weights=self.probs, minlength=int(a.max()) + 1)

    @property
    def mean_accepted(self) -> float:
        return float((self.accepted() * self.probs).sum())

    @property
    def var_accepted(self) -> float:
        a = self.accepted()
        return float(((a - self.mean_accepted) ** 2 * self.probs).sum())

    @property
    def mean_verifies(self) -> float:
        return float((self.verifies() * self.probs).sum())

    @property
    def mean_drafted(self) -> float:
        return float((self.drafted() * self.probs).sum())

    @property
    def E(self) -> float:                                        # noqa: N802 - the seed's symbol
        return 1.0 + self.mean_accepted / self.mean_verifies if self.mean_verifies else float("nan")

    def r(self) -> np.ndarray:
        """r_1..r_kappa: float64 [kappa] (nan where no verify drafts that many)."""
        hit = np.zeros(self.kappa)
        drafted = np.zeros(self.kappa)
        for t, p in zip(self.traces, self.probs):
            for k, m in t:
                drafted[:k] += p
                hit[:m] += p
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(drafted > 0, hit / np.where(drafted > 0, drafted, 1.0), np.nan)

    def e_range(self, n: int, level: float) -> tuple:
        """The central 1 - `level` range of E observed over n runs, 1 + sum A / sum N, under this law: by
        the delta method, E_hat - E ~ mean(D) / E[N] with D = A - (E - 1) N per run (mean 0), so
        E +- z_{1 - level/2} sd(D) / (E[N] sqrt(n)). Normal approximation (the counters' ratio has no
        closed-form law; the totals test itself is exact)."""
        from scipy.stats import norm

        d = self.accepted() - (self.E - 1.0) * self.verifies()
        half = norm.isf(level / 2.0) * float(np.sqrt((d ** 2 * self.probs).sum() / n)) / self.mean_verifies
        return self.E - half, self.E + half

    def step_law(self) -> np.ndarray:
        """The law of m (accepted drafts) of a verify step, steps weighted by their expected number per
        run: float64 [kappa + 1]."""
        w = np.zeros(self.kappa + 1)
        for t, p in zip(self.traces, self.probs):
            for _, m in t:
                w[m] += p
        return w / w.sum() if w.sum() > 0 else w

    def summary(self, c: float = C_DRAFT) -> dict:
        return {"E": self.E, "r": [float(x) for x in self.r()], "mean_accepted": self.mean_accepted,
                "mean_verifies": self.mean_verifies, "step_law": [float(x) for x in self.step_law()],
                "c": c, "S": speedup(self.E, self.kappa, c)}


def run_acceptance_law(target, draft, prompt=(), kappa: int = 2, length: int = 4,
                       transform: Transform | None = None, schedule: str = FIXED,
                       verify_rule: str = CHAIN) -> RunAcceptanceLaw:
    """The exact trace law of runs of `length` tokens after `prompt` (see the module docstring). `draft` is a
    draft model or a span drafter (`reference.span_drafters.SpanDrafter`: k depends on the context)."""
    check_schedule(schedule)
    check_rule(verify_rule)
    if kappa < 1 or length < 1:
        raise InputError("the acceptance law needs kappa >= 1 and length >= 1")
    spans = is_span_drafter(draft)
    if not spans and draft.vocab_size != target.vocab_size:
        raise InputError(f"draft vocabulary {draft.vocab_size} != target vocabulary {target.vocab_size}")
    transform = transform or Transform()
    greedy = transform.greedy
    rule = GREEDY if greedy else RULES[verify_rule]
    t_model, d_model = Transformed(target, transform), Transformed(draft, transform)
    prompt = tuple(int(x) for x in prompt)
    memo: dict = {}

    def add(out: dict, key, value: float) -> None:
        if value > 0:
            out[key] = out.get(key, 0.0) + value

    def rec(prefix: tuple) -> dict:
        """{trace of the rest of the run: probability} after `prefix` (prompt + emitted tokens)."""
        if prefix in memo:
            return memo[prefix]
        emitted = len(prefix) - len(prompt)
        k = drafts_at(schedule, kappa, emitted, length)
        step_draft = d_model
        if spans and k > 0:                         # the span proposed from this context, cut by the schedule
            span = tuple(int(x) for x in draft.propose(prefix, kappa))[:k]
            k, step_draft = len(span), SpanRows(prefix, span, target.vocab_size)
        out: dict = {}
        if k == 0:
            p = t_model.probs(prefix)
            row = np.zeros_like(p) if greedy else p
            if greedy:
                row[int(np.argmax(p))] = 1.0
            for y in np.flatnonzero(row > 0):
                tails = {(): 1.0} if emitted + 1 >= length else rec(prefix + (int(y),))
                for tail, pt in tails.items():
                    add(out, tail, row[y] * pt)
        else:
            chunks = (block_chunk_law(t_model, step_draft, prefix, k) if rule is BLOCK_RULE
                      else chunk_law(rule, t_model, step_draft, prefix, k, deterministic=greedy))
            for chunk, pc in chunks.items():
                step = ((k, len(chunk) - 1),)
                tails = {(): 1.0} if emitted + len(chunk) >= length else rec(prefix + tuple(chunk))
                for tail, pt in tails.items():
                    add(out, step + tail, pc * pt)
        memo[prefix] = out
        return out

    law = rec(prompt)
    traces = tuple(sorted(law))
    return RunAcceptanceLaw(traces, np.array([law[t] for t in traces], np.float64), int(kappa), int(length), schedule,
                            verify_rule)


# ----------------------------------------------------------------------------- drafters without a model

class SpanRows:
    """The draft rows of one step of a span drafter (`reference.span_drafters`): after `prefix` + the
    first j drafts, one-hot at span[j]. The span is fixed at the step's start (not re-matched per
    position), which is why a span drafter is not a draft "model" of the prefix alone."""

    def __init__(self, prefix, span, vocab_size: int):
        self.prefix, self.span, self.vocab_size = tuple(prefix), tuple(span), int(vocab_size)

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        j = len(prefix) - len(self.prefix)
        row = np.zeros(self.vocab_size)
        row[self.span[j]] = 1.0
        return row


class ArgmaxDraft:
    """A draft model that drafts its argmax (lowest id on ties) whatever the transform, q one-hot there:
    the chain rule then accepts x with p(x). vLLM's draft_sample_method="greedy" (its default)."""

    def __init__(self, model):
        self.model = model
        self.vocab_size = int(model.vocab_size)

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        row = np.zeros(self.vocab_size)
        row[argmax_lowest(self.model.probs(prefix))] = 1.0
        return row


class LookupDrafter:
    """Prompt lookup as a draft "model" whose drafts are a function of the context: after a prefix, the
    token that followed the latest earlier occurrence of its last n tokens (n = n_max .. 1), else
    `fallback`; its row q is one-hot there (probability 1), so the chain rule accepts it with p(x).
    It has the toy model's interface (`probs`, `probs_at`, `logits_at`, `table`), so the reference
    engine drafts with it and `run_acceptance_law` computes its law, like any draft model's.

    Worked example (n_max 2): after (1, 2, 3, 1, 2) the last two tokens (1, 2) occurred at 0, followed
    by 3: it drafts 3; then after (1, 2, 3, 1, 2, 3), (2, 3) occurred at 1, followed by 1."""

    def __init__(self, vocab_size: int, n_max: int = 2, fallback: int = 0):
        self.vocab_size, self.n_max, self.fallback = int(vocab_size), int(n_max), int(fallback)

    @property
    def law_key(self) -> tuple:
        return ("lookup", self.vocab_size, self.n_max, self.fallback)

    def propose(self, prefix) -> int:
        seq = tuple(int(t) for t in prefix)
        for n in range(min(self.n_max, len(seq) - 1), 0, -1):
            pattern = seq[len(seq) - n:]
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start:start + n] == pattern:
                    return seq[start + n]
        return self.fallback

    def logits_at(self, index) -> np.ndarray:
        from .tabulated import prefix_of

        index = np.asarray(index, np.int64).reshape(-1)
        out = np.full((index.size, self.vocab_size), -np.inf)
        for r, i in enumerate(index):
            out[r, self.propose(prefix_of(int(i), self.vocab_size))] = 0.0
        return out

    def probs_at(self, index, transform: Transform | None = None) -> np.ndarray:
        from .transforms import apply
        return apply(self.logits_at(index), transform)

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        from .toy import prefix_index
        return self.probs_at(np.array([prefix_index(tuple(prefix), self.vocab_size)]), transform)[0]

    def table(self, max_len: int, transform: Transform | None = None) -> np.ndarray:
        n = (self.vocab_size ** (max_len + 1) - 1) // (self.vocab_size - 1)
        return self.probs_at(np.arange(n), transform)


# ----------------------------------------------------------------------------- sums of runs

def sum_pmf(pmf, n: int) -> np.ndarray:
    """The law of the sum of n independent draws of `pmf` (over 0..len-1): float64 [n (len-1) + 1], by
    one FFT (pmf's transform to the n-th power; clipped at 0 and renormalised). Absolute error about
    1e-16 times the FFT length: p-values below ~1e-10 read as that noise floor (they are that small or smaller)."""
    pmf = np.asarray(pmf, np.float64)
    if n < 1:
        raise InputError(f"sum of {n} runs: n must be >= 1")
    size = n * (pmf.size - 1) + 1
    fft_len = 1 << int(np.ceil(np.log2(max(size, 2))))
    out = np.fft.irfft(np.fft.rfft(pmf, fft_len) ** n, fft_len)[:size]
    out = np.clip(out, 0.0, None)
    return out / out.sum()


@dataclass(frozen=True)
class TotalTest:
    """The exact two-sided test of an observed total of accepted drafts over n runs."""

    observed: int
    n: int
    mean: float                     # n E[A]
    p_value: float
    low: int                        # the exact law's central 1 - level range of the total
    high: int
    level: float

    @property
    def direction(self) -> str:
        return "below" if self.observed < self.mean else "above" if self.observed > self.mean else "equal"


def total_test(law: RunAcceptanceLaw, observed: int, n: int, level: float = 1e-3) -> TotalTest:
    """Two-sided p-value 2 min(P(S <= s), P(S >= s)) (capped at 1) of the total s = `observed` of n runs,
    S the exact law of the sum (`sum_pmf`); and S's central range at `level` (level/2 in each tail)."""
    pmf = sum_pmf(law.accepted_pmf(), n)
    s = int(observed)
    if s < 0 or s >= pmf.size:
        return TotalTest(s, n, n * law.mean_accepted, 0.0, 0, pmf.size - 1, level)
    cdf = np.cumsum(pmf)
    lower = float(cdf[s])
    upper = float(1.0 - cdf[s - 1]) if s > 0 else 1.0
    p = min(1.0, 2.0 * min(lower, upper))
    low = int(np.searchsorted(cdf, level / 2.0))
    high = int(np.searchsorted(cdf, 1.0 - level / 2.0))
    return TotalTest(s, n, n * law.mean_accepted, p, low, min(high, pmf.size - 1), level)


__all__ = ["LookupDrafter", "SpanRows", "FIXED", "CAPPED", "SCHEDULES", "C_DRAFT", "RunAcceptanceLaw", "run_acceptance_law", "drafts_at",
           "speedup", "sum_pmf", "total_test", "TotalTest", "check_schedule", "TOKENS_LEFT"]
