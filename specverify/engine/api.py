"""One call to run the engine: `generate(target, draft, prompts, sampling=, spec=, run=, tokenizer=)`.

Models: a `Llama` (rebound to `run.backend`), any object with the model protocol, or a reference toy
model (anything with `vocab_size` and `logits(prefix)` but no `forward`), wrapped in `ToyAdapter`.
Prompts: token-id sequences (a toy prompt may be empty), or strings when a tokenizer is given.

The options: `SamplingParams` (engine.py) per request, `SpecOptions` (how drafts are proposed),
`RunOptions` (backend, seed, batching, KV cache, callbacks, the engine class), each frozen and
checked when built.

Randomness: request i draws its coins from its own generator, seeded by its SamplingParams.seed when
set, else by (run.seed, i); its drafts come from an independent stream of the same seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specverify.errors import InputError

from .engine import Engine, SamplingParams
from .metrics import SpecMetrics
from .model import Llama
from .proposers import DraftModelProposer, NgramProposer, RandomProposer
from .scheduler import DEFAULT_KAPPA, KappaSchedule, check_kappa, spec_kappa
from .toy_adapter import ToyAdapter

SPECS = ("none", "ngram", "draft", "uniform", "skewed")


@dataclass(frozen=True)
class SpecOptions:
    """How drafts are proposed: `proposer` is "none" (plain decode, kappa taken as 0), "ngram" (prompt
    lookup), "draft" (the `draft` model; for a Llama target with draft=None, its first `draft_layers`
    layers + head, sharing weights), "uniform"/"skewed" (context-free random drafts, for audits)."""
    proposer: str = "draft"
    kappa: int | dict = DEFAULT_KAPPA   # drafts per verify step, or {max batch size: kappa} (`KappaSchedule`)
    draft_layers: int = 6          # layers of the self-speculative draft (proposer "draft", draft=None)
    ngram_n: int = 3               # longest n-gram looked up (proposer "ngram")
    ngram_min: int = 1             # shortest n-gram that may propose (proposer "ngram")

    def __post_init__(self):
        if self.proposer not in SPECS:
            raise InputError(f"unknown spec {self.proposer!r}; choose one of {', '.join(SPECS)}")
        check_kappa(self.kappa)
        if self.draft_layers < 1:
            raise InputError(f"draft_layers {self.draft_layers} must be >= 1")
        if self.ngram_min < 1:
            raise InputError(f"ngram_min {self.ngram_min} must be >= 1")
        if self.ngram_n < self.ngram_min:
            raise InputError(f"ngram_n {self.ngram_n} must be >= ngram_min {self.ngram_min}")


@dataclass(frozen=True)
class RunOptions:
    """How the engine runs the requests."""
    backend: str = "default"            # op backend (name or object) a Llama target is rebound to
    seed: int = 0                       # request coins from (seed, i) unless SamplingParams.seed; random drafts
    max_batch_size: int | None = None   # requests decoded together (None: every prompt at once)
    num_blocks: int | None = None       # KV cache blocks (None: enough for max_batch_size requests)
    block_size: int = 16                # token positions per KV block
    prefix_caching: bool = True         # reuse the finalized full blocks of earlier requests
    eos_token_id: int | None = None     # None: the tokenizer's, if one is given
    record_logits: Callable | None = None   # record_logits(request_id, output_index, row) per kept token
    on_step: Callable | None = None     # on_step(events) after every step (`Engine.step`'s return)
    engine_class: type = Engine         # `Engine` or a subclass of it
    admit_per_step: int | None = None   # add at most this many requests before each step (None: all at
                                        # once); 1 staggers them: launches mix prefills, decodes, verifies

    def __post_init__(self):
        if self.admit_per_step is not None and self.admit_per_step < 1:
            raise InputError(f"admit_per_step {self.admit_per_step} must be >= 1")
        if self.max_batch_size is not None and self.max_batch_size < 1:
            raise InputError(f"max_batch_size {self.max_batch_size} must be >= 1")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise InputError(f"num_blocks {self.num_blocks} must be >= 1")
        if self.block_size < 1:
            raise InputError(f"block_size {self.block_size} must be >= 1")
        if self.eos_token_id is not None and self.eos_token_id < 0:
            raise InputError(f"eos_token_id {self.eos_token_id} must be >= 0")
        for name in ("record_logits", "on_step"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise InputError(f"{name} must be callable or None")
        if not (isinstance(self.engine_class, type) and issubclass(self.engine_class, Engine)):
            raise InputError(f"engine_class {self.engine_class!r} is not Engine or a subclass of it")


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


def generate(target, draft=None, prompts=(), *, sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams(),
             spec: SpecOptions = SpecOptions(), run: RunOptions = RunOptions(), tokenizer=None) -> GenerateResult:
    """Generate for every prompt; return the token lists, outputs and the run's SpecMetrics.

    sampling: one SamplingParams for every prompt, or a sequence of them, one per prompt.
    tokenizer: encodes string prompts, decodes the outputs (text, stop strings), gives the EOS token."""
    target_m = _as_model(target, run.backend)
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
    if isinstance(sampling, SamplingParams):
        params = [sampling] * len(enc)
    else:
        params = list(sampling)
        if len(params) != len(enc):
            raise InputError(f"{len(params)} SamplingParams for {len(enc)} prompts")
        if not all(isinstance(pp, SamplingParams) for pp in params):
            raise InputError("sampling must be a SamplingParams or a sequence of them")
    kappa = KappaSchedule(spec_kappa(spec.proposer, spec.kappa))
    max_k = kappa.max_kappa
    vocab = target_m.vocab_size
    if spec.proposer == "ngram":
        proposer = NgramProposer(n_max=spec.ngram_n, n_min=spec.ngram_min)
    elif spec.proposer in ("uniform", "skewed"):
        proposer = RandomProposer(vocab, spec.proposer, run.seed)
    elif spec.proposer == "draft":
        if draft is None:
            if not isinstance(target_m, Llama):
                raise InputError("spec 'draft' needs a draft model for this target")
            draft_m = target_m.draft_view(spec.draft_layers)
        else:
            draft_m = _as_model(draft, run.backend)
        if draft_m.vocab_size != vocab:
            raise InputError(f"draft vocabulary {draft_m.vocab_size} != target vocabulary {vocab}")
        proposer = None
    else:
        proposer = None
    bsz = run.max_batch_size or len(enc)
    longest = max(len(p) for p in enc) + max(pp.max_tokens for pp in params) + max_k + 2
    num_blocks = run.num_blocks
    if num_blocks is None:
        grow = run.engine_class.kv_positions_per_token(max_k)
        num_blocks = bsz * (-(-longest * grow // run.block_size)) + 4
    if spec.proposer == "draft":
        proposer = DraftModelProposer(draft_m, num_blocks, run.block_size)
    if isinstance(target_m, Llama) and longest > target_m.config.max_seq_len:
        raise InputError(f"prompt + max_tokens = {longest} exceeds the model's context {target_m.config.max_seq_len}")
    eos = run.eos_token_id
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_id
    detokenize = (lambda ids: tokenizer.decode(ids, skip_special=True)) if tokenizer is not None else None
    engine = run.engine_class(target_m, None if spec.proposer == "none" else proposer, kappa=kappa,
                              max_batch_size=bsz, num_blocks=num_blocks, block_size=run.block_size, eos_token_id=eos,
                              detokenize=detokenize, seed=run.seed, record_logits=run.record_logits,
                              prefix_caching=run.prefix_caching)
    pending = list(enumerate(zip(enc, params)))
    while pending or engine.has_unfinished():
        admit = len(pending) if run.admit_per_step is None else run.admit_per_step
        for i, (p, pp) in pending[:admit]:
            engine.add_request(p, pp, request_id=i)
        del pending[:admit]
        events = engine.step()
        if run.on_step is not None:
            run.on_step(events)
    outputs = [engine.outputs[i] for i in range(len(enc))]
    return GenerateResult([o.token_ids for o in outputs], outputs, engine.metrics)
