"""One call to run the engine: `generate(target, draft, prompts, sampling=, spec=, run=, tokenizer=)`.

Models: a `Llama` (rebound to `run.backend`), any object with the model protocol, or a reference toy
model (anything with `vocab_size` and `logits(prefix)` but no `forward`), wrapped in `ToyAdapter`.
Prompts: token-id sequences (a toy prompt may be empty), or strings when a tokenizer is given.

The options: `SamplingParams` (engine.py) per request, `SpecOptions` (how drafts are proposed),
`RunOptions` (backend, seed, batching, KV cache, callbacks, the engine class), each frozen and
checked when built.

`PROPOSERS` is the table of proposers a `SpecOptions.proposer` names (name -> capability, whether it
runs a draft model, its builder); adding one is one entry there. `generate` is a sequence of named
steps: encode the prompts, one SamplingParams each, the run's kappa (`scheduler.spec_kappa`), the
draft model if the proposer needs one, the KV cache's size, the proposer, the engine, then admit and
step to completion.

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
from .proposers import DraftModelProposer, ExternalProposer, NgramProposer, RandomProposer
from .scheduler import DEFAULT_KAPPA, KappaSchedule, check_kappa, spec_kappa
from .toy_adapter import ToyAdapter


@dataclass(frozen=True)
class ProposerEntry:
    """One way to propose drafts. `draft_model`: whether it runs a draft model (resolved and checked
    before the KV cache is sized); `build(spec, target, draft_model, run, num_blocks)` returns the
    proposer object (`proposers.py`'s interface), or None for plain decode."""
    name: str
    capability: str
    draft_model: bool
    build: Callable


def _no_proposer(spec, target, draft, run, num_blocks):
    return None


def _ngram(spec, target, draft, run, num_blocks):
    return NgramProposer(n_max=spec.ngram_n, n_min=spec.ngram_min)


def _draft(spec, target, draft, run, num_blocks):
    return DraftModelProposer(draft, num_blocks, run.block_size, prefix_caching=run.prefix_caching)


def _uniform(spec, target, draft, run, num_blocks):
    return RandomProposer(target.vocab_size, "uniform", run.seed)


def _skewed(spec, target, draft, run, num_blocks):
    return RandomProposer(target.vocab_size, "skewed", run.seed)


def _external(spec, target, draft, run, num_blocks):
    return ExternalProposer(spec.drafts_of)


PROPOSERS = {e.name: e for e in (
    ProposerEntry("none", "plain decode: no drafts, kappa taken as 0", False, _no_proposer),
    ProposerEntry("ngram", "prompt lookup: what followed the latest earlier match of the last n tokens", False, _ngram),
    ProposerEntry("draft", "a draft model (default: the target's first draft_layers layers and its head)", True, _draft),
    ProposerEntry("uniform", "context-free drafts, q uniform (for audits)", False, _uniform),
    ProposerEntry("skewed", "context-free drafts, q ~ Dirichlet(0.1) (for audits)", False, _skewed),
    ProposerEntry("external", "the caller's drafts_of(request_id, n_output, k) (the bitwise level's oracle "
                  "and adversarial drafters)", False, _external),
)}
SPECS = tuple(PROPOSERS)        # the proposer names, in the table's order


@dataclass(frozen=True)
class SpecOptions:
    """How drafts are proposed: `proposer` names an entry of `PROPOSERS`: "none" (plain decode, kappa
    taken as 0), "ngram" (prompt lookup), "draft" (the `draft` model; for a Llama target with
    draft=None, its first `draft_layers` layers + head, sharing weights), "uniform"/"skewed"
    (context-free random drafts, for audits), "external" (`drafts_of`'s drafts)."""
    proposer: str = "draft"
    kappa: int | dict = DEFAULT_KAPPA   # drafts per verify step, or {max batch size: kappa} (`KappaSchedule`)
    draft_layers: int = 6          # layers of the self-speculative draft (proposer "draft", draft=None)
    ngram_n: int = 3               # longest n-gram looked up (proposer "ngram")
    ngram_min: int = 1             # shortest n-gram that may propose (proposer "ngram")
    drafts_of: Callable | None = None   # proposer "external": drafts_of(request_id, n_output, k) -> ids

    def __post_init__(self):
        if self.proposer not in PROPOSERS:
            raise InputError(f"unknown spec {self.proposer!r}; choose one of {', '.join(PROPOSERS)}")
        check_kappa(self.kappa)
        if self.draft_layers < 1:
            raise InputError(f"draft_layers {self.draft_layers} must be >= 1")
        if self.ngram_min < 1:
            raise InputError(f"ngram_min {self.ngram_min} must be >= 1")
        if self.ngram_n < self.ngram_min:
            raise InputError(f"ngram_n {self.ngram_n} must be >= ngram_min {self.ngram_min}")
        if (self.proposer == "external") != callable(self.drafts_of):
            raise InputError("spec 'external' needs drafts_of (a callable), and only it takes one")


@dataclass(frozen=True)
class RunOptions:
    """How the engine runs the requests."""
    backend: str = "default"            # op backend (name or object) a Llama target is rebound to
    seed: int = 0                       # request coins from (seed, i) unless SamplingParams.seed; random drafts
    max_batch_size: int | None = None   # requests decoded together (None: every prompt at once)
    num_blocks: int | None = None       # KV cache blocks (None: enough for max_batch_size requests)
    block_size: int = 16                # token positions per KV block
    prefix_caching: bool = True         # reuse the finalized full blocks of earlier requests
    prefill_chunk: int | None = None    # prompt tokens fed per step at most (None: the whole prompt at once)
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
        if self.prefill_chunk is not None and (isinstance(self.prefill_chunk, bool) or self.prefill_chunk < 1):
            raise InputError(f"prefill_chunk {self.prefill_chunk!r} must be >= 1 (None: the whole prompt)")
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


def _encode_prompts(prompts, target_m, tokenizer) -> list:
    """Token-id lists of the prompts (strings through the tokenizer); a toy target's sentinel first."""
    prompts = list(prompts)
    if not prompts:
        raise InputError("no prompts")
    toy = isinstance(target_m, ToyAdapter)
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
    return enc


def _sampling_list(sampling, n: int) -> list:
    """One SamplingParams per prompt."""
    if isinstance(sampling, SamplingParams):
        return [sampling] * n
    params = list(sampling)
    if len(params) != n:
        raise InputError(f"{len(params)} SamplingParams for {n} prompts")
    if not all(isinstance(pp, SamplingParams) for pp in params):
        raise InputError("sampling must be a SamplingParams or a sequence of them")
    return params


def _draft_model(spec, target_m, draft, backend):
    """The draft model of a draft-model proposer, its vocabulary checked against the target's."""
    if draft is None:
        if not isinstance(target_m, Llama):
            raise InputError("spec 'draft' needs a draft model for this target")
        draft_m = target_m.draft_view(spec.draft_layers)
    else:
        draft_m = _as_model(draft, backend)
    if draft_m.vocab_size != target_m.vocab_size:
        raise InputError(f"draft vocabulary {draft_m.vocab_size} != target vocabulary {target_m.vocab_size}")
    return draft_m


def _num_blocks(run, engine_class, bsz: int, longest: int, max_k: int) -> int:
    """KV blocks: the run's, or enough for `bsz` requests of `longest` positions each."""
    if run.num_blocks is not None:
        return run.num_blocks
    grow = engine_class.kv_positions_per_token(max_k)
    return bsz * (-(-longest * grow // run.block_size)) + 4


def _run_to_completion(engine, enc, params, run) -> None:
    """Admit the requests (all at once, or run.admit_per_step before each step) and step until done."""
    pending = list(enumerate(zip(enc, params)))
    while pending or engine.has_unfinished():
        admit = len(pending) if run.admit_per_step is None else run.admit_per_step
        for i, (p, pp) in pending[:admit]:
            engine.add_request(p, pp, request_id=i)
        del pending[:admit]
        events = engine.step()
        if run.on_step is not None:
            run.on_step(events)


def generate(target, draft=None, prompts=(), *, sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams(),
             spec: SpecOptions = SpecOptions(), run: RunOptions = RunOptions(), tokenizer=None) -> GenerateResult:
    """Generate for every prompt; return the token lists, outputs and the run's SpecMetrics.

    sampling: one SamplingParams for every prompt, or a sequence of them, one per prompt.
    tokenizer: encodes string prompts, decodes the outputs (text, stop strings), gives the EOS token."""
    target_m = _as_model(target, run.backend)
    enc = _encode_prompts(prompts, target_m, tokenizer)
    params = _sampling_list(sampling, len(enc))
    kappa = KappaSchedule(spec_kappa(spec.proposer, spec.kappa))
    entry = PROPOSERS[spec.proposer]
    draft_m = _draft_model(spec, target_m, draft, run.backend) if entry.draft_model else None
    bsz = run.max_batch_size or len(enc)
    longest = max(len(p) for p in enc) + max(pp.max_tokens for pp in params) + kappa.max_kappa + 2
    num_blocks = _num_blocks(run, run.engine_class, bsz, longest, kappa.max_kappa)
    proposer = entry.build(spec, target_m, draft_m, run, num_blocks)
    if isinstance(target_m, Llama) and longest > target_m.config.max_seq_len:
        raise InputError(f"prompt + max_tokens = {longest} exceeds the model's context {target_m.config.max_seq_len}")
    eos = run.eos_token_id
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_id
    detokenize = (lambda ids: tokenizer.decode(ids, skip_special=True)) if tokenizer is not None else None
    engine = run.engine_class(target_m, proposer, kappa=kappa,
                              max_batch_size=bsz, num_blocks=num_blocks, block_size=run.block_size, eos_token_id=eos,
                              detokenize=detokenize, seed=run.seed, record_logits=run.record_logits,
                              prefix_caching=run.prefix_caching, prefill_chunk=run.prefill_chunk)
    _run_to_completion(engine, enc, params, run)
    outputs = [engine.outputs[i] for i in range(len(enc))]
    return GenerateResult([o.token_ids for o in outputs], outputs, engine.metrics)
