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
    # OpenVINO GenAI on tiny random Llamas (engine level only: ~3,000 batched runs/s; 50,000 runs a law row)
    "openvino": ([], 50_000, None),
    "openvino-lookup": ([], 50_000, None),
    "openvino-bitwise-tiny": ([], 1_000, None),
    "openvino-bitwise": ([], 1_000, None),
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
    "transformers-assisted": [("identity", "transformers_identity_draft")],
    "transformers-lookup": [],
    "openvino": [("processors[min_p", "openvino_draft_min_p"), ("engine.runs", "openvino_draft_law"),
                 ("engine.transform", "openvino_draft_law"), ("identity", "openvino_draft_law"),
                 ("processors[", "openvino_draft_law")],
    "openvino-lookup": [],
    "openvino-bitwise-tiny": [],
    "openvino-bitwise": [],
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

NOTES["openvino"] = (
    "OpenVINO GenAI's own C++ pipeline (ContinuousBatchingPipeline, which LLMPipeline uses on CPU) with "
    "draft_model=, on tiny random Llamas exported by optimum-intel, f32 forced (INFERENCE_PRECISION_HINT and "
    "KV_CACHE_PRECISION; checked: greedy log-probability within 1e-4 of the float64 law). Plain sampling and prompt "
    "lookup through the same sampler pass every row (reports/openvino-lookup-*), so the mapping of seeds, "
    "transforms and processors is not what fails here. The mechanism, from the source (src/cpp/src/sampling/"
    "sampler.cpp, `validate_candidate`, `sample_from_sequence_group`, as the code reads): a draft x is accepted when "
    "r <= q(x) / p(y), with q(x) the draft's probability of x, p(y) the target's probability of a fresh target "
    "sample y (not of x) and r = uniform_int(0, 100) / 100; after a rejection the replacement token is drawn from "
    "the next target row, which conditions on the rejected draft, not from the residual max(0, p - q). So the "
    "output law is biased (engine.runs / transform rows), a token the target's min_p removed is emitted (exact "
    "row), and draft = target rejects drafts (identity). Not a finding row: LLMPipeline with a draft and its "
    "default scheduler (prefix caching on) dies within a few sampling calls "
    "(findings/repro/openvino_prefix_cache_crash.py, output in its docstring); the adapter turns prefix caching "
    "off. Also seen, not a row: seeded runs with a draft model depend on the batch they run in (the same rng_seed "
    "gives other tokens in a batched call than alone: 113 of 300 runs in findings/repro/"
    "openvino_draft_seed_reproducibility.py, 6 of 300 with another pair), and once differed between two identical "
    "calls (5 of 300); plain sampling and prompt lookup never did. OpenVINO's own draft counters "
    "(SDPerModelsPerfMetrics) are per request only in single-request calls; the identity row uses those.")
NOTES["openvino-lookup"] = (
    "OpenVINO GenAI prompt lookup (prompt_lookup=True, max_ngram_size 2) on tiny random Llamas, f32: a "
    "sample-match rule (accept while the draft equals the target's own sample), exact by construction; no draft "
    "counters (its results carry no speculative metrics), so the identity row is skipped.")

# not auditable on CPU, said in every SGLang report
NOT_AUDITABLE = {
    "sglang": "tree_speculative_sampling_target_only (SGLang's default sampling path) is a CUDA kernel in "
              "the compiled sgl_kernel wheel: not auditable on CPU.",
}
