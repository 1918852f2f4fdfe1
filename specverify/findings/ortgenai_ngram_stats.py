"""`python -m specverify.findings.ortgenai_ngram_stats`: what ONNX Runtime GenAI's `get_speculative_stats()`
reports for n-gram decoding (`adapters.ortgenai`, method "ngram": ngram_size 2, max_draft_tokens 3, fixed
width), for a few runs of the tiny target (`tiny_llama.pair_folders(None, 4, 0)`): greedy and sampled
(temperature 0.7, random_seed 0-2) from (1, 2, 3, 1, 2, 0, 1, 2), 6 new tokens. Run it in the ORT GenAI
venv. It prints each run's tokens, the sequence length after each generate_next_token() call (one token
a call: rounds are buffered, so no per-round chunks can be read this way) and the round counters.

Then the rule check: RUNS runs in each of four settings (the prompt above greedy and at temperature 0.7,
6 tokens; (1,) at 0.7, 4 tokens; (2, 2, 0) at 1.0, 9 tokens; kappa 3), each run's trace built from its
tokens by `adapters.ortgenai.ngram_trace` under a rule and compared with the run's own rounds,
draft_tokens_proposed and draft_tokens_accepted: the runs that disagree, for the declared rule
(RecentNgramSpan(1, 1), the latest match) and for the earliest-match rule (NgramSpan(1, 1)).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from specverify.reference.span_drafters import NgramSpan, RecentNgramSpan
from specverify.reference.transforms import Transform

PROMPT, LENGTH, KAPPA = (1, 2, 3, 1, 2, 0, 1, 2), 6, 3
RUNS = 300
SETTINGS = ((PROMPT, 0.0, 6), (PROMPT, 0.7, 6), ((1,), 0.7, 4), ((2, 2, 0), 1.0, 9))
KEYS = ("rounds", "completed_rounds", "interrupted_rounds", "draft_tokens_proposed", "draft_tokens_evaluated",
        "draft_tokens_accepted", "correction_tokens", "bonus_tokens", "standard_fallback_steps",
        "ngram_lookup_hits", "ngram_lookup_misses", "target_reanchor_forward_passes")


def main() -> int:
    from specverify.adapters import ortgenai as oa

    eng = oa.OrtGenAI(oa.NGRAM)
    target_dir, _ = eng.own_models(4, 0)
    model = eng._model(SimpleNamespace(handle=target_dir, vocab_size=4), None)
    og = oa._og()
    print(f"onnxruntime-genai {og.__version__}: n-gram decoding, ngram_size {oa.NGRAM_SIZE}, max_draft_tokens "
          f"{KAPPA}, prompt {PROMPT}, {LENGTH} new tokens")
    for transform in (Transform(temperature=0.0), Transform(temperature=0.7)):
        for seed in range(3):
            params = og.GeneratorParams(model)
            params.set_search_options(**oa.search_options(len(PROMPT), LENGTH, transform, seed))
            params.set_speculative_options(max_draft_tokens=KAPPA, min_adaptive_k=0, cooldown=False,
                                           ngram_size=oa.NGRAM_SIZE)
            gen = og.Generator(model, params)
            gen.append_tokens(np.asarray(PROMPT, dtype=np.int32))
            lengths = []
            while not gen.is_done():
                gen.generate_next_token()
                lengths.append(len(gen.get_sequence(0)))
            tokens = [int(t) for t in np.asarray(gen.get_sequence(0))[len(PROMPT):]]
            stats = gen.get_speculative_stats()
            print(f"T={transform.temperature:g} seed {seed}: tokens {tokens}, lengths {lengths}; "
                  + ", ".join(f"{k} {int(stats[k])}" for k in KEYS))
    target = SimpleNamespace(handle=target_dir, vocab_size=4)
    for prompt, temperature, length in SETTINGS:
        rules = {"RecentNgramSpan(1, 1)": RecentNgramSpan(1, 1), "NgramSpan(1, 1) (earliest)": NgramSpan(1, 1)}
        found = {}
        for name, rule in rules.items():
            eng.span_drafter = rule
            _, info = eng.generate(target, None, prompt, KAPPA, Transform(temperature=temperature), 0, RUNS, length)
            found[name] = info["counter_mismatches"]["runs"]
        print(f"prompt {prompt}, T={temperature:g}, {length} tokens, {RUNS} runs: runs whose counters disagree "
              f"with the rule's trace: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
