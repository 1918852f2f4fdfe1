"""The float64 oracle of the exact rules (folder `reference/`, installed as `specverify.reference`).

The rules, as pure functions of explicit randomness:

    sampling     the two primitives every exact rule is built from, defined down to the last bit
    chain        the chain rule and the greedy rule, one request
    block        block verification, one request
    tree         tree verification (recursive rejection over siblings), one request
    batch        the ragged verify batch (`VerifyBatch`, `Coins`) and its layout
    validate     input validation for every public function
    transforms   temperature, top-k, top-p in float64
    processors   logits processors (penalties, min_tokens, logit bias, min_p, bans, grammar, stop) on
                 the actual prefix, and their order
    toy          seeded toy language models (no weights)
    laws         exact laws: the probability of every outcome of a step or a run
    lossy        lossy rules, NOT exact: the oracle states their exact bias
    serving      downstream of the sampler: the logprob of an emitted token, stop strings, the
                 length cap and finish reasons, usage, streamed text

The same rules in the forms the battery drives, bit for bit the functions above:

    fast         compiled with numba, for millions of verify steps (`bench` measures it)
    vector       vectorised over a batch, built from named primitives (the bug zoo overrides one each)
    tree_batch   a batch of draft trees of one shape (`TreeBatch`, `TreeCoins`), beside `batch`
    toy_engine   a speculative engine over toy models (the engine-level protocol)
    torch_toy    a toy model as a small torch causal LM (torch is imported only when one is built)

Nothing here imports torch at import time.
"""
