"""Mutants of the sampling state around an exact rejection rule: logits processors, grammar masks and
stop tokens under speculation (../shared/BUGCLASSES.md, first table).

Each overrides one processor hook of the toy engine (`reference.toy_engine.SpecEngine`: `history`,
`row_settings`, `output_count`, `grammar_row_state`, `grammar_commit`, `cut_at_stop`); its sampler is
exact and it declares every processor, so only the processor rows (`checks.processors`) can catch it.
The mechanisms are the ones the cited threads describe, rebuilt on the toy engine (no code taken).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from specverify.reference.batch import PAD
from specverify.reference.toy_engine import SpecEngine, append_tokens, matcher_walk

from .registry import mutant


@mutant(23, "penalty-committed-only", targets=("processors",))
class PenaltyCommittedOnly(SpecEngine):
    """The target (and draft) row at draft position i is penalised with the state of the committed
    prefix only, not committed + drafts 0..i-1. A simplified form of SGLang PR #33643 (open; its text:
    the penalty state is fed one token a step, the last accepted one, so a frequency penalty acts at
    about nominal / L and min_new_tokens counts steps): here the committed tokens are all in the state
    and only the current step's drafts are missing."""

    def history(self, committed, lens, drafts, i):
        return committed


@mutant(24, "penalty-last-token-twice", targets=("processors",))
class PenaltyLastTokenTwice(SpecEngine):
    """The last committed token is counted twice on the rows after draft position 0: it is in the base
    output counts, and the speculative penalty kernel adds the token at position 0 (the last sampled
    one) to the running draft counts again (vLLM PR #33251, review of MRV2's `_spec_penalties_kernel`:
    "double-counts the last sampled token", for position 1 and every later position). Frequency
    penalties are one unit too strong for that token there."""

    def history(self, committed, lens, drafts, i):
        h = super().history(committed, lens, drafts, i)
        if i == 0:
            return h
        last = np.where(lens > 0, committed[np.arange(lens.size), np.maximum(lens - 1, 0)], PAD)
        return append_tokens(h, (h != PAD).sum(axis=1), last[:, None])


@mutant(25, "processors-bonus-row-only", targets=("processors",))
class ProcessorsBonusRowOnly(SpecEngine):
    """min_p and logit_bias are treated as argmax-invariant and applied to the bonus row only, not to
    the rows the drafts are drawn from and verified against (vLLM #42744, fixed by PR #42802): a token
    min_p removes can be drafted and accepted at a non-bonus position."""

    def row_settings(self, settings, i, kappa, role):
        return settings if i == kappa else replace(settings, min_p=0.0, logit_bias=())


@mutant(26, "min-tokens-draft-off-by-one", targets=("processors",))
class MinTokensDraftOffByOne(SpecEngine):
    """The min_tokens EOS mask covers one extra draft row (vLLM PR #41768: `apply_with_spec_decode`
    "masked EOS on one extra draft row", off by one against "the output length before this row is
    still < min_tokens"): on draft rows the output is counted one token short, so EOS cannot be
    drafted or recovered at position min_tokens when that position falls on a draft row."""

    def output_count(self, lens, i, kappa):
        return lens + i - (1 if i < kappa else 0)


@mutant(27, "penalties-off-when-speculating", targets=("processors",))
class PenaltiesOffWhenSpeculating(SpecEngine):
    """Repetition, frequency and presence penalties silently dropped when speculation is on
    (TensorRT-LLM PR #17701; SGLang #28180 reports the same class): every row sampled unpenalised."""

    def row_settings(self, settings, i, kappa, role):
        return replace(settings, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)


@mutant(28, "grammar-not-advanced-in-drafts", targets=("processors",))
class GrammarNotAdvancedInDrafts(SpecEngine):
    """The grammar mask of every row of a step is the committed prefix's, not advanced through drafts
    0..i-1 (vLLM PR #34241, as reported: inside the draft window later rows are masked with a stale
    state, so they are effectively unconstrained): emitted tokens can be illegal for their prefix."""

    def grammar_row_state(self, grammar, state, drafts, i):
        return state


@mutant(29, "grammar-not-rolled-back", targets=("processors",))
class GrammarNotRolledBack(SpecEngine):
    """The grammar matcher advanced through all kappa drafts while scoring is not rolled back after a
    rejection: the recovered token and every later step are masked with the state after the rejected
    drafts (the rollback half of the class "grammar mask not carried through drafts", vLLM PRs #36138,
    #44297 as reported in ../shared/BUGCLASSES.md)."""

    def grammar_commit(self, grammar, state, drafts, emitted):
        n_emit = (emitted != PAD).sum(axis=1)
        rejected = n_emit <= drafts.shape[1]
        last = emitted[np.arange(n_emit.size), n_emit - 1]
        kept = matcher_walk(grammar, state, np.concatenate([drafts, last[:, None]], axis=1))
        return np.where(rejected, kept, super().grammar_commit(grammar, state, drafts, emitted))


@mutant(30, "tokens-after-stop", targets=("processors",))
class TokensAfterStop(SpecEngine):
    """The tokens accepted after an EOS inside a speculative step are emitted and the run goes on
    (huggingface/transformers#47912: assisted generation keeps the candidate tokens after an accepted
    EOS; llama.cpp PR #28232 reports the same class)."""

    def cut_at_stop(self, emitted, stop_tokens):
        return emitted, np.zeros(emitted.shape[0], bool)


@mutant(31, "processors-on-target-only", targets=("identity",))
class ProcessorsOnTargetOnly(SpecEngine):
    """The penalties and min_p are applied to the target's rows but not to the draft's: the drafts are
    drawn from (and verified with) the draft's unprocessed rows, so the output stays exact but the
    draft no longer proposes from the distribution it is checked against and acceptance drops. No
    public thread: the processor analogue of mutant 12 (temperature-on-target-only; the chapter's
    "identical transforms of the distributions used for proposal and verification"). Only the identity
    draft with processors (draft = target must accept everything) sees it."""

    def row_settings(self, settings, i, kappa, role):
        if role == "target":
            return settings
        return replace(settings, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, min_p=0.0)
