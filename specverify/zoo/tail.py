"""Mutants of the end of a step: the drafts after a rejection, and the bonus token's row.

After the first rejection the exact rule discards every later draft; when every draft is accepted it
draws the bonus token from row target_row_start[b] + num_draft_tokens[b] of the ragged layout
(`reference.vector.VectorSampler.keep_tail`, `.bonus_rows`).
"""

from __future__ import annotations

from specverify.reference.vector import VectorSampler

from .registry import mutant


@mutant(5, "keep-tail", targets=("joint", "endpoints", "runs"))
class KeepTail(VectorSampler):
    """After the first rejection the later drafts are still verified against target rows computed for
    a prefix that did not happen, and kept while they pass: the chapter's "single most common way a
    speculative implementation silently biases its output" (the tail must be discarded)."""

    keep_tail = True


@mutant(6, "bonus-from-wrong-row", targets=("marginal", "joint", "composition"))
class BonusFromWrongRow(VectorSampler):
    """The bonus token is drawn from row cu_num_draft_tokens[b] + b - 1 (an off-by-one between the
    cumulative draft counts and the cumulative sampled counts of the ragged layout, cf. vLLM's
    target_logits_indices / bonus_logits_indices split): for a request with drafts that is its last
    draft row, for a request without drafts the previous request's bonus row."""

    def bonus_rows(self, batch):
        return batch.target_row_start + batch.num_draft_tokens - 1
