"""Our engine at the serving path's engine level (capability "serving", `adapters/serving_level.py`):
the reference server's engine and batcher (`server.app.engine_factory`, `server.batching.Batcher`), in
process, without HTTP -- `specverify audit specverify-serving`.

    model     tiny:4,7 (the toy target, a 2-layer-like table model; its words " t0".." t3")
    spec      a draft model, kappa 3 (`specverify serve --spec draft`)
    KV        KV_BUDGET positions (`--kv-budget`): a wave of the preemption row's 6 requests fits at
              first and is preempted while decoding as the requests grow; a lone request always fits

Each `complete` call is one batch: its requests become the batcher's jobs, admitted together and run to
the end on this thread (`Batcher.drain`); the engine lives as long as the adapter (a server's lifetime),
so the seeds row's warm-up traffic and the prefix cache carry over between calls. Logprobs are the
server's (raw: log-softmax of the model's row), text the toy tokenizer's, stream deltas the server's
(`batching.stream_delta` over each step's event). `variant` serves one of the broken engines of
`server/variants.py` instead: the zoo's mutants 45-51, 54 and 55 (`zoo/serving.py`).
"""

from __future__ import annotations

from .serving_level import FEATURES, ServingOutput

MODEL = "tiny:4,7"
SPEC = "draft"
KAPPA = 3
KV_BUDGET = 96          # 6 blocks of 16 (docs/serving-path.md, "Preemption in our server")


class SpecverifyServing:
    """Our engine, exact (or `variant`), at the serving engine level."""

    capabilities = {"serving"}
    serving_model = MODEL
    serving_features = FEATURES
    variant = "exact"

    text = "words"          # the toy's text: words " t{i}", or "multibyte" byte pieces (`server.models.TOY_TEXTS`)

    def __init__(self, variant: str | None = None, text: str | None = None):
        from specverify import __version__
        from specverify.server.app import engine_factory
        from specverify.server.batching import Batcher
        from specverify.server.config import ServeConfig
        from specverify.server.models import load

        self.variant = variant or self.variant
        self.name = "specverify-serving" if self.variant == "exact" else f"specverify-serving[{self.variant}]"
        self.version = __version__
        self.text = text or self.text
        self.model = load(MODEL, toy_text=self.text)
        if self.text != "words":            # the rows detokenise through the same byte pieces
            self.serving_codec = self.model.tokenizer.codec
            self.name += f"[text {self.text}]"
        config = ServeConfig(model=MODEL, spec=SPEC, kappa=KAPPA, variant=self.variant, kv_budget=KV_BUDGET,
                             toy_text=self.text)
        self.config = config
        self.batcher = Batcher(engine_factory(self.model, config))      # its thread is never started

    def complete(self, requests) -> list:
        from specverify.engine.engine import SamplingParams
        from specverify.server.batching import Job, stream_delta
        from specverify.server.models import check_context

        tok = self.model.tokenizer

        def decode(ids):
            return tok.decode(ids, skip_special=True)

        hold = getattr(self.batcher.engine, "stream_holds_unfinished", True)     # variant 55 does not
        states, jobs = [], []
        for r in requests:
            check_context(self.model, len(r.prompt), r.max_tokens, self.config.kappa)
            params = SamplingParams(temperature=float(r.temperature), seed=r.seed, max_tokens=int(r.max_tokens),
                                    stop=tuple(r.stop))
            st = {"ids": [], "entries": [], "deltas": [], "delta_ids": [], "sent": "", "done": None}

            def deliver(ev, st=st, r=r):
                if ev[0] == "tokens":
                    st["ids"] += ev[1]
                    st["entries"] += ev[2]
                    st["delta_ids"].append(tuple(ev[1]))
                    delta = stream_delta(decode, st["ids"], st["sent"], tuple(r.stop), hold)
                    st["sent"] += delta
                    st["deltas"].append(delta)
                elif ev[0] == "done":
                    st["done"] = ev
                    final = ev[2] or ""
                    st["deltas"].append(final[len(st["sent"]):])
                else:
                    st["done"] = ev
            states.append(st)
            jobs.append(Job([self.model.vocab_size] + [int(t) for t in r.prompt], params, r.logprobs, deliver))
        self.batcher.drain(jobs)
        out = []
        for r, st in zip(requests, states):
            ev = st["done"]
            if ev is None or ev[0] != "done":
                from specverify.errors import AdapterError
                raise AdapterError(f"{self.name}: a request ended without an answer: {ev!r}")
            _, finish, text, charged, cached = ev
            lp = top = None
            if r.logprobs is not None:
                lp = tuple(e[0] for e in st["entries"])
                top = tuple(dict(e[1]) for e in st["entries"])
            out.append(ServingOutput(tuple(st["ids"]), finish, text, lp, top, int(charged), max(0, int(cached) - 1),
                                     tuple(st["deltas"]) if r.stream else None,
                                     tuple(st["delta_ids"]) if r.stream else None))
        return out

    def counters(self) -> dict:
        now = dict((name, value) for name, value, _ in self.batcher.counters())
        return {"num_preemptions": int(now["num_preemptions_total"]),
                "num_decode_preemptions": int(now["num_decode_preemptions_total"])}


def make() -> SpecverifyServing:
    return SpecverifyServing()
