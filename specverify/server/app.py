"""The FastAPI app: /v1/completions (plain and streamed), /v1/models, /version, /health.

`build_app(config)` loads the model, builds the engine behind a `Batcher` (continuous batching,
`batching.py`) and returns the app; the batcher's thread starts and stops with the app's lifespan.
The request and response layout is `wire.py`'s. A request's choices are jobs in the batcher; the
handler awaits their events on an asyncio queue the engine thread feeds through the event loop.

A client that disconnects does not stop its jobs: they run to max_tokens (bounded by the server's
--max-context) and their events are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib

from specverify import __version__
from specverify.errors import InputError

from . import wire
from .batching import Batcher, Job, choice_seed, stream_delta
from .config import ServeConfig
from .models import ServedModel, check_context
from .variants import VARIANTS


def spec_options(spec: str, kappa: int):
    """The engine's SpecOptions for a --spec text: none | ngram[:N] | draft[:LAYERS] | uniform | skewed."""
    from specverify.engine.api import PROPOSERS, SpecOptions
    name, _, arg = spec.partition(":")
    if name not in PROPOSERS:
        raise InputError(f"--spec {spec!r}: choose none, ngram[:N], draft[:LAYERS], uniform or skewed")
    kw = {}
    if arg:
        if not arg.isdigit() or name not in ("ngram", "draft"):
            raise InputError(f"--spec {spec!r}: only ngram:N and draft:LAYERS take a number")
        kw = {"ngram_n": int(arg)} if name == "ngram" else {"draft_layers": int(arg)}
    return SpecOptions(name, kappa=0 if name == "none" else kappa, **kw)


def kv_budget_blocks(budget: int, block_size: int, context: int) -> int:
    """The target's KV blocks for --kv-budget `budget` positions (rounded up to whole blocks); InputError
    below one request of the full context (`context` positions: a lone request must always fit, only
    concurrent ones are preempted)."""
    blocks = -(-int(budget) // block_size)
    need = -(-context // block_size)
    if blocks < need:
        raise InputError(f"--kv-budget {budget}: below one full-context request ({context} positions, "
                         f"{need} blocks of {block_size}); use at least {need * block_size}")
    return blocks


def engine_factory(model: ServedModel, config: ServeConfig):
    """make_engine(record_logits) -> a fresh engine for the batcher, built as `engine.api.generate`
    builds its own (the same proposer table, draft checks and KV sizing)."""
    from specverify.engine import api
    from specverify.engine.scheduler import KappaSchedule, spec_kappa

    spec = spec_options(config.spec, config.kappa)
    if config.variant not in VARIANTS:
        raise InputError(f"--variant {config.variant!r}: choose one of {', '.join(VARIANTS)}")
    engine_class = VARIANTS[config.variant]
    kappa = KappaSchedule(spec_kappa(spec.proposer, spec.kappa))
    target = api._as_model(model.target, config.backend)
    entry = api.PROPOSERS[spec.proposer]
    draft = api._draft_model(spec, target, model.draft, config.backend) if entry.draft_model else None
    context = min(config.max_context, model.max_context) + kappa.max_kappa + 2
    run = api.RunOptions(backend=config.backend, seed=config.seed, max_batch_size=config.max_batch,
                         block_size=config.block_size, engine_class=engine_class)
    num_blocks = api._num_blocks(run, engine_class, config.max_batch, context, kappa.max_kappa)
    if config.kv_budget is not None:
        num_blocks = kv_budget_blocks(config.kv_budget, config.block_size, context)
    tok = model.tokenizer

    def make_engine(record_logits):
        proposer = entry.build(spec, target, draft, run, num_blocks)
        return engine_class(target, proposer, kappa=kappa, max_batch_size=config.max_batch, num_blocks=num_blocks,
                            block_size=config.block_size, eos_token_id=model.eos_id,
                            detokenize=lambda ids: tok.decode(ids, skip_special=True), seed=config.seed,
                            record_logits=record_logits, prefix_caching=True)
    return make_engine


def _prompts(req: wire.CompletionRequest, model: ServedModel) -> list:
    """The request's prompts as token-id lists (strings through the model's tokenizer)."""
    p = req.prompt
    items = [p] if isinstance(p, str) or (p and isinstance(p[0], int)) else list(p)
    if not items:
        raise InputError("prompt is empty")
    out = []
    for item in items:
        ids = model.tokenizer.encode(item) if isinstance(item, str) else [int(t) for t in item]
        if not ids and not model.toy:
            raise InputError("a prompt needs at least one token")
        bad = [t for t in ids if not 0 <= t < model.vocab_size]
        if bad:
            raise InputError(f"prompt token {bad[0]} outside the vocabulary [0, {model.vocab_size})")
        out.append(ids)
    return out


def _sampling(req: wire.CompletionRequest, index: int):
    from specverify.engine.engine import SamplingParams
    seed = req.seed if req.seed is None or index == 0 else choice_seed(req.seed, index)
    return SamplingParams(temperature=float(req.temperature), top_k=max(0, int(req.top_k)), top_p=float(req.top_p),
                          seed=seed, max_tokens=int(req.max_tokens), stop=req.stops(),
                          stop_token_ids=tuple(req.stop_token_ids or ()), ignore_eos=bool(req.ignore_eos))


class _Choice:
    """One choice's state in the handler: its tokens, logprob entries and the text sent so far."""

    def __init__(self, index: int):
        self.index = index
        self.tokens: list = []
        self.entries: list = []
        self.finish_reason = None
        self.text = None
        self.sent = ""
        self.charged = 0                  # completion tokens the engine charges this choice (usage)
        self.cached = 0                   # its prompt tokens served from the prefix cache


def build_app(model: ServedModel, config: ServeConfig):
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    batcher = Batcher(engine_factory(model, config))
    tok = model.tokenizer

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            batcher.stop()

    app = FastAPI(title="specverify serve", version=__version__, lifespan=lifespan)
    app.state.batcher = batcher

    def error(status: int, message: str):
        return JSONResponse(wire.error_body(status, message), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return error(400, f"{where}: {first.get('msg', 'invalid request')}")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/version")
    async def version():
        return {"version": __version__, "engine": "specverify", "model": model.name, "spec": config.spec,
                "kappa": config.kappa, "variant": config.variant, "backend": config.backend}

    @app.get("/metrics")
    async def metrics():
        """Prometheus text: the engine's counters since the server started (docs/serving-path.md)."""
        from fastapi.responses import PlainTextResponse
        lines = []
        for name, value, help_ in batcher.counters():
            lines += [f"# HELP specverify_{name} {help_}", f"# TYPE specverify_{name} counter",
                      f"specverify_{name} {value}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        entry = {"id": model.name, "object": "model", "owned_by": "specverify", "max_model_len": model.max_context}
        codec = getattr(tok, "codec", None)
        if model.toy and codec is not None:          # a toy's byte-piece text (--toy-text multibyte): the audit
            entry["specverify_text"] = codec.to_dict()   # detokenises through it (`models.pieces.from_served`)
        return {"object": "list", "data": [entry]}

    @app.post("/v1/completions")
    async def completions(req: wire.CompletionRequest):
        if req.model != model.name:
            return error(404, f"model {req.model!r} not found; this server serves {model.name!r}")
        why = req.unsupported()
        if why:
            return error(400, why)
        try:
            prompts = _prompts(req, model)
            for ids in prompts:
                check_context(model, len(ids), req.max_tokens, config.kappa)
            params = [_sampling(req, i) for i in range(req.n)]
        except InputError as exc:
            return error(400, str(exc))
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        choices, jobs = [], []
        for p_index, ids in enumerate(prompts):
            engine_prompt = ([model.vocab_size] if model.toy else []) + ids     # a toy model's sentinel first
            for i in range(req.n):
                c = _Choice(p_index * req.n + i)
                choices.append(c)
                jobs.append(Job(engine_prompt, params[i], req.logprobs,
                                lambda ev, c=c: loop.call_soon_threadsafe(queue.put_nowait, (c, ev))))
        batcher.submit(jobs)
        cid = wire.completion_id()
        prompt_tokens = sum(len(p) for p in prompts)
        sentinel = 1 if model.toy else 0          # a toy prompt's sentinel is cached with it, but not the user's

        def usage():
            """Kept ids over every choice; a prompt's cached tokens once (its first choice's)."""
            cached = sum(max(0, c.cached - sentinel) for c in choices[::req.n])
            return wire.usage(prompt_tokens, sum(c.charged for c in choices), cached)

        def choice_body(c, tokens, entries, text, finish):
            body = {"index": c.index, "text": text, "finish_reason": finish,
                    "logprobs": None if req.logprobs is None else wire.logprobs_block(
                        tokens, entries, tok.piece, req.return_tokens_as_token_ids, len(c.sent) - len(text))}
            if req.return_token_ids:
                body["token_ids"] = tokens
            return body

        if not req.stream:
            left = len(choices)
            while left:
                c, ev = await queue.get()
                if ev[0] == "error":
                    return error(ev[1], ev[2])
                if ev[0] == "tokens":
                    c.tokens += ev[1]
                    c.entries += ev[2]
                else:
                    c.finish_reason, c.text, c.charged, c.cached = ev[1], ev[2], ev[3], ev[4]
                    left -= 1
            out = []
            for c in choices:
                c.sent = c.text
                out.append(choice_body(c, c.tokens, c.entries, c.text, c.finish_reason))
            body = wire.envelope(cid, model.name, out, usage())
            if req.return_token_ids:
                body["prompt_token_ids"] = prompts
            return body

        def decode(ids):
            return tok.decode(ids, skip_special=True)

        hold_unfinished = getattr(batcher.engine, "stream_holds_unfinished", True)   # variant 55 does not

        async def events():
            left = len(choices)
            while left:
                c, ev = await queue.get()
                if ev[0] == "error":
                    yield wire.sse(wire.error_body(ev[1], ev[2]))
                    break
                if ev[0] == "tokens":
                    new, ent = ev[1], ev[2]
                    c.tokens += new
                    delta = stream_delta(decode, c.tokens, c.sent, req.stops(), hold_unfinished)
                    c.sent += delta
                    yield wire.sse(wire.envelope(cid, model.name, [choice_body(c, new, ent, delta, None)]))
                else:
                    final = ev[2] if ev[2] is not None else ""
                    delta = final[len(c.sent):]
                    c.sent = final
                    c.charged, c.cached = ev[3], ev[4]
                    left -= 1
                    yield wire.sse(wire.envelope(cid, model.name, [choice_body(c, [], [], delta, ev[1])]))
            if req.stream_options is not None and req.stream_options.include_usage:
                yield wire.sse(wire.envelope(cid, model.name, [],
                                             usage()))
            yield wire.sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
