"""`python -m specverify.findings.ortgenai_ngram_stats`: what ONNX Runtime GenAI's `get_speculative_stats()`
reports for n-gram decoding (`adapters.ortgenai`, method "ngram": ngram_size 2, max_draft_tokens 3, fixed
width), for a few runs of the tiny target (`tiny_llama.pair_folders(None, 4, 0)`): greedy and sampled
(temperature 0.7, random_seed 0-2) from (1, 2, 3, 1, 2, 0, 1, 2), 6 new tokens. Run it in the ORT GenAI
venv. It prints each run's tokens, the sequence length after each generate_next_token() call (one token
a call: rounds are buffered, so no per-round chunks can be read this way) and the round counters.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from specverify.reference.transforms import Transform

PROMPT, LENGTH, KAPPA = (1, 2, 3, 1, 2, 0, 1, 2), 6, 3
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
