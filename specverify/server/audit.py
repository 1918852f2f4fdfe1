"""`specverify audit http://HOST:PORT/v1`: the server level of the audit.

`is_url(engine)` tells a server apart from an adapter name. `prepare_server(url, given)` resolves
the settings (the same `specverify.settings` as every audit; `model`, `plain_url` and `timeout` are the
server's), probes the server (and the plain server) once, and returns a `ServerAudit` whose `run()`
runs the server checks (`specverify.checks.server`, the check table's SERVER rows) through
`specverify.audit.run_audit`, so Holm, not-covered and the result's layout are the battery's.
What the server does not support is listed under not covered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specverify.errors import InputError

from .client import ServerClient

URL_SCHEMES = ("http://", "https://")


def is_url(engine) -> bool:
    return isinstance(engine, str) and engine.startswith(URL_SCHEMES)


@dataclass(frozen=True)
class KnownLaw:
    """The exact law of the served model: `model` has `probs(prefix, transform)` over `vocab` tokens
    (`reference.toy.ToyModel`, or a float64 `reference.tabulated.TabulatedModel` of an exported folder);
    `source` says where it came from (for the row and the report)."""
    model: object
    vocab: int
    source: str


def known_law(served: str, law_model: str | None) -> KnownLaw | None:
    """The exact law of the model the server names `served`: from `law_model` when given (a
    `specverify models write` folder, DEST/draft, its manifest, or tiny:V,SEED; anything else is an
    InputError), else from the name itself (tiny:V,SEED, or a path into an exported folder: vLLM and our
    server name a model by the path they loaded); None when neither tells it (server.law not covered)."""
    from specverify.models import export

    from .models import parse_tiny, tiny_models
    for text, given in ((law_model, True), (served, False)):
        if text is None:
            continue
        tiny = parse_tiny(text)
        if tiny is not None:
            return KnownLaw(tiny_models(*tiny)[0], tiny[0], f"toy model {text}")
        found = export.find(text)
        if found is not None:
            return KnownLaw(found.law(), found.vocab, f"{found.name}, float64 from {found.folder}")
        if given:
            raise InputError(f"law_model {text!r}: not tiny:V,SEED nor a `specverify models write` folder "
                             f"(no {export.MANIFEST} at it or its parent)")
    return None


class ServerEngine:
    """The engine under audit at the server level: the spec server's client, the plain server's (or None),
    and the exact law of the served model (`known_law`; None when the audit cannot know it)."""

    capabilities = {"server"}

    def __init__(self, client: ServerClient, plain: ServerClient | None, law_model: str | None = None,
                 word_vocab: int | None = None):
        self.client = client
        self.plain = plain
        self.support = client.probe()
        self.law = known_law(client.model, law_model)
        self.vocab = None if self.law is None else self.law.vocab
        self.word_vocab = word_vocab        # text prompts are words "t0".."t{V-1}" (a tiny Llama folder's)
        text = client.served_text() if self.law is not None else None
        if text is not None and text.vocab == self.vocab:    # a toy served with byte-piece text: ids -> text
            self.decode = text.encode
        self.name = f"server {client.url} ({client.model})"
        self.version = client.version()

    def close(self):
        pass

    def kill(self):
        pass


@dataclass
class ServerAudit:
    engine: ServerEngine
    ctx: object
    settings: object
    checks: list

    @property
    def spec(self) -> str:
        """What reproduces the audit: the server's URL (`specverify audit URL`)."""
        return self.engine.client.url

    def run(self, extra=None, jobs: int = 1):
        """Run the server checks (`jobs` is unused: the client keeps many requests in flight itself)."""
        from specverify.audit import run_audit
        result = run_audit(self.engine, self.ctx, self.checks, extra=extra, stop=self.settings.stop,
                           power_tv=self.settings.power_tv, fail_fast=self.settings.fail_fast)
        support = self.engine.support
        for feature in support.missing():
            result.not_covered[f"server: {feature}"] = support.why.get(feature) or "not supported"
        if self.engine.plain is not None:
            for feature in self.engine.plain.probe().missing():
                result.not_covered[f"plain server: {feature}"] = self.engine.plain.support.why.get(feature) or "not supported"
        return result


def server_checks() -> list:
    from specverify import checks
    return [c.name for c in checks.TABLE if c.kind == checks.SERVER]


def word_probe(word_vocab: int | None) -> str:
    """The text probe of a server whose model's words are "t0".."t{V-1}" (else the client's default)."""
    from .client import PROBE_TEXT
    return PROBE_TEXT if word_vocab is None else " ".join(f"t{i % word_vocab}" for i in (1, 2))


def prepare_server(url: str, given: dict | None = None, *, progress=None, label=None,
                   word_vocab: int | None = None, request_defaults: dict | None = None) -> ServerAudit:
    """`word_vocab`: the served model is a tiny Llama folder (`models.tiny`) whose tokenizer knows only the
    words "t0".."t{V-1}": text prompts (probe and checks) are made of them. `request_defaults`: body
    fields every request carries unless it sets them (a launcher's neutral sampler)."""
    from specverify import settings as settings_mod
    from specverify.audit import BATTERY
    from specverify.battery.base import Context

    given = dict(given or {})
    s = settings_mod.resolve(given, None, BATTERY, label)
    checks = list(s.checks) if s.checks is not None else server_checks()
    wrong = [c for c in checks if c not in server_checks()]
    if wrong:
        raise InputError(f"check(s) {', '.join(wrong)} do not apply to a server URL; the server level runs "
                         f"{', '.join(server_checks())}")
    if s.plain_url is not None and not is_url(s.plain_url):
        raise InputError(f"plain_url {s.plain_url!r}: must be an http:// or https:// URL")
    client = ServerClient(url, s.model, s.timeout, probe_text=word_probe(word_vocab), defaults=request_defaults)
    client.probe()                                  # names the model when the server serves only one
    plain = None
    if s.plain_url is not None:
        # the model the user named, else the plain server's only one: a launcher may serve the two from
        # copies of one folder under different names (transformers serve names a model by its path)
        plain = ServerClient(s.plain_url, s.model, s.timeout, probe_text=word_probe(word_vocab),
                             defaults=request_defaults)
        plain.probe()
    engine = ServerEngine(client, plain, s.law_model, word_vocab)
    ctx = Context(**settings_mod.context_values(s), progress=progress)
    return ServerAudit(engine, replace(ctx), s, checks)
