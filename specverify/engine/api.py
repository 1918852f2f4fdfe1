"""One call to run the engine: `generate(target, draft, prompts, ...)`.

Models: a `Llama` (rebound to `backend`), any object with the model protocol, or a reference toy
model (anything with `vocab_size` and `logits(prefix)` but no `forward`), wrapped in `ToyAdapter`.
Prompts: token-id sequences (a toy prompt may be empty), or strings when a tokenizer is given.

spec: "none" (plain decode, kappa forced to 0), "ngram" (prompt lookup), "draft" (the `draft`
model; for a Llama target with draft=None, its first `draft_layers` layers + head, sharing weights),
"uniform"/"skewed" (context-free random drafts, for audits).

Randomness: request i draws its coins from its own generator, seeded by `seeds[i]` when given,
else by (seed, i); its drafts come from an independent stream of the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from specverify.errors import InputError

from .engine import Engine, SamplingParams
from .metrics import SpecMetrics
from .model import Llama
from .proposers import DraftModelProposer, NgramProposer, RandomProposer
from .scheduler import KappaSchedule
from .toy_adapter import ToyAdapter

SPECS = ("none", "ngram", "draft", "uniform", "skewed")


@dataclass
class GenerateResult:
    tokens: list                  # [n_prompts] lists of generated token ids
    outputs: list                 # [n_prompts] RequestOutput (finish reason, text when a tokenizer is given)
    metrics: SpecMetrics


def _as_model(m, backend):
    if m is None:
        return None
    if isinstance(m, Llama):
        return m.with_backend(backend)
    if hasattr(m, "forward") and hasattr(m, "make_cache"):
        return m
    if hasattr(m, "logits") and hasattr(m, "vocab_size"):
        return ToyAdapter(m)
    raise InputError(f"not a model: {type(m).__name__} (needs forward/make_cache, or a toy model's logits)")


def generate(target, draft=None, prompts=(), *, kappa=3, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, seed: int = 0, max_tokens: int = 16, spec: str = "draft",
             backend="default", max_batch_size: int | None = None, seeds=None, params=None,
             stop=(), eos_token_id: int | None = None, tokenizer=None, draft_layers: int = 6,
             ngram_n: int = 3, ngram_min: int = 1, record_logits=None, num_blocks: int | None = None, block_size: int = 16,
             prefix_caching: bool = True, mutant: str | None = None, on_step=None) -> GenerateResult:
    """Generate for every prompt; return the token lists, outputs and the run's SpecMetrics.

    params: an optional list of SamplingParams, one per prompt (overrides the scalar knobs)."""
    if spec not in SPECS:
        raise InputError(f"unknown spec {spec!r}; choose one of {', '.join(SPECS)}")
    target_m = _as_model(target, backend)
    toy = isinstance(target_m, ToyAdapter)
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts")
    enc = []
    for p in prompts:
        if isinstance(p, str):
            if tokenizer is None:
                raise InputError("string prompts need a tokenizer")
            p = tokenizer.encode(p)
        p = [int(t) for t in p]
        if toy:
            p = [target_m.sentinel] + p
        enc.append(p)
    if params is None:
        params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_tokens=max_tokens,
                                 stop=tuple(stop), seed=None if seeds is None else int(seeds[i]))
                  for i in range(len(enc))]
    elif len(params) != len(enc):
        raise InputError(f"{len(params)} SamplingParams for {len(enc)} prompts")
    if spec == "none":
        kappa = 0
    max_k = KappaSchedule(kappa).max_kappa
    vocab = target_m.vocab_size
    if spec == "ngram":
        proposer = NgramProposer(n_max=ngram_n, n_min=ngram_min)
    elif spec in ("uniform", "skewed"):
        proposer = RandomProposer(vocab, spec, seed)
    elif spec == "draft":
        if draft is None:
            if not isinstance(target_m, Llama):
                raise InputError("spec 'draft' needs a draft model for this target")
            draft_m = target_m.draft_view(draft_layers)
        else:
            draft_m = _as_model(draft, backend)
        if draft_m.vocab_size != vocab:
            raise InputError(f"draft vocabulary {draft_m.vocab_size} != target vocabulary {vocab}")
        proposer = None
    else:
        proposer = None
    bsz = max_batch_size or len(enc)
    longest = max(len(p) for p in enc) + max(pp.max_tokens for pp in params) + max_k + 2
    if num_blocks is None:
        # a stale-KV mutant never rolls back: up to kappa + 1 slots a token
        grow = max_k + 1 if mutant == "stale_kv" else 1
        num_blocks = bsz * (-(-longest * grow // block_size)) + 4
    if spec == "draft":
        proposer = DraftModelProposer(draft_m, num_blocks, block_size)
    if isinstance(target_m, Llama) and longest > target_m.config.max_seq_len:
        raise InputError(f"prompt + max_tokens = {longest} exceeds the model's context {target_m.config.max_seq_len}")
    eos = eos_token_id
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_id
    engine = Engine(target_m, None if spec == "none" else proposer, kappa=kappa, max_batch_size=bsz,
                    num_blocks=num_blocks, block_size=block_size, eos_token_id=eos,
                    detokenize=(lambda ids: tokenizer.decode(ids, skip_special=True)) if tokenizer is not None else None, seed=seed,
                    record_logits=record_logits, prefix_caching=prefix_caching, mutant=mutant)
    for i, (p, pp) in enumerate(zip(enc, params)):
        engine.add_request(p, pp, request_id=i)
    while engine.has_unfinished():
        events = engine.step()
        if on_step is not None:
            on_step(events)
    outputs = [engine.outputs[i] for i in range(len(enc))]
    return GenerateResult([o.token_ids for o in outputs], outputs, engine.metrics)
