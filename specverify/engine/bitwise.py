"""Our engine on the protocol's bitwise level: one `GreedyRequest` decoded greedily by the engine.

`decode_greedy(model, request)` runs the request's prompts through `api.generate` with the request's
speculation (n-gram prompt lookup) and layout, and records, for every emitted token, the target
logits row it was decided from (as rows or as `row_digest` digests). The comparison with plain
decode is the harness's (`specverify.checks.bitwise`), the same for every engine.

Layouts: batch_size b = at most b requests per launch; ragged = requests admitted one per step (so
launches mix prefills, plain decodes and verifies of every length, and later requests are admitted
as earlier ones finish), request i capped at i % (kappa + 1) drafts a step.

The prompt set (`load_prompts`) and its encoding live here too: the bench and the lab use them.
"""

from __future__ import annotations

import json
from importlib import resources

from specverify.adapters.bitwise_level import DIGESTS, NO_SPEC, GreedyRequest, GreedyResult, row_digest
from specverify.errors import InputError

from .api import RunOptions, SpecOptions, generate
from .engine import SamplingParams

PROPOSERS = ("ngram",)          # the speculation methods offered on the bitwise level


def load_prompts(n: int | None = None, *, full: bool = False, categories=None) -> list:
    """The repo's prompt set as (category, chat, text) tuples; `full` adds the style variants."""
    data = json.loads(resources.files("specverify.engine").joinpath("prompts.json").read_text())
    base = [p for p in data["prompts"] if categories is None or p["category"] in categories]
    prefixes = data["style_prefixes"] if full else [""]
    out = [(p["category"], p["chat"], pre + p["text"] if p["chat"] else p["text"])
           for pre in prefixes for p in base]
    if not full:
        out = out[:len(base)]
    # drop duplicates (non-chat prompts get no prefix)
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq if n is None else uniq[:n]


def encode_prompts(tokenizer, prompts) -> list:
    return [tokenizer.encode_chat([{"role": "user", "content": text}]) if chat else tokenizer.encode(text)
            for _, chat, text in prompts]


def decode_greedy(model, request: GreedyRequest, *, backend: str) -> GreedyResult:
    """`request` decoded greedily by our engine on `model` rebound to op backend `backend`."""
    spec, layout = request.spec, request.layout
    if spec.proposer != NO_SPEC and spec.proposer not in PROPOSERS:
        raise InputError(f"unknown proposer {spec.proposer!r}; this engine offers {', '.join(PROPOSERS)}")
    kappa = 0 if spec.proposer == NO_SPEC else int(spec.kappa)
    n = len(request.prompts)
    caps = [i % (kappa + 1) if layout.ragged else None for i in range(n)]
    params = [SamplingParams(temperature=0.0, max_tokens=request.max_new_tokens, ignore_eos=True, kappa=c)
              for c in caps]
    want_rows = request.logits != DIGESTS
    rows: list = [[None] * request.max_new_tokens for _ in range(n)]

    def record(rid, j, row):
        rows[rid][j] = row.detach().clone().numpy() if want_rows else row_digest(row.detach().numpy())

    out = generate(model, None, [list(p) for p in request.prompts], sampling=params,
                   spec=SpecOptions(spec.proposer if kappa else "none", kappa=kappa),
                   run=RunOptions(backend=backend, max_batch_size=layout.batch_size, record_logits=record,
                                  admit_per_step=1 if layout.ragged else None))
    info = {"mean_acceptance_length": float(out.metrics.mean_acceptance_length)} if kappa else {}
    tokens = tuple(tuple(int(t) for t in ts) for ts in out.tokens)
    if want_rows:
        import numpy as np
        return GreedyResult(tokens, logits=tuple(np.stack(r) for r in rows), info=info)
    return GreedyResult(tokens, digests=tuple(tuple(r) for r in rows), info=info)


def backend_available(name: str) -> bool:
    from specverify.kernels.backend import backend_names
    return name in backend_names()
