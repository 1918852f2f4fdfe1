"""The serving path at the engine level (capability "serving"): what an in-process engine returns after
its sampler -- logprobs, text, finish reasons, usage, step events -- without a server.

    complete(requests: tuple[ServingRequest, ...]) -> list[ServingOutput]
        the requests submitted together, as one HTTP request with a list of prompts is (an engine with
        continuous batching admits them at once), each run to its end; one output per request, in order.
        The adapter keeps one engine across calls, as a server does: what ran before must not change a
        seeded request, and a prefix cache stays warm.

    serving_model       (attribute, required) "tiny:V,SEED": the toy model the engine serves
                        (`server.models.tiny_models`; token i is the text " t{i}"), so that the rows know
                        the exact logprob of every token (`reference.serving.log_softmax` of its row);
                        or, with serving_codec, the name of the real model it runs (a tiny Llama GGUF)
    serving_codec       (attribute, optional) a `models.pieces.PieceCodec`: the model's one-character
                        pieces (a `specverify models write` GGUF's text vocabulary), its V tokens and the
                        exact text of any ids; then serving_model names that model, not a toy, and the
                        rows compare logprobs with the engine's own teacher-forced ones (no toy row); or a
                        `models.pieces.BytePieceCodec`: a tiny:V,SEED toy's text as byte pieces (the
                        multi-byte case of the stream row: `specverify-serving` with text "multibyte")
    serving_features    (attribute, required) which of FEATURES the outputs carry; a row that needs one the
                        adapter lacks is a SKIP listed under not covered
    serving_float64_logprobs
                        (attribute, optional, default True) whether its logprobs are computed from the
                        toy's float64 rows (compared bit for bit); False: the engine casts its logits
                        (transformers' generate: float32), compared within checks.serving.LOGPROB_ATOL
    serving_skips       (attribute, optional) {row: why}: why the engine's API cannot run a row the
                        adapter leaves out (a row of SKIP_ROWS: "logprobs", "stop", "length.usage", ...);
                        appended to that row's SKIP (an unknown row is an error)
    counters()          (optional) {"num_preemptions": int, "num_decode_preemptions": int} since the
                        adapter was built: preemptions, and those of a request that had emitted a token

The definitions the fields are held to are the server's (`reference.serving`, docs/serving-path.md):
a logprob is log_softmax(row)[token] of the model's row the token was decided from (raw: before
temperature / top-k / top-p); a stop string ends the run at the token that completes it (that token
kept, nothing after, the text cut at the earliest match); max_tokens ends it with "length".

`EngineLevelClient` is the audit's side: it answers the server rows' client calls (`checks/serving.py`:
many, complete, counter, probe) through `complete`, so the same rows run at the engine level
(`checks/engine_serving.py`). Not at this level: n > 1 choices (the protocol has no n), top_k / top_p.
"""

from __future__ import annotations

from dataclasses import dataclass

from specverify.errors import AdapterError

# what a ServingOutput may carry, beyond ids and finish_reason (always)
FEATURES = ("logprobs",        # logprobs (and top when asked) of every kept id
            "text",            # the detokenised text, cut at a stop string
            "stop",            # stop strings honoured
            "seed",            # seeded requests: the request's own generator
            "usage",           # completion_tokens: what the engine charges the request
            "stream",          # deltas: the text of each step's event (and delta_ids its ids)
            "prefix_cache")    # cached_tokens: prompt tokens served from a prefix cache
FINISH_REASONS = ("stop", "length")
# the engine-level rows an adapter may give its API's reason for skipping (`serving_skips`)
SKIP_ROWS = ("logprobs", "stop", "length.usage", "stream", "seeds", "prefix_cache", "preemption",
             "seeds.n_independent")
TOKEN_ID_PREFIX = "token_id:"      # how the rows name a token in top entries (vLLM's return_tokens_as_token_ids)


@dataclass(frozen=True)
class ServingRequest:
    prompt: tuple                  # token ids
    max_tokens: int
    temperature: float = 0.0       # 0: greedy
    seed: int | None = None        # None: the engine's own stream
    stop: tuple = ()               # stop strings
    logprobs: int | None = None    # None: none; k >= 0: each kept token's logprob and its top k entries
    stream: bool = False           # return the step events' deltas too


@dataclass(frozen=True)
class ServingOutput:
    ids: tuple                     # the kept token ids
    finish_reason: str             # "stop" | "length"
    text: str | None = None        # the detokenised ids, cut at the earliest stop string
    logprobs: tuple | None = None  # one per id (float)
    top: tuple | None = None       # one per id: {token id: logprob} of its top `logprobs` entries
    completion_tokens: int | None = None   # usage: the tokens the engine charges
    cached_tokens: int | None = None       # prompt tokens served from the prefix cache
    deltas: tuple | None = None    # a streamed request: the text of each step event, in order
    delta_ids: tuple | None = None  # ... and the ids of each event


def check_features(adapter, what: str) -> None:
    """The "serving" declaration: serving_model is tiny:V,SEED (or, with a serving_codec, a model's name)
    and serving_features names only FEATURES."""
    from specverify.models.pieces import BytePieceCodec, PieceCodec
    from specverify.server.models import parse_tiny

    model = getattr(adapter, "serving_model", None)
    codec = getattr(adapter, "serving_codec", None)
    if codec is not None and not isinstance(codec, (PieceCodec, BytePieceCodec)):
        raise AdapterError(f"{what}: serving_codec must be a specverify.models.pieces.PieceCodec, got "
                           f"{type(codec).__name__}")
    if isinstance(codec, BytePieceCodec):     # a toy model's multi-byte text: the model is still the toy
        tiny = parse_tiny(model) if isinstance(model, str) else None
        if tiny is None or tiny[0] != codec.vocab:
            raise AdapterError(f"{what}: a BytePieceCodec (a toy's text) needs serving_model \"tiny:V,SEED\" with "
                               f"V = its {codec.vocab} pieces, got {model!r}")
    elif codec is not None:
        if not isinstance(model, str) or not model or parse_tiny(model) is not None:
            raise AdapterError(f"{what}: with a serving_codec, serving_model names the real model the engine runs "
                               f"(not a tiny:V,SEED toy), got {model!r}")
    elif not isinstance(model, str) or parse_tiny(model) is None:
        raise AdapterError(f"{what}: capability 'serving' needs serving_model = \"tiny:V,SEED\" (the toy model "
                           f"its engine runs) or a serving_codec, got {model!r}")
    feats = getattr(adapter, "serving_features", None)
    if isinstance(feats, (str, bytes)) or not hasattr(feats, "__iter__"):
        raise AdapterError(f"{what}: serving_features must be a collection of names from {', '.join(FEATURES)}, "
                           f"got {feats!r}")
    unknown = sorted({str(f) for f in feats if f not in FEATURES})
    if unknown:
        raise AdapterError(f"{what}: unknown serving feature(s) {', '.join(unknown)}; known: {', '.join(FEATURES)}")
    skips = getattr(adapter, "serving_skips", None)
    if skips is not None:
        if not isinstance(skips, dict) or not all(isinstance(v, str) and v for v in skips.values()):
            raise AdapterError(f"{what}: serving_skips must be a dict {{row: why (a non-empty string)}}, got {skips!r}")
        unknown = sorted(str(k) for k in skips if k not in SKIP_ROWS)
        if unknown:
            raise AdapterError(f"{what}: serving_skips names unknown row(s) {', '.join(unknown)}; known: "
                               f"{', '.join(SKIP_ROWS)}")


def _bad(what: str, i: int, why: str) -> AdapterError:
    return AdapterError(f"{what}.complete: output {i}: {why}")


def checked(outputs, requests, what: str, vocab: int) -> list:
    """The adapter's outputs for `requests`, checked against the protocol (AdapterError naming the first problem)."""
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(requests):
        raise AdapterError(f"{what}.complete: expected a list of {len(requests)} ServingOutput, got "
                           f"{type(outputs).__name__} of {len(outputs) if hasattr(outputs, '__len__') else '?'}")
    for i, (o, r) in enumerate(zip(outputs, requests)):
        if not isinstance(o, ServingOutput):
            raise _bad(what, i, f"not a ServingOutput: {type(o).__name__}")
        if not all(isinstance(t, int) and 0 <= t < vocab for t in o.ids):
            raise _bad(what, i, f"ids {list(o.ids)[:8]} are not token ids in [0, {vocab})")
        if o.finish_reason not in FINISH_REASONS:
            raise _bad(what, i, f"finish_reason {o.finish_reason!r} is not one of {', '.join(FINISH_REASONS)}")
        if r.logprobs is not None and o.logprobs is not None and o.top is not None and len(o.top) != len(o.logprobs):
            raise _bad(what, i, f"{len(o.top)} top lists for {len(o.logprobs)} logprobs")
    return list(outputs)


class EngineLevelClient:
    """The server rows' client (`server.client.ServerClient`'s calls) answered by a "serving" adapter.

    many(requests, k)       one `complete` call, the requests at once (k = 1: one call each, one at a time)
    complete(prompt, ...)   one request, or a list of prompts as one call
    counter(suffix)         the adapter's counters() by the Prometheus names the rows ask for
    """

    COUNTERS = {"num_preemptions_total": "num_preemptions", "num_decode_preemptions_total": "num_decode_preemptions"}

    def __init__(self, adapter, vocab: int):
        from specverify.server.client import Support

        self.adapter = adapter
        self.vocab = vocab
        self.model = adapter.serving_model
        self.url = f"engine {getattr(adapter, 'name', type(adapter).__name__)}"
        self.timeout = 60.0
        self.extra: dict = {}
        feats = set(adapter.serving_features)
        features = {"token_id_prompts": True, "token_ids": True, "n": False, "n_seeded_distinct": False,
                    "top_k": False, **{f: f in feats for f in ("logprobs", "seed", "stop", "stream")}}
        why = {k: ("the engine-level protocol has no " + ("n > 1" if k.startswith("n") else k)
                   if k in ("n", "n_seeded_distinct", "top_k") else f"the adapter does not declare serving feature {k!r}")
               for k, v in features.items() if not v}
        self.support = Support(features=features, why=why, ids_via="token_id_strings", prompt_kind="ids")
        self.features = feats

    def probe(self):
        return self.support

    def version(self):
        return getattr(self.adapter, "version", None)

    def _request(self, r: dict) -> ServingRequest:
        from specverify.server.client import Unsupported
        if r.get("n", 1) != 1 or r.get("top_k") is not None or r.get("top_p") is not None:
            raise Unsupported("the engine-level protocol has no n > 1, top_k or top_p")
        stop = tuple(r.get("stop") or ())
        return ServingRequest(tuple(int(t) for t in r["prompt"]), int(r["max_tokens"]), float(r.get("temperature", 1.0)),
                              r.get("seed"), stop, r.get("logprobs"), bool(r.get("stream")))

    def _choice(self, req: ServingRequest, o: ServingOutput):
        from specverify.server.client import Choice, Response
        top = None
        if req.logprobs is not None and o.top is not None:
            top = tuple({f"{TOKEN_ID_PREFIX}{t}": float(lp) for t, lp in entry.items()} for entry in o.top)
        logprobs = None if req.logprobs is None or o.logprobs is None else tuple(float(x) for x in o.logprobs)
        ids = tuple(o.ids)
        if req.stream:                   # what a stream carries: the events' ids and text
            ids = tuple(t for chunk in (o.delta_ids or ()) for t in chunk)
        choice = Choice(0, o.text if o.text is not None else "", ids, logprobs, top, o.finish_reason,
                        deltas=tuple(o.deltas or ()) if req.stream else None)
        usage = None
        if "usage" in self.features and o.completion_tokens is not None:
            usage = {"prompt_tokens": len(req.prompt), "completion_tokens": int(o.completion_tokens),
                     "total_tokens": len(req.prompt) + int(o.completion_tokens)}
            if "prefix_cache" in self.features and o.cached_tokens is not None:
                usage["cached_tokens"] = int(o.cached_tokens)
        return choice, Response([choice], usage)

    def _run(self, reqs: list) -> list:
        outs = checked(self.adapter.complete(tuple(reqs)), reqs, self.url, self.vocab)
        return [self._choice(r, o) for r, o in zip(reqs, outs)]

    def many(self, requests: list, in_flight: int = 16) -> list:
        reqs = [self._request(r) for r in requests]
        if in_flight <= 1:                 # one at a time, as the rows ask of a server
            got = [g for r in reqs for g in self._run([r])]
        else:
            got = self._run(reqs)
        return [resp if r.get("full") else [choice] for r, (choice, resp) in zip(requests, got)]

    def complete(self, prompt, *, max_tokens: int, temperature: float = 1.0, n: int = 1, seed=None, logprobs=None,
                 stop=None, top_p=None, top_k=None, stream: bool = False, extra=None, full: bool = False):
        many = not isinstance(prompt, str) and len(prompt) > 0 and not isinstance(prompt[0], int)
        prompts = list(prompt) if many else [prompt]
        reqs = [self._request(dict(prompt=p, max_tokens=max_tokens, temperature=temperature, n=n, seed=seed,
                                   logprobs=logprobs, stop=stop, top_p=top_p, top_k=top_k, stream=stream))
                for p in prompts]
        got = self._run(reqs)
        if full:
            from specverify.server.client import Response
            usages = [resp.usage for _, resp in got]
            usage = None if any(u is None for u in usages) else {
                k: sum(u[k] for u in usages) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
            return Response([c for c, _ in got], usage)
        return [c for c, _ in got]

    def counter(self, suffix: str):
        key = self.COUNTERS.get(suffix)
        counters = getattr(self.adapter, "counters", None)
        if key is None or not callable(counters):
            return None
        value = counters().get(key)
        return None if value is None else float(value)


class EngineLevelEngine:
    """What the serving rows audit at the engine level: `client` (an EngineLevelClient), `support`,
    `vocab` (the model's V), `decode` (ids -> text) -- the attributes they read of `server.audit.ServerEngine`."""

    def __init__(self, adapter):
        from specverify.server.models import ToyTokenizer, parse_tiny
        codec = getattr(adapter, "serving_codec", None)
        self.vocab = codec.vocab if codec is not None else parse_tiny(adapter.serving_model)[0]
        # ids -> text as the audit knows it exactly: the GGUF's pieces, or the toy's words
        self.decode = codec.encode if codec is not None else ToyTokenizer(self.vocab).decode
        self.client = EngineLevelClient(adapter, self.vocab)
        self.support = self.client.support
        self.word_vocab = None
        self.name = self.client.url
        self.float64_logprobs = bool(getattr(adapter, "serving_float64_logprobs", True))


__all__ = ["FEATURES", "SKIP_ROWS", "ServingRequest", "ServingOutput", "EngineLevelClient", "EngineLevelEngine", "check_features"]
