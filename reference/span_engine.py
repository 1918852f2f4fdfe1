"""The reference speculative engine with a span drafter (`reference.span_drafters`), vectorised over N
independent runs (the engine-level protocol):

    SpanEngine(drafter, schedule).generate(target, draft, prompt, kappa, transform, seed, n, length)
        -> (tokens [n, length], info)

`draft` is ignored: the drafts come from the context. Each step of a run, after `emitted` tokens:

    1. draft   k = drafts_at(schedule, kappa, emitted, length) (`reference.acceptance`); when k > 0 the
               span drafter.propose(prompt + emitted tokens, kappa), cut to k tokens; k becomes its length
               (0 when nothing matches: a plain step)
    2. score   p_i = target(context + span[:i]) for i = 0..k, seen through `transform`
    3. verify  one ragged VerifyBatch of all live runs (k may be 0 for some), draft rows one-hot at the
               span's tokens, through the fast reference verifier (`reference.fast.verify_batch`, the chain
               rule: draft j accepted with p(d_j))
    4. commit  the emitted tokens appended; a run ends once it has `length` tokens (overshoot cut)

`info["verify_counts"]`: each run's (drafted, accepted) per step with k >= 1 -- the trace whose exact law
is `reference.acceptance.run_acceptance_law(target, drafter, ..., schedule)`; also "num_drafted",
"num_accepted", "num_verifies" over all runs. Randomness: one numpy Generator seeded by `seed` draws each
step's acceptance coins (one per draft) and final coins (one per run), in that order.
"""

from __future__ import annotations

import numpy as np

from specverify import __version__
from specverify.errors import InputError

from . import fast
from .acceptance import FIXED, check_schedule, drafts_at
from .batch import PAD, Coins, VerifyBatch
from .span_drafters import is_span_drafter
from .toy_engine import _Contexts, _Rows
from .transforms import Transform


class SpanEngine:
    """The engine-level protocol with a span drafter (see the module docstring)."""

    name = "toy-span-engine"
    version = __version__
    capabilities = {"engine"}

    def __init__(self, drafter, schedule: str = FIXED, verify=None):
        if not is_span_drafter(drafter):
            raise InputError(f"{type(drafter).__name__} is not a span drafter (reference.span_drafters)")
        self.drafter, self.draft_schedule = drafter, check_schedule(schedule)
        self.span_drafter = drafter              # declared for `engine_acceptance`: the law of its drafts
        self._verify = verify if verify is not None else fast.verify_batch
        self._rows = _Rows()

    def generate(self, target, draft, prompt, kappa: int, transform: Transform | None, seed: int, n: int,
                 length: int, processors=None):
        if processors is not None and processors.active():
            raise InputError("the span engine takes no logits processors")
        if kappa < 1 or n < 1 or length < 1:
            raise InputError("generate needs kappa >= 1, n >= 1 and length >= 1")
        transform = transform or Transform()
        prompt = [int(t) for t in prompt]
        vocab = target.vocab_size
        rng = np.random.default_rng(seed)
        greedy = transform.greedy
        max_len = len(prompt) + length - 1 + kappa            # the longest prefix a step scores
        seqs = [list(prompt) for _ in range(n)]               # prompt + emitted, per run
        t_ctx = _Contexts(n, prompt, vocab)
        traces: list = [[] for _ in range(n)]
        live = np.arange(n)
        while live.size:
            m = live.size
            # 1. draft: spans [m, kappa] (0 past each run's k), k [m]
            spans = np.zeros((m, kappa), np.int64)
            ks = np.zeros(m, np.int64)
            for r, run in enumerate(live.tolist()):
                emitted = len(seqs[run]) - len(prompt)
                k = drafts_at(self.draft_schedule, kappa, emitted, length)
                span = tuple(self.drafter.propose(seqs[run], kappa))[:k] if k > 0 else ()
                ks[r] = len(span)
                spans[r, :len(span)] = span
            # 2. score: p_rows [m, kappa + 1, V]; row i is used where i <= k
            p_rows = np.empty((m, kappa + 1, vocab))
            for i in range(kappa + 1):
                p_rows[:, i] = self._rows(target, transform, t_ctx.index(live, spans[:, :i]), max_len)
            # 3. verify: ragged rows, run r's drafts 0..k_r - 1 and its target rows 0..k_r
            draft_mask = np.arange(kappa)[None, :] < ks[:, None]              # [m, kappa]
            row_mask = np.arange(kappa + 1)[None, :] <= ks[:, None]           # [m, kappa + 1]
            drafts = spans[draft_mask]                                        # [sum k]
            q_rows = np.zeros((drafts.size, vocab))
            q_rows[np.arange(drafts.size), drafts] = 1.0
            batch = VerifyBatch(draft_token_ids=drafts, num_draft_tokens=ks, target_probs=p_rows[row_mask],
                                draft_probs=None if greedy else q_rows, greedy=np.full(m, greedy))
            coins = Coins(rng.random(drafts.size), rng.random(m))
            out = np.asarray(self._verify(batch, coins))
            # 4. commit
            n_emit = (out != PAD).sum(axis=1)
            for r, run in enumerate(live.tolist()):
                if ks[r] > 0:
                    traces[run].append((int(ks[r]), int(n_emit[r]) - 1))
                seqs[run].extend(int(t) for t in out[r, :n_emit[r]])
            t_ctx.append(live, out)
            live = np.array([run for run in live.tolist() if len(seqs[run]) - len(prompt) < length], np.int64)
        tokens = np.array([s[len(prompt):len(prompt) + length] for s in seqs], np.int64)
        info = {"num_drafted": sum(k for t in traces for k, _ in t), "num_accepted": sum(a for t in traces for _, a in t),
                "num_verifies": sum(len(t) for t in traces), "verify_counts": traces}
        return tokens, info


__all__ = ["SpanEngine"]
