"""The identity draft on llama-cpp-python, explained: `specverify findings llamacpp-identity`.

With the target as its own draft model (our `ModelDraft`, sampling q = p with the run's transform),
the chain rule accepts every draft. llama-cpp-python verifies by sample-match: it samples the target
at each position and keeps the draft while the sample equals it, so a draft d is accepted with
probability p(d | prefix), and on average sum_x p(x)^2. This module runs the identity setting of
the battery (tiny Llama V = 4, prompt (1,), kappa 2, 8 tokens, temperature 0.7, top-k 3), records every
draft call, and compares the accepted count with the sample-match prediction (the sum of p(d) over
the drafts that were verified) by a z-score; the chain rule's prediction is every draft.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def explain(n: int = 2000, seed: int = 11, vocab: int = 4, model_seed: int = 0, kappa: int = 2, length: int = 8,
            temperature: float = 0.7, top_k: int = 3) -> dict:
    from specverify.adapters.llamacpp import LlamaCpp
    from specverify.reference.transforms import Transform

    t0 = time.time()
    adapter = LlamaCpp("draft")
    from specverify.models import tiny as tiny_llama
    target = tiny_llama.tabulated(adapter.own_models(vocab, model_seed)[0])
    transform = Transform(temperature=temperature, top_k=top_k)
    adapter.trace = []
    _, info = adapter.generate(target, target, (1,), kappa, transform, seed, n, length)
    expected = variance = 0.0
    verified = accepted = 0
    for sequence, calls in adapter.trace:
        for start, drafts in calls:
            for j, d in enumerate(drafts):
                if start + j >= len(sequence):
                    break
                p = float(target.probs(tuple(sequence[:start + j]), transform)[d])
                expected, variance, verified = expected + p, variance + p * (1 - p), verified + 1
                if sequence[start + j] != d:
                    break
                accepted += 1
    z = (accepted - expected) / np.sqrt(variance) if variance > 0 else 0.0
    return {"runs": n, "num_drafted": info["num_drafted"], "num_accepted": info["num_accepted"],
            "verified": verified, "accepted": accepted, "sample_match_expected": expected, "z": float(z),
            "chain_rule_expected": verified, "acceptance": accepted / max(1, verified),
            "seconds": time.time() - t0, "setting": {"vocab": vocab, "kappa": kappa, "length": length,
                                                     "temperature": temperature, "top_k": top_k, "seed": seed}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specverify findings llamacpp-identity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args(argv)
    out = explain(args.runs)
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0
