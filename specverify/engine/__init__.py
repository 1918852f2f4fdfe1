"""specverify's own speculative engine: a Llama over the op backends, paged KV with rollback,
continuous batching over the flattened ragged verify layout, proposers, metrics.

Entry points: `specverify.engine.api.generate` (any model behind the protocol, toy models included)
and `specverify.engine.bitwise.run_bitwise` (greedy speculative vs plain decode, bit for bit).
"""
