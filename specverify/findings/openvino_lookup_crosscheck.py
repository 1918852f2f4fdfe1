"""`python -m specverify.findings.openvino_lookup_crosscheck [N]`: OpenVINO GenAI's prompt-lookup rule
(`reference.span_drafters.OVPromptLookupSpan`) checked per step on the engine's own runs, since the C++
function (`generate_candidates`, src/cpp/src/prompt_lookup/continuous_batching_for_prompt_lookup.cpp) is
not exposed to Python. Run it in the OpenVINO venv (`adapters.openvino`).

For max_ngram_size 2 and 3, N runs each (default 300) of the tiny target (`tiny_llama.pair_folders(None, 4,
0)`, the acceptance check's vocabulary), each from a random prompt (1-8 tokens over the 4 tokens, fixed
seed), kappa 1-4, 4-10 new tokens, temperature 1 (seeded per run); and N more at max_ngram_size 3 from
prompts (a, a), kappa 2-4, where the first lookup sees (a, a, y): at y = a OpenVINO's n is 3 // 2 = 1
(span (a, a)), transformers' is 2 (span (a,)). Each run's step chunks (a streamer,
one chunk per pipeline step) are read against several rules with `adapters.openvino.lookup_trace`: a run
whose chunks a rule cannot give (a kept token that is not the rule's draft, a bonus equal to the rule's
next draft, a chunk longer than the rule's span + 1) counts against that rule. The engine's own rule
must have 0 such runs; the others are there to show the check can tell rules apart:

    OVPromptLookupSpan(n)   OpenVINO's rule as declared
    HFPromptLookupSpan(n)   transformers' / llama-cpp-python's (n = min(max, len - 1); equal to the
                            declared rule at n = 2)
    RecentNgramSpan(1, n)   the latest match instead of the earliest
    ShiftedSpan(declared)   the span one token late
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np

from specverify.reference.span_drafters import HFPromptLookupSpan, OVPromptLookupSpan, RecentNgramSpan, ShiftedSpan
from specverify.reference.transforms import Transform

SEED = 29
VOCAB = 4
SHOWN = 2


def rules(n: int) -> dict:
    return {f"OVPromptLookupSpan({n})": OVPromptLookupSpan(n), f"HFPromptLookupSpan({n})": HFPromptLookupSpan(n),
            f"RecentNgramSpan(1, {n})": RecentNgramSpan(1, n), f"ShiftedSpan(OVPromptLookupSpan({n}))":
            ShiftedSpan(OVPromptLookupSpan(n))}


def measure(runs: int) -> list:
    """[(max_ngram_size, {rule: (runs it cannot give, first example)})] over `runs` runs each."""
    from specverify.adapters import openvino as ovad

    eng = ovad.OpenVINOEngine(ovad.LOOKUP)
    target, draft = (SimpleNamespace(handle=folder, vocab_size=VOCAB) for folder in eng.own_models(VOCAB, 0))
    pipe, vocab = eng._pipeline(target, draft)
    rng = np.random.default_rng(SEED)
    out = []
    for n, pairs in ((2, False), (3, False), (3, True)):
        found = {name: [0, None] for name in rules(n)}
        for i in range(runs):
            if pairs:             # (a, a): the first lookup sees (a, a, y), where the two rules' n differ
                prompt = (int(rng.integers(0, VOCAB)),) * 2
                kappa, length = int(rng.integers(2, 5)), int(rng.integers(4, 11))
            else:
                prompt = tuple(int(t) for t in rng.integers(0, VOCAB, size=int(rng.integers(1, 9))))
                kappa, length = int(rng.integers(1, 5)), int(rng.integers(4, 11))
            cfg = eng._config(vocab, kappa, Transform(temperature=1.0), SEED + i, length, None)
            cfg.max_ngram_size = n
            streamer = ovad.chunk_streamer(eng.genai)
            pipe.generate([eng.ov.Tensor(np.array([list(prompt)], np.int64))], [cfg], streamer)
            for name, drafter in rules(n).items():
                _, bad = ovad.lookup_trace(drafter, prompt, streamer.chunks, kappa, length)
                if bad is not None:
                    found[name][0] += 1
                    found[name][1] = found[name][1] or {"prompt": list(prompt), "kappa": kappa, "length": length, **bad}
        out.append((n, pairs, {k: tuple(v) for k, v in found.items()}))
    return out


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    runs = int(args[0]) if args else 300
    results = measure(runs)
    ok = True
    for n, pairs, found in results:
        prompts = "prompts (a, a), kappa 2-4" if pairs else "random prompts"
        print(f"max_ngram_size {n}, {prompts}: runs ({runs}, seed {SEED}) whose step chunks each rule cannot give")
        for name, (count, example) in found.items():
            print(f"  {name:40s} {count:5d}" + (f"   first: {example}" if example else ""))
        ok &= found[f"OVPromptLookupSpan({n})"][0] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
