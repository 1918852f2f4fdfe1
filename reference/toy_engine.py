"""A speculative engine over toy models, vectorised over N independent runs (the engine-level protocol).

    generate(target, draft, prompt, kappa, transform, seed, n, length) -> (tokens [n, length], info)

Each run starts from `prompt` and repeats one speculative step until it has `length` new tokens:

    1. draft   kappa tokens, one position at a time: q_i = draft(draft_context + x_<i) seen through
               `transform`, x_i drawn from q_i (temperature 0: the draft's argmax, q one-hot)
    2. score   p_i = target(target_context + x_<i) for i = 0..kappa, seen through `transform`
    3. verify  one ragged VerifyBatch of all live runs through `verify(batch, coins)` (a sampler:
               the fast reference by default, or the adapter under audit when the harness drives a
               sampler-level adapter through whole runs)
    4. commit  the emitted tokens are appended to the run, to the target's context and to the draft's
               context (the toy model's "KV cache": the token prefix it conditions on)

Randomness: one numpy Generator seeded by `seed` draws, per step, the draft tokens' uniforms, then the
acceptance and final coins of the batch. `info` counts {"num_steps", "num_drafted", "num_accepted"}
over all runs (an accepted draft is every emitted token of a step but the last), and gives each run's
verify steps in order as "verify_counts": [n] lists of (drafted, accepted) pairs (the trace whose exact
law is `reference.acceptance.run_acceptance_law` with schedule "fixed").

Distributions come from a per-(model, transform) table of every prefix up to the longest one a correct
engine can see (cheap for the toy vocabularies), and from the model directly beyond it. The mutants
of the zoo override one hook each: `draft_transform`, `verify_transform`, `propose`, `target_segment`,
`draft_segment`.

With logits processors (`generate(..., processors=Processors(...))`, `reference.processors`) every draft
and target row at draft position i is processed with prompt + committed output + drafts 0..i-1, the
grammar state advances through the drafts and is rolled back to the emitted tokens after the verify,
and a run ends at its first stop token (PAD after it): `generate_processed`. Its hooks, one per bug
class of the processor mutants: `history`, `row_settings`, `output_count`, `grammar_row_state`,
`grammar_commit`, `cut_at_stop`.
"""

from __future__ import annotations

import numpy as np

from specverify import __version__
from specverify.errors import InputError

from . import fast
from .batch import PAD, Coins, VerifyBatch
from .toy import prefix_indices
from .processors import NAMES, Processors, min_p_filter, process
from .transforms import Transform, apply
from .vector import inverse_cdf

TABLE_MAX_ROWS = 1 << 20        # prefixes tabled per (model, transform)
PROCESSOR_NAMES = NAMES


class _Rows:
    """probs(model, transform, prefix indices [n], max_len) -> [n, V], tabled up to max_len tokens."""

    def __init__(self):
        self.tables: dict = {}

    def __call__(self, model, transform: Transform, idx, max_len: int):
        vocab = model.vocab_size
        key = (id(model), transform, max_len)
        table = self.tables.get(key)
        if table is None:
            n_rows = (vocab ** (max_len + 1) - 1) // (vocab - 1)
            table = model.table(max_len, transform) if n_rows <= TABLE_MAX_ROWS else np.zeros((0, vocab))
            self.tables[key] = (model, table)           # keep the model alive: the key holds its id
        else:
            table = table[1]
        inside = idx < table.shape[0]
        if inside.all():
            return table[idx]
        out = np.empty((idx.size, vocab))
        out[inside] = table[idx[inside]]
        out[~inside] = model.probs_at(idx[~inside], transform)
        return out


class SpecEngine:
    """The engine-level protocol implemented over toy models (see the module docstring)."""

    name = "toy-engine"
    version = __version__
    capabilities = {"engine"}
    draft_schedule = "fixed"         # every step drafts kappa (`reference.acceptance.FIXED`)

    def __init__(self, verify=None):
        self._verify = verify if verify is not None else fast.verify_batch
        self._rows = _Rows()

    # ------------------------------------------------------------------ hooks (a mutant overrides one)

    def draft_transform(self, transform: Transform) -> Transform:
        """The transform the draft's rows are seen through (the same as the target's)."""
        return transform

    def propose(self, q: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draft tokens from the draft rows q [n, V] with uniforms u [n]."""
        return inverse_cdf(q, u)

    def verify_transform(self, draft_transform: Transform) -> Transform:
        """The transform of the draft rows handed to the verifier: the one the drafts were drawn with."""
        return draft_transform

    def target_segment(self, drafts: np.ndarray, emitted: np.ndarray) -> np.ndarray:
        """Tokens [m, w] appended to the target's context after a step (-1 = none): the emitted ones."""
        return emitted

    def draft_segment(self, drafts: np.ndarray, emitted: np.ndarray) -> np.ndarray:
        """Tokens appended to the draft's context after a step: the emitted ones."""
        return emitted

    # ------------------------------------------------------------------ the loop

    def generate(self, target, draft, prompt, kappa: int, transform: Transform | None, seed: int, n: int,
                 length: int, processors: Processors | None = None):
        if processors is not None and processors.active():
            return self.generate_processed(target, draft, prompt, kappa, transform, seed, n, length, processors)
        transform = transform or Transform()
        prompt = [int(t) for t in prompt]
        vocab = target.vocab_size
        if draft.vocab_size != vocab:
            raise InputError(f"draft vocabulary {draft.vocab_size} != target vocabulary {vocab}")
        if kappa < 1 or n < 1 or length < 1:
            raise InputError("generate needs kappa >= 1, n >= 1 and length >= 1")
        rng = np.random.default_rng(seed)
        greedy = transform.greedy
        d_transform = self.draft_transform(transform)
        max_len = len(prompt) + length - 1 + kappa       # the longest prefix a correct engine scores
        tokens = np.full((n, length + kappa + 1), PAD, np.int64)   # generated tokens (may overshoot)
        done_len = np.zeros(n, np.int64)
        t_ctx = _Contexts(n, prompt, vocab)
        d_ctx = _Contexts(n, prompt, vocab)
        info = {"num_steps": 0, "num_drafted": 0, "num_accepted": 0}
        traces: list = [[] for _ in range(n)]
        info["verify_counts"] = traces
        live = np.arange(n)
        while live.size:
            m = live.size
            # 1. draft
            drafts = np.empty((m, kappa), np.int64)
            q_rows = np.empty((m, kappa, vocab))
            v_transform = self.verify_transform(d_transform)
            q_verify = q_rows if v_transform == d_transform else np.empty_like(q_rows)
            u = rng.random((m, kappa))
            for i in range(kappa):
                idx = d_ctx.index(live, drafts[:, :i])
                q = self._rows(draft, d_transform, idx, max_len)
                q_rows[:, i] = q
                if q_verify is not q_rows:
                    q_verify[:, i] = self._rows(draft, v_transform, idx, max_len)
                drafts[:, i] = np.argmax(q, axis=1) if greedy else self.propose(q, u[:, i])
            # 2. score
            p_rows = np.empty((m, kappa + 1, vocab))
            for i in range(kappa + 1):
                p_rows[:, i] = self._rows(target, transform, t_ctx.index(live, drafts[:, :i]), max_len)
            # 3. verify
            draft_probs = None if greedy else q_verify
            batch = VerifyBatch(
                draft_token_ids=drafts.reshape(-1),
                num_draft_tokens=np.full(m, kappa, np.int64),
                target_probs=p_rows.reshape(-1, vocab),
                draft_probs=None if draft_probs is None else np.asarray(draft_probs).reshape(-1, vocab),
                greedy=np.full(m, greedy),
            )
            coins = Coins(rng.random(m * kappa), rng.random(m))
            out = np.asarray(self._verify(batch, coins))
            # 4. commit
            n_emit = (out != PAD).sum(axis=1)
            info["num_steps"] += m
            info["num_drafted"] += m * kappa
            info["num_accepted"] += int((n_emit - 1).sum())
            for r, a in zip(live.tolist(), (n_emit - 1).tolist()):
                traces[r].append((kappa, a))
            width = out.shape[1]
            cols = done_len[live][:, None] + np.arange(width)[None, :]
            ok = out != PAD
            tokens[np.repeat(live, width)[ok.reshape(-1)], cols[ok]] = out[ok]
            done_len[live] += n_emit
            t_ctx.append(live, self.target_segment(drafts, out))
            d_ctx.append(live, self.draft_segment(drafts, out))
            live = live[done_len[live] < length]
        return tokens[:, :length], info


    # ------------------------------------------------------------------ processor hooks (one a mutant)

    processors = set(PROCESSOR_NAMES)      # the engine-level processors it implements (protocol.py)

    def history(self, committed: np.ndarray, lens: np.ndarray, drafts: np.ndarray, i: int) -> np.ndarray:
        """The output tokens [m, w] (PAD after them) the row at draft position i is processed with:
        the committed output followed by drafts 0..i-1."""
        return append_tokens(committed, lens, drafts[:, :i])

    def row_settings(self, settings: Processors, i: int, kappa: int, role: str) -> Processors:
        """The processors applied to the `role` ("draft" or "target") rows at draft position i
        (i == kappa: the bonus row): all of them, to both models' rows."""
        return settings

    def output_count(self, lens: np.ndarray, i: int, kappa: int) -> np.ndarray:
        """How many output tokens min_tokens counts at draft position i: the committed ones + i."""
        return lens + i

    def grammar_row_state(self, grammar, state: np.ndarray, drafts: np.ndarray, i: int) -> np.ndarray:
        """The grammar state of the rows at draft position i: the committed state advanced through
        drafts 0..i-1."""
        return matcher_walk(grammar, state, drafts[:, :i])

    def grammar_commit(self, grammar, state: np.ndarray, drafts: np.ndarray, emitted: np.ndarray) -> np.ndarray:
        """The committed grammar state after a step: advanced through the emitted tokens only (what
        the drafts did to it is rolled back)."""
        return matcher_walk(grammar, state, emitted)

    def cut_at_stop(self, emitted: np.ndarray, stop_tokens: tuple) -> tuple:
        """(emitted with everything after each row's first stop token set to PAD, bool [m] run ended)."""
        if not stop_tokens:
            return emitted, np.zeros(emitted.shape[0], bool)
        hit = np.isin(emitted, np.asarray(stop_tokens, np.int64))
        ended = hit.any(axis=1)
        first = np.where(ended, hit.argmax(axis=1), emitted.shape[1])
        out = np.where(np.arange(emitted.shape[1])[None, :] > first[:, None], PAD, emitted)
        return out, ended

    def processed_rows(self, model, role, idx, prompt, committed, lens, gstate, drafts, i, kappa, transform,
                       settings: Processors) -> np.ndarray:
        """Distributions [m, V] of `model` (`role` "draft" or "target") at draft position i, processed
        (the hooks above)."""
        s = self.row_settings(settings, i, kappa, role)
        hist = self.history(committed, lens, drafts, i)
        g = None if s.grammar is None else self.grammar_row_state(s.grammar, gstate, drafts, i)
        logits = process(model.logits_at(idx), prompt, hist, s, n_out=self.output_count(lens, i, kappa),
                         grammar_state=g)
        return min_p_filter(np.atleast_2d(apply(logits, transform)), s.min_p)

    def generate_processed(self, target, draft, prompt, kappa, transform, seed, n, length, settings: Processors):
        """The loop of `generate` with logits processors: row i of a step is processed with the prefix
        prompt + committed output + drafts 0..i-1; a run ends at its first stop token (PAD after it).
        The same random draws per step as the plain loop (draft uniforms, then the batch's coins) and
        the same hooks, plus the processor hooks above. The output count and the grammar state are
        kept as engine state (a real engine's counters and matcher), the penalties' counts are read
        from the history."""
        transform = transform or Transform()
        prompt = tuple(int(t) for t in prompt)
        vocab = target.vocab_size
        if draft.vocab_size != vocab:
            raise InputError(f"draft vocabulary {draft.vocab_size} != target vocabulary {vocab}")
        if kappa < 1 or n < 1 or length < 1:
            raise InputError("generate needs kappa >= 1, n >= 1 and length >= 1")
        settings.check_vocab(vocab)
        rng = np.random.default_rng(seed)
        greedy = transform.greedy
        d_transform = self.draft_transform(transform)
        v_transform = self.verify_transform(d_transform)
        tokens = np.full((n, length + kappa + 1), PAD, np.int64)
        done_len = np.zeros(n, np.int64)
        ended = np.zeros(n, bool)
        gstate = np.zeros(n, np.int64)
        t_ctx = _Contexts(n, prompt, vocab)
        d_ctx = _Contexts(n, prompt, vocab)
        info = {"num_steps": 0, "num_drafted": 0, "num_accepted": 0}
        traces: list = [[] for _ in range(n)]
        info["verify_counts"] = traces
        live = np.arange(n)
        while live.size:
            m = live.size
            lens = done_len[live]
            committed = tokens[live, :max(int(lens.max()), 1)]
            g = gstate[live]
            drafts = np.empty((m, kappa), np.int64)
            q_rows = np.empty((m, kappa, vocab))
            q_verify = q_rows if v_transform == d_transform else np.empty_like(q_rows)
            u = rng.random((m, kappa))
            for i in range(kappa):
                idx = d_ctx.index(live, drafts[:, :i])
                q = self.processed_rows(draft, "draft", idx, prompt, committed, lens, g, drafts, i, kappa, d_transform,
                                        settings)
                q_rows[:, i] = q
                if q_verify is not q_rows:
                    q_verify[:, i] = self.processed_rows(draft, "draft", idx, prompt, committed, lens, g, drafts, i,
                                                         kappa, v_transform, settings)
                drafts[:, i] = np.argmax(q, axis=1) if greedy else self.propose(q, u[:, i])
            p_rows = np.empty((m, kappa + 1, vocab))
            for i in range(kappa + 1):
                p_rows[:, i] = self.processed_rows(target, "target", t_ctx.index(live, drafts[:, :i]), prompt, committed,
                                                   lens, g, drafts, i, kappa, transform, settings)
            batch = VerifyBatch(
                draft_token_ids=drafts.reshape(-1),
                num_draft_tokens=np.full(m, kappa, np.int64),
                target_probs=p_rows.reshape(-1, vocab),
                draft_probs=None if greedy else q_verify.reshape(-1, vocab),
                greedy=np.full(m, greedy),
            )
            coins = Coins(rng.random(m * kappa), rng.random(m))
            out = np.asarray(self._verify(batch, coins))
            n_verified = (out != PAD).sum(axis=1)
            info["num_steps"] += m
            info["num_drafted"] += m * kappa
            info["num_accepted"] += int((n_verified - 1).sum())
            for r, a in zip(live.tolist(), (n_verified - 1).tolist()):
                traces[r].append((kappa, a))
            if settings.grammar is not None:
                gstate[live] = self.grammar_commit(settings.grammar, g, drafts, out)
            out, stop = self.cut_at_stop(out, settings.stop_tokens)
            n_emit = (out != PAD).sum(axis=1)
            width = out.shape[1]
            cols = lens[:, None] + np.arange(width)[None, :]
            ok = out != PAD
            tokens[np.repeat(live, width)[ok.reshape(-1)], cols[ok]] = out[ok]
            done_len[live] += n_emit
            ended[live] |= stop
            t_ctx.append(live, self.target_segment(drafts, out))
            d_ctx.append(live, self.draft_segment(drafts, out))
            live = live[(done_len[live] < length) & ~ended[live]]
        return tokens[:, :length], info


def append_tokens(committed: np.ndarray, lens: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Rows committed[r, :lens[r]] + extra[r] left-aligned, PAD after: int64 [m, W + e]."""
    m, e = extra.shape
    out = np.full((m, committed.shape[1] + e), PAD, np.int64)
    out[:, :committed.shape[1]] = committed
    if e:
        rows = np.repeat(np.arange(m), e)
        cols = (lens[:, None] + np.arange(e)[None, :]).reshape(-1)
        out[rows, cols] = extra.reshape(-1)
    return out


def matcher_walk(grammar, state: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Grammar states [m] after feeding each row its tokens [m, w] (PAD skipped) the way a grammar
    matcher does: a token the state does not allow is refused and leaves the state where it was. For
    tokens the grammar allows this is `reference.processors.states`."""
    table = grammar.array()
    s = np.asarray(state, np.int64).copy()
    for j in range(tokens.shape[1]):
        t = tokens[:, j]
        nxt = table[s, np.where(t >= 0, t, 0)]
        s = np.where((t >= 0) & (nxt >= 0), nxt, s)
    return s


class _Contexts:
    """The token context each run's model conditions on (its "KV cache"), kept as the context's
    prefix index (`reference.toy.prefix_index`): appending token t to a context of length l and
    lexicographic rank r gives length l + 1 and rank r * V + t, so no token buffer is needed."""

    def __init__(self, n: int, prompt, vocab: int):
        self.vocab = vocab
        self.lens = np.full(n, len(prompt), np.int64)
        self.rank = np.full(n, int(prefix_indices(np.array([prompt], np.int64).reshape(1, -1),
                                                  np.array([len(prompt)]), vocab)[0]
                                   - (vocab ** len(prompt) - 1) // (vocab - 1)), np.int64)

    def index(self, rows, extra):
        """Prefix indices [m] of each run's context followed by `extra` [m, e]."""
        lens, rank = self.lens[rows], self.rank[rows]
        for j in range(extra.shape[1]):
            rank = rank * self.vocab + extra[:, j]
        lens = lens + extra.shape[1]
        if int(lens.max()) >= 62 / np.log2(self.vocab):
            raise InputError(f"toy context of {int(lens.max())} tokens overflows the prefix index")
        return (self.vocab ** lens - 1) // (self.vocab - 1) + rank

    def append(self, rows, segment):
        """Append each run's tokens of `segment` [m, w] in order, skipping entries < 0."""
        segment = np.asarray(segment, np.int64)
        lens, rank = self.lens[rows], self.rank[rows]
        for j in range(segment.shape[1]):
            t = segment[:, j]
            keep = t >= 0
            rank = np.where(keep, rank * self.vocab + t, rank)
            lens = lens + keep
        self.lens[rows], self.rank[rows] = lens, rank
