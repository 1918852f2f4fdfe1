"""Logit difference of the q8 path against the exact quantized path (== fp32 path bit for bit) on the bench prompts."""
import json
import sys

import torch
torch.set_num_threads(1)
from specverify.engine.loader import load_smollm2
from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.models.prompts import encode_prompts, load_prompts
model, tok = load_smollm2("default", "quantized")
ids = encode_prompts(tok, load_prompts(4, categories=["edit", "summarise"]))
out = []
for p in ids:
    runs = {}
    for be in ("invariant", "invariant-q8"):
        rows = {}
        res = generate(model, None, [p], sampling=SamplingParams(temperature=0.0, max_tokens=64), spec=SpecOptions("none", kappa=0),
                       run=RunOptions(backend=be, eos_token_id=tok.eos_id, record_logits=lambda r, i, row: rows.__setitem__(i, row.clone())))
        runs[be] = (res.tokens[0], rows)
    (ta, la), (tb, lb) = runs["invariant"], runs["invariant-q8"]
    first = next((i for i, (a, b) in enumerate(zip(ta, tb)) if a != b), None)
    n_same = first if first is not None else min(len(ta), len(tb))
    d0 = float((la[0] - lb[0]).abs().max()); rel = d0 / float(la[0].abs().max())
    dsame = max(float((la[i] - lb[i]).abs().max()) for i in range(max(1, n_same)) if i in la and i in lb)
    out.append({"tokens": [len(ta), len(tb)], "first_token_difference": first, "max_abs_logit_diff_step0": d0,
                "relative_to_max_logit_step0": rel, "max_abs_logit_diff_common_prefix": dsame, "identical_outputs": ta == tb})
    print(out[-1], flush=True)
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "reports/bench/q8-logits.json", "w"), indent=1)
