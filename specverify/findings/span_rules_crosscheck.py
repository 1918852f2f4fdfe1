"""`python -m specverify.findings.span_rules_crosscheck {llamacpp|vllm|transformers} [N]`: the reference's span drafters
(`reference.span_drafters`) against the engine's own proposer function on N random contexts (default
20 000; vocabularies of 2-4 tokens so that matches are frequent, 1-14 tokens, kappa 1-4, fixed seed).
Run it in the engine's venv. Prints the number of contexts on which they differ (must be 0) and the first
few differences.

    llamacpp  `LlamaPromptLookupDecoding.find_candidate_pred_tokens(ids, max_ngram_size, kappa)`
              (llama_cpp/llama_speculative.py) vs `PromptLookupSpan(max_ngram_size)`, max_ngram_size 1-3
    vllm      `_find_longest_matched_ngram_and_propose_tokens(ids, min_n, max_n, max_model_len, kappa)`
              (vllm/v1/spec_decode/ngram_proposer.py, numba) vs `NgramSpan(min_n, max_n, max_model_len)`,
              1 <= min_n <= max_n <= 4, max_model_len 8-20
    transformers  `PromptLookupCandidateGenerator(num_output_tokens=kappa, max_matching_ngram_size=n,
              max_length=len(ids) + d).get_candidates(ids)` (transformers/generation/candidate_generator.py,
              no EOS, no logits processors) vs `HFPromptLookupSpan(n)` (kappa tokens, not cut by the tokens left,
              d - 1; nothing at all when d = 1, one token left), n 1-3, d 1-4

OpenVINO GenAI's rule (`OVPromptLookupSpan`) is C++ that its Python API does not expose: it is checked per
step on the engine's own runs instead (`adapters.openvino.lookup_trace`, `openvino_lookup_crosscheck`).
"""

from __future__ import annotations

import sys

import numpy as np

from specverify.reference.span_drafters import HFPromptLookupSpan, NgramSpan, PromptLookupSpan

SEED = 29
SHOWN = 5


def contexts(n: int):
    """(ids, kappa, a, b, c) draws: a context and the rule's settings' raw draws."""
    rng = np.random.default_rng(SEED)
    for _ in range(n):
        vocab = int(rng.integers(2, 5))
        ids = rng.integers(0, vocab, size=int(rng.integers(1, 15))).astype(np.int32)
        yield ids, int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(8, 21))


def llamacpp(n: int) -> list:
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    diffs = []
    for ids, kappa, max_n, _, _ in contexts(n):
        theirs = tuple(int(x) for x in LlamaPromptLookupDecoding.find_candidate_pred_tokens(
            input_ids=ids.astype(np.intc), max_ngram_size=max_n, num_pred_tokens=kappa))
        ours = PromptLookupSpan(max_n).propose(ids.tolist(), kappa)
        if theirs != ours:
            diffs.append((ids.tolist(), kappa, max_n, theirs, ours))
    return diffs


def vllm(n: int) -> list:
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as find

    diffs = []
    for ids, kappa, a, b, max_len in contexts(n):
        lo, hi = min(a, b), max(a, b)
        theirs = tuple(int(x) for x in find(ids, lo, hi, max_len, kappa))
        ours = NgramSpan(lo, hi, max_len).propose(ids.tolist(), kappa)
        if theirs != ours:
            diffs.append((ids.tolist(), kappa, (lo, hi, max_len), theirs, ours))
    return diffs


def transformers(n: int) -> list:
    import torch
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    diffs = []
    for ids, kappa, max_n, d, _ in contexts(n):
        gen = PromptLookupCandidateGenerator(num_output_tokens=kappa, max_matching_ngram_size=max_n,
                                             max_length=len(ids) + d)
        candidates, _ = gen.get_candidates(torch.tensor(ids[None, :].astype(np.int64)))
        theirs = tuple(int(x) for x in candidates[0, len(ids):])
        ours = HFPromptLookupSpan(max_n).propose(ids.tolist(), kappa) if d > 1 else ()
        if theirs != ours:
            diffs.append((ids.tolist(), kappa, (max_n, d), theirs, ours))
    return diffs


RULES = {"llamacpp": llamacpp, "vllm": vllm, "transformers": transformers}


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in RULES:
        print(f"usage: python -m specverify.findings.span_rules_crosscheck {{{'|'.join(RULES)}}} [N]", file=sys.stderr)
        return 2
    n = int(args[1]) if len(args) > 1 else 20_000
    diffs = RULES[args[0]](n)
    print(f"{args[0]}: the reference rule and the engine's own function differ on {len(diffs)} of {n} random "
          f"contexts (seed {SEED})")
    for ids, kappa, settings, theirs, ours in diffs[:SHOWN]:
        print(f"  context {ids} kappa {kappa} settings {settings}: engine {list(theirs)}, reference {list(ours)}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    raise SystemExit(main())
