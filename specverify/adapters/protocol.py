"""What an engine under audit provides. Duck-typed: an adapter is any object with these attributes.

    name: str                      shown in reports
    version: str | None            the engine's version, recorded in every result
    capabilities: set[str]         which checks apply (below); the audit skips what is not declared

The audit runs an adapter in a worker process of its own (`specverify.isolation`; `--in-process`
for debugging), one call at a time, under a per-call timeout (`--timeout`). Ids it returns must be
integers in [-1, V); anything else (wrong shape, floats, out-of-range ids), an exception, a timeout
or the worker's death ends the audit with a one-line error (exit 2). An adapter must not change the
arrays it is given: each is compared after every call, and a change fails the exact row
`contract.inputs_unchanged`. A fresh adapter is built with the factory whenever a check needs one
(the seeded checks replay calls on fresh instances). Every capability must be one of CAPABILITIES
and come with its method (`check_adapter`), or the audit does not start.

Sampler level -- the harness injects every coin (layout and worked example: `reference.batch`):

    verify(batch: VerifyBatch, coins: Coins) -> int array [B, max_spec_len + 1]
        the chain rule for requests with greedy == False, the argmax rule (lowest index on ties,
        no coins) for greedy == True; each row the emitted tokens left-aligned, -1 padded. A draft id
        of -1 (padding) is never accepted. Capabilities "chain" and/or "greedy".
    verify_block(batch, coins) -> same, block verification (Sun et al.). Capability "block".
    verify_trees(batch: TreeBatch, coins: TreeCoins) -> int array [B, depth + 1]
        recursive rejection over B draft trees of one shape (layout: `reference.tree_batch`), each row
        the accepted path then one token, -1 padded. Capability "tree". The one-request form
        verify_tree(tree: DraftTree, target_probs [N+1, V], draft_probs [N+1, V] | None, coins [N],
        final_coin) -> emitted ids (or (ids, accepted nodes)) is accepted instead, and called once
        per request (slow: only for small adapters).

Seeded sampler level -- the adapter draws its own randomness (capability "seeded"):

    verify_seeded(batch: VerifyBatch, seeds: int64 array [B]) -> same as verify
        request b draws every random number of the call (its acceptance coins, its recovered or
        bonus token) from its own generator, identified by seeds[b]: created from the seed the first
        time the adapter sees it, and continued by later calls with the same seed -- the way an
        engine keeps one generator per request across decode steps. Requirements the battery checks:
        two fresh adapters given the same calls return the same tokens; a request's tokens, and what
        it leaves in its generator, depend only on its own draft ids, rows, greedy flag and seed --
        not on its position, its neighbours, the batch's max_spec_len or how many calls the adapter
        has served; a request with no drafts draws the same amount whatever its neighbours draft;
        with distinct seeds the tokens have the exact law.

Engine level -- a black box, no coin access (capability "engine"):

    generate(target, draft, prompt, kappa, transform, seed, n, length)
        -> tokens int array [n, length], or (tokens, info)
        target, draft   models over the same vocabulary: `reference.toy.ToyModel` objects
                        (`vocab_size`, `logits(prefix) -> float64 [V]` with -inf for probability 0,
                        `probs(prefix, transform)`, vectorised `logits_at(prefix_indices)`); the draft
                        may be the target itself. An adapter with `models = "torch"` gets them as
                        small torch causal LMs instead (`reference.torch_toy`: forward(input_ids
                        [B, T]) -> logits [B, T, V], float64, no weights), with `vocab_size`.
                        An adapter with `models = "own"` runs real models of its own instead:
                        `own_models(vocab, seed) -> (target, draft)` returns the folders of two tiny
                        Llamas written by `specverify.models.tiny.build` (or its
                        TabulatedModels), which the adapter exports to its engine's format; the
                        harness computes every law from the same weights in float64
                        (`reference.tabulated`) and passes them back as TabulatedModels whose
                        `handle` is the folder (`draft is target` for the identity rows)
        prompt          tuple of token ids the runs start from
        kappa           drafts per speculative step
        transform       `reference.transforms.Transform(temperature, top_k, top_p)`: the sampling
                        parameters, to be applied to the target's and the draft's logits alike
                        (temperature 0 = greedy)
        seed            the run's seed; n independent runs of `length` new tokens each
        info            optional dict with "num_drafted" and "num_accepted" (totals over the runs):
                        the identity-draft check needs them (draft = target must accept everything)
                        and the acceptance law (`checks.engine_acceptance`) tests them; optionally
                        "num_verifies" (verify steps, >= 1 draft) and "verify_counts": one list per
                        run of its verify steps' (drafted, accepted) pairs, in order (then the
                        acceptance law is tested per step, not only in total); an adapter that builds
                        those traces from its declared schedule and checks them against the engine's
                        own counters adds "counter_mismatches": {"runs": count, "example": ...} (a
                        count above 0 fails `engine.acceptance[..., counters]`)
    draft_schedule      optional attribute: how many drafts each step makes, one of
                        `reference.acceptance.SCHEDULES` ("fixed": kappa every step; "capped": the
                        prefill emits the first token, then min(kappa, tokens left - 1);
                        "tokens-left": min(kappa, tokens left - 1) from the first step; "to-length":
                        min(kappa, tokens left) from the first step; "prefill-to-length": the prefill
                        emits the first token, then min(kappa, tokens left); "prefill-fixed": the prefill
                        emits the first token, then kappa); without it the acceptance law is not tested
                        (listed as not covered); another value is an error
    verify_rule         optional attribute: how the engine keeps a draft, one of
                        `reference.acceptance.RULES`: "chain" (the default: min(1, p/q)) or
                        "sample-match" (the target samples each position, a draft is kept while it
                        equals the sample); the acceptance law is computed for it; another value is
                        an error
    draft_sampling      optional attribute: "sampled" (the default: drafts drawn from the draft's
                        transformed row) or "argmax" (the draft's argmax whatever the transform, q
                        one-hot: vLLM's draft_sample_method="greedy"); another value is an error
    span_drafter        optional attribute: a `reference.span_drafters.SpanDrafter` with the engine's
                        own rule, for engines whose drafts are a span after an n-gram match in the
                        context (prompt lookup, n-gram proposers): the acceptance law is that
                        drafter's, not the battery's draft model's; another object is an error
    acceptance_skip     optional attribute: a sentence saying why the adapter has no draft_schedule
                        (what its engine's API lacks), put in the acceptance row's SKIP
    acceptance_knobs    optional attribute: the knobs generate takes for the metamorphic acceptance
                        rows (`checks.acceptance_invariance`), names from its KNOBS: "prefix_cache"
                        (knobs={"prefix_cache": "cold" | "warm"}: no prefix-cache reuse, or the prompt
                        cached in the target's and the drafter's caches before the runs), "prefill_chunk"
                        (knobs={"prefill_chunk": None | C}: the prompt in one step, or at most C
                        prompt tokens a step), "kappa_schedule" (knobs={"kappa_schedule": (c_1, ..)}:
                        the step after the prefill drafts at most c_1, the next c_2, ..., cycling),
                        "position" (no value: generate takes prompts of a few hundred tokens). Those
                        rows pass first-order toy models (`reference.circulant`: `logits(prefix)`,
                        `logits_after(last_tokens)`) and need "verify_counts"; a knob not declared is a
                        SKIP listed as not covered, an unknown name an error
    The checks compare the joint law of the n runs with the target's exact autoregressive law.

Engine level with logits processors (an adapter with "engine" that declares `processors`):

    processors: set[str]           the processors its generate implements, names from PROCESSORS
                                   (`reference.processors.NAMES`); an unknown name is an error, and the
                                   processor checks run only what is declared (the rest is listed as
                                   not covered)
    generate(..., processors=settings)
        settings        `reference.processors.Processors`: repetition / frequency / presence
                        penalties, min_tokens, logit_bias, min_p, banned tokens and sequences, a grammar
                        DFA, stop tokens; to be applied to every target and draft row with the prefix
                        that row conditions on (prompt + committed output + drafts 0..i-1 at draft
                        position i), in the order `reference.processors` states. Passed only to an
                        adapter that declares processors, and only with processors it declares.
        tokens          a run ends at its first stop token, which is emitted; the rest of its row is
                        -1 (PAD). Nothing may follow a stop token.

Bitwise level -- greedy decoding on a model the adapter owns (capability "bitwise"; the request and
result layout, with a worked example: `specverify.adapters.bitwise_level`):

    bitwise_info() -> BitwiseInfo
        model name, vocab_size, proposers (speculation methods besides plain decode), layouts
        ("batch", "ragged"), max_batch_size, variants (name -> "subject" | "negative-control"; e.g.
        an op backend known not to be batch-invariant), optionally its own prompt token ids
    decode_greedy(request: GreedyRequest) -> GreedyResult
        every prompt decoded greedily for exactly max_new_tokens tokens with request.spec (proposer,
        kappa) in request.layout (batch_size, ragged) on request.variant; the token ids and, if it
        can, each decided logits row (or its row_digest)
    The harness compares speculative runs and plain runs in other layouts with plain decode at batch 1,
    ids and logits bytes (`greedy.bitwise`, `batch.invariance`).
    An adapter whose engine takes external drafts lists the harness's drafters in BitwiseInfo.drafted
    ("oracle": the baseline's own greedy tokens, every verify step a full kappa + 1 chunk; "adversarial":
    the same with the draft at chunk position Spec.wrong_at wrong); the request then carries the baseline's
    tokens (GreedyRequest.drafts) and the engine drafts `bitwise_level.drafted_tokens(...)` at each step
    (worked example there): rows `verify.width` and `rollback[j]`, every row compared with plain decode.

Serving level -- what an in-process engine returns after its sampler (capability "serving"; the
request and output layout: `specverify.adapters.serving_level`):

    complete(requests: tuple[ServingRequest, ...]) -> list[ServingOutput]
        the requests at once (one batch), each run to its end: per request its kept ids, finish_reason,
        and as declared in serving_features its text, logprobs (+ top entries), completion_tokens,
        cached_tokens and stream deltas; serving_model = "tiny:V,SEED" names the toy model it runs
    counters() -> {"num_preemptions", "num_decode_preemptions"}   (optional)
    The rows (`checks.engine_serving`) are the server level's (`checks.serving`), run without HTTP.

A complete minimal adapter (the exact chain rule, by way of the reference) looks like this:

    import numpy as np
    from specverify.reference.chain import verify_batch

    class MySampler:
        name = "my-sampler"
        version = "1.0"
        capabilities = {"chain", "greedy"}

        def verify(self, batch, coins):
            return verify_batch(batch, coins)      # call your implementation here

    def factory():
        return MySampler()

and is audited with `specverify audit path/to/file.py:factory` (docs/adapter-protocol.md has a longer one).
"""

from dataclasses import dataclass  # noqa: E402

from specverify.reference.rules import RULES, TREE  # noqa: E402


@dataclass(frozen=True)
class Method:
    """One adapter method of the protocol (the docstring above says what each does).

    name         the attribute the harness calls
    params       its parameter names, in order: they name the input arrays a call changed
                 (`specverify.isolation`, `contract.inputs_unchanged`)
    provides     the capabilities it provides: a capability needs one of its methods
    required_by  the capabilities that need it besides one of their own methods
    """

    name: str
    params: tuple[str, ...]
    provides: tuple[str, ...] = ()
    required_by: tuple[str, ...] = ()


def _rule_capabilities(method: str) -> tuple[str, ...]:
    """The capabilities of the verify rules (`reference.rules.RULES`) the harness calls through `method`."""
    return tuple(r.capability for r in RULES.values() if r.method == method and r.capability is not None)


# THE table of the protocol's vocabulary: every method the harness may call, in the order the handle
# lists them (`specverify.isolation` derives its METHODS and PARAMS from it; METHODS, REQUIRED and
# CAPABILITIES below are derived from it too)
PROTOCOL = (
    Method("verify", ("batch", "coins"), _rule_capabilities("verify")),
    Method("verify_block", ("batch", "coins"), _rule_capabilities("verify_block")),
    Method("verify_trees", ("batch", "coins"), _rule_capabilities("verify_trees")),
    # the one-request form of the tree rule, called once per request
    Method("verify_tree", ("tree", "target_probs", "draft_probs", "coins", "final_coin"), (TREE.capability,)),
    Method("verify_seeded", ("batch", "seeds"), ("seeded",)),
    Method("generate", ("target", "draft", "prompt", "kappa", "transform", "seed", "n", "length", "processors", "knobs"),
           ("engine",)),
    Method("bitwise_info", (), required_by=("bitwise",)),     # specverify.adapters.bitwise_level
    Method("decode_greedy", ("request",), ("bitwise",)),
    Method("own_models", ("vocab", "seed")),                  # for `models = "own"` (check_models)
    # the serving path at the engine level (`adapters.serving_level`): per kept token its logprob, text,
    # finish reason, usage and step events
    Method("complete", ("requests",), ("serving",)),
    Method("counters", ()),                                   # optional beside "serving": preemption counts
)


def _by_capability(field: str) -> dict[str, tuple[str, ...]]:
    """capability -> the names of the methods whose `field` names it, capabilities in table order."""
    out: dict[str, tuple[str, ...]] = {}
    for m in PROTOCOL:
        for cap in getattr(m, field):
            out[cap] = out.get(cap, ()) + (m.name,)
    return out


# capability -> the methods that provide it (any one of them)
METHODS = _by_capability("provides")
# capability -> methods it needs besides one of METHODS[capability]
REQUIRED = _by_capability("required_by")
CAPABILITIES = tuple(METHODS)
# the logits processors an engine-level adapter may declare (`processors`); defined in reference.processors
from specverify.reference.processors import NAMES as PROCESSORS  # noqa: E402


def check_adapter(adapter, what: str) -> None:
    """The capability contract, before any check runs: `capabilities` is a collection of known names
    and every declared capability has its method. A gate must never pass because it checked less
    than the user thinks (a typo such as "chian" would otherwise skip every chain check)."""
    from specverify.errors import AdapterError

    caps = getattr(adapter, "capabilities", None)
    if isinstance(caps, (str, bytes)) or not hasattr(caps, "__iter__"):
        raise AdapterError(f"{what}: capabilities must be a set of names from {', '.join(CAPABILITIES)}, got {caps!r}")
    caps = list(caps)
    if not caps:
        raise AdapterError(f"{what}: the adapter declares no capabilities (one or more of {', '.join(CAPABILITIES)})")
    unknown = sorted({str(c) for c in caps if c not in METHODS})
    if unknown:
        raise AdapterError(f"{what}: unknown capability name(s) {', '.join(unknown)}; known: {', '.join(CAPABILITIES)}")
    for cap in caps:
        if not any(callable(getattr(adapter, m, None)) for m in METHODS[cap]):
            raise AdapterError(f"{what}: declares capability {cap!r} but has no {' or '.join(METHODS[cap])} method")
        for m in REQUIRED.get(cap, ()):
            if not callable(getattr(adapter, m, None)):
                raise AdapterError(f"{what}: declares capability {cap!r} but has no {m} method")
    check_models(adapter, what, caps)
    if "serving" in caps:
        from .serving_level import check_features
        check_features(adapter, what)
    check_processors(adapter, what, caps)
    check_draft_schedule(adapter, what)
    check_verify_rule(adapter, what)
    check_acceptance_knobs(adapter, what, caps)


# what an engine-level adapter's `models` attribute may say: the toy tables, the same as torch modules,
# or models of its own (`own_models(vocab, seed)`: tiny Llama folders, `specverify.models.tiny`)
MODELS = ("toy", "torch", "own")


def check_models(adapter, what: str, caps) -> None:
    """The `models` declaration, if any: one of MODELS; "own" needs own_models and the engine capability."""
    from specverify.errors import AdapterError

    models = getattr(adapter, "models", "toy")
    if models not in MODELS:
        raise AdapterError(f"{what}: models must be one of {', '.join(MODELS)}, got {models!r}")
    if models == "own":
        if "engine" not in caps:
            raise AdapterError(f"{what}: models = \"own\" is engine level, but the adapter does not declare \"engine\"")
        if not callable(getattr(adapter, "own_models", None)):
            raise AdapterError(f"{what}: models = \"own\" but the adapter has no own_models(vocab, seed) method")


def check_draft_schedule(adapter, what: str) -> None:
    """The `draft_schedule` declaration, if any (and not None): one of `reference.acceptance.SCHEDULES`."""
    from specverify.errors import AdapterError
    from specverify.reference.acceptance import SCHEDULES
    schedule = getattr(adapter, "draft_schedule", None)
    if schedule is not None and schedule not in SCHEDULES:
        raise AdapterError(f"{what}: draft_schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")


def check_verify_rule(adapter, what: str) -> None:
    """The `verify_rule` declaration, if any (and not None): one of `reference.acceptance.RULES`."""
    from specverify.errors import AdapterError
    from specverify.reference.acceptance import RULES
    rule = getattr(adapter, "verify_rule", None)
    if rule is not None and rule not in RULES:
        raise AdapterError(f"{what}: verify_rule {rule!r} is not one of {', '.join(RULES)}")
    from specverify.reference.span_drafters import is_span_drafter
    spans = getattr(adapter, "span_drafter", None)
    if spans is not None and not is_span_drafter(spans):
        raise AdapterError(f"{what}: span_drafter {type(spans).__name__} is not a reference.span_drafters.SpanDrafter")
    from specverify.reference.acceptance import DRAFT_SAMPLING
    sampling = getattr(adapter, "draft_sampling", None)
    if sampling is not None and sampling not in DRAFT_SAMPLING:
        raise AdapterError(f"{what}: draft_sampling {sampling!r} is not one of {', '.join(DRAFT_SAMPLING)}")


def check_acceptance_knobs(adapter, what: str, caps) -> None:
    """The `acceptance_knobs` declaration, if any: a collection of names from
    `checks.acceptance_invariance.KNOBS`, on an adapter with the "engine" capability."""
    from specverify.errors import AdapterError
    from specverify.checks.acceptance_invariance import KNOBS

    knobs = getattr(adapter, "acceptance_knobs", None)
    if knobs is None:
        return
    if isinstance(knobs, (str, bytes)) or not hasattr(knobs, "__iter__"):
        raise AdapterError(f"{what}: acceptance_knobs must be a set of names from {', '.join(KNOBS)}, got {knobs!r}")
    unknown = sorted({str(k) for k in knobs if k not in KNOBS})
    if unknown:
        raise AdapterError(f"{what}: unknown acceptance knob(s) {', '.join(unknown)}; known: {', '.join(KNOBS)}")
    if list(knobs) and "engine" not in caps:
        raise AdapterError(f"{what}: declares acceptance_knobs but not the \"engine\" capability")


def check_processors(adapter, what: str, caps) -> None:
    """The `processors` declaration, if any: a collection of known names (PROCESSORS), on an adapter
    with the "engine" capability (processors exist only at engine level)."""
    from specverify.errors import AdapterError

    if not hasattr(adapter, "processors"):
        return
    procs = getattr(adapter, "processors")
    if isinstance(procs, (str, bytes)) or not hasattr(procs, "__iter__"):
        raise AdapterError(f"{what}: processors must be a set of names from {', '.join(PROCESSORS)}, got {procs!r}")
    unknown = sorted({str(p) for p in procs if p not in PROCESSORS})
    if unknown:
        raise AdapterError(f"{what}: unknown processor name(s) {', '.join(unknown)}; known: {', '.join(PROCESSORS)}")
    if list(procs) and "engine" not in caps:
        raise AdapterError(f"{what}: declares processors but not the \"engine\" capability (processors are engine level)")
