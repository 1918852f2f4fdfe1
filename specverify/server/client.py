"""The audit's client for any OpenAI-compatible completions server (the maintained `openai` package).

`ServerClient(url, model, timeout)` sends completions and returns `Choice`s, whatever the server puts
in them, checked: token ids (the choice's `token_ids`, vLLM's `return_token_ids`, or logprobs' tokens
as "token_id:N" with `return_tokens_as_token_ids`), text, the chosen tokens' logprobs and their top
entries, the finish reason. `probe()` finds out once what the server supports (`Support`): token-id
prompts, returned ids, logprobs, seed (two seeded requests agree), n, n with a seed giving distinct
choices, stop, stream, top_k; the checks skip what is missing and say so.

`many(requests, in_flight)` keeps up to `in_flight` requests open at once on daemon threads, and
gives up after `timeout` seconds per request wave (`--timeout`): a server that never answers, or
trickles a response forever, cannot hang the audit (nor its exit: the threads are daemons).

Every failure -- unreachable URL, HTTP 4xx/5xx, a body that is not a completions response, a stream
that breaks, no answer in time -- is one `ServerError` line naming the URL (exit 2 on the CLI).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
import queue
import threading
import time
from dataclasses import dataclass, field

from specverify.errors import AdapterError

API_KEY = "specverify"            # servers without authentication ignore it; the openai client needs one
TOKEN_ID_PREFIX = "token_id:"
PROBE_PROMPT = (1, 2)             # token ids every vocabulary of >= 3 tokens has
PROBE_TEXT = "Hello"
PROBE_TOKENS = 8
SEED_DIFFERS = "two requests with the same seed differ"     # the probe's finding for a seed taken, not honoured
GRACE_S = 2.0                     # beyond --timeout, before a request that is still receiving is given up


FEWER_CHOICES = "choices, got"       # the words of the error a wrong number of choices raises


# httpx's errors for a connection closed by the server while a request was on it (not a refused one)
STALE_CONNECTION = ("ReadError", "RemoteProtocolError", "WriteError")


class _StaleConnection(Exception):
    """`_call_once`: the request met a connection the server had closed; `_call` sends it once more."""


SERVER_FAULT = "HTTP 5"      # a 5xx status in a ServerError's text (`_call`)


class ServerError(AdapterError):
    """The server could not be audited: one line naming the URL and what went wrong."""


class Unsupported(Exception):
    """The server refused a request with a 4xx (a feature it does not offer)."""


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    ids: tuple | None             # token ids, when the server returns them
    logprobs: tuple | None        # the chosen tokens' logprobs (floats as sent)
    top: tuple | None             # per token {token: logprob} of its top entries
    finish_reason: str | None
    offsets: tuple | None = None  # per token its text offset (logprobs' text_offset), when sent
    deltas: tuple | None = None   # a streamed choice: the text of each chunk, in order
    tokens: tuple | None = None   # logprobs' "tokens" (each token's text as the server names it), when sent


@dataclass(frozen=True)
class Response:
    """A whole completions response: its choices and its usage block (None if it sent none)."""
    choices: list
    usage: dict | None


@dataclass
class Support:
    """What a server offers, from `ServerClient.probe` ({feature: True/False}, `why` for each False)."""
    features: dict = field(default_factory=dict)
    why: dict = field(default_factory=dict)
    ids_via: str | None = None    # "token_ids" | "token_id_strings" | "pieces" (the model's text codec) | None
    prompt_kind: str = "ids"      # "ids" or "text"
    codec: str | None = None      # the text codec ids travel through, when the server takes text only

    def __getitem__(self, name):
        return bool(self.features.get(name))

    def missing(self) -> list:
        return [k for k, v in self.features.items() if not v]

    def to_dict(self) -> dict:
        return {"features": dict(self.features), "why": dict(self.why), "ids_via": self.ids_via,
                "prompt_kind": self.prompt_kind, "codec": self.codec}


def _fail(url: str, what: str) -> ServerError:
    return ServerError(f"server {url}: {what}")


def parse_choices(url: str, body) -> list:
    """The `Choice`s of a completions response body (a dict), checked; ServerError if it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
        raise _fail(url, f"not an OpenAI completions response (no choices list): {str(body)[:120]!r}")
    out = []
    for c in body["choices"]:
        if not isinstance(c, dict) or not isinstance(c.get("text", ""), str) or not isinstance(c.get("index", 0), int):
            raise _fail(url, f"not an OpenAI completions choice: {str(c)[:120]!r}")
        ids = c.get("token_ids")
        lp = c.get("logprobs")
        logprobs = top = offsets = names = None
        if lp is not None:
            if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
                raise _fail(url, f"malformed logprobs in a choice: {str(lp)[:120]!r}")
            logprobs = tuple(lp["token_logprobs"])
            if not all(isinstance(x, (int, float)) for x in logprobs):
                raise _fail(url, "logprobs that are not numbers")
            top = tuple(lp.get("top_logprobs") or ()) or None
            off = lp.get("text_offset")
            if isinstance(off, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in off):
                offsets = tuple(off)
            tokens = lp.get("tokens") or []
            if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
                names = tuple(tokens)
            if ids is None and tokens and all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
                ids = [int(t[len(TOKEN_ID_PREFIX):]) for t in tokens]
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise _fail(url, f"token_ids that are not a list of integers: {str(ids)[:120]!r}")
            ids = tuple(ids)
        out.append(Choice(int(c.get("index", 0)), c.get("text", ""), ids, logprobs, top, c.get("finish_reason"),
                          offsets, tokens=names))
    return sorted(out, key=lambda c: c.index)


class ServerClient:
    """One OpenAI-compatible server. `timeout`: seconds one request (or one wave in `many`) may take."""

    def __init__(self, url: str, model: str | None = None, timeout: float = 120.0, probe_text: str = PROBE_TEXT,
                 defaults: dict | None = None):
        try:
            import openai
        except ImportError:
            from specverify.errors import InputError
            raise InputError("auditing a server needs the openai client: pip install 'specverify[server]'") from None

        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.openai = openai
        self.client = openai.OpenAI(base_url=self.url, api_key=API_KEY, timeout=self.timeout, max_retries=0)
        self.model = model
        self.support: Support | None = None
        self.extra: dict = {}          # the extra body fields that make the server return token ids
        self.probe_text = probe_text   # the text prompt tried when token-id prompts are refused
        # a text codec (`models.pieces.PieceCodec`: the GGUF of a `specverify models write` folder) found from
        # the served model's name at probe time: a server that takes text only then gets id prompts as the
        # codec's text, and its answers' ids are read back through it (`_with_ids`)
        self.codec = None
        self.codec_prompts = False
        # body fields every request carries unless it sets them (a launcher's neutral sampler: engines.base)
        self.defaults = dict(defaults or {})

    # -- one request ---------------------------------------------------------------------------------
    def _call(self, fn):
        """`_call_once(fn)`, sent once more if the connection it went out on was closed under it: a server
        that fails a request may close its keep-alive connection (uvicorn after an unhandled exception),
        and the next request on that pooled connection reads a reset. Only such a reset is resent, once;
        a refused connection, a timeout or a second reset is the ServerError it always was."""
        try:
            return self._call_once(fn)
        except _StaleConnection:
            return self._call_once(fn, resend=False)

    def _call_once(self, fn, resend: bool = True):
        """fn() on a daemon thread, given --timeout (+ GRACE_S) to finish: a response that trickles
        forever defeats the client's per-read timeouts, not this one. Every failure -> ServerError,
        a 4xx a feature may explain -> Unsupported."""
        box: dict = {}

        def target():
            try:
                box["value"] = fn()
            except BaseException as exc:           # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True, name="specverify-request")
        thread.start()
        thread.join(self.timeout + GRACE_S)
        if thread.is_alive():
            raise _fail(self.url, f"no complete answer within --timeout {self.timeout:g} s")
        if "error" not in box:
            return box["value"]
        o = self.openai
        try:
            raise box["error"]
        except o.APITimeoutError:
            raise _fail(self.url, f"no response within --timeout {self.timeout:g} s") from None
        except o.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            if resend and type(cause).__name__ in STALE_CONNECTION:
                raise _StaleConnection from None
            raise _fail(self.url, f"cannot connect ({type(cause).__name__}: {str(cause)[:120]})") from None
        except o.APIStatusError as exc:
            if 400 <= exc.status_code < 500 and exc.status_code not in (401, 403, 404):
                raise Unsupported(f"HTTP {exc.status_code}: {_message(exc)}") from None
            raise _fail(self.url, f"HTTP {exc.status_code}: {_message(exc)}") from None
        except (o.APIError, json.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
            raise _fail(self.url, f"not an OpenAI completions response ({type(exc).__name__}: {str(exc)[:120]})") from None

    def models(self) -> list:
        page = self._call(lambda: self.client.models.list())
        ids = [getattr(m, "id", None) for m in getattr(page, "data", None) or []]
        if not ids or not all(isinstance(i, str) for i in ids):
            raise _fail(self.url, "GET /models lists no models (not an OpenAI-compatible server?)")
        return ids

    def served_text(self):
        """The toy text codec our server names for the model in /v1/models ("specverify_text": a
        `models.pieces.BytePieceCodec`), or None (any other server, or a toy's words)."""
        from specverify.models.pieces import from_served
        page = self._call(lambda: self.client.models.list())
        for m in getattr(page, "data", None) or []:
            if getattr(m, "id", None) == self.model:
                extra = getattr(m, "model_extra", None) or {}
                return from_served(extra.get("specverify_text", getattr(m, "specverify_text", None)))
        return None

    def version(self) -> str | None:
        """The server's /version (vLLM, our server), if it has one."""
        import httpx
        root = self.url[:-3] if self.url.endswith("/v1") else self.url
        try:
            r = httpx.get(root + "/version", timeout=min(self.timeout, 10.0))
            if r.status_code == 200:
                v = r.json()
                return json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)
        except (httpx.HTTPError, ValueError):
            return None
        return None

    def counter(self, suffix: str) -> float | None:
        """The sum of the Prometheus samples at the server root's GET /metrics whose metric name ends with
        `suffix` (e.g. "num_preemptions_total": vLLM's vllm:num_preemptions_total, our server's
        specverify_num_preemptions_total); None when there is no such endpoint or sample."""
        import httpx
        root = self.url[:-3] if self.url.endswith("/v1") else self.url
        try:
            r = httpx.get(root + "/metrics", timeout=min(self.timeout, 10.0))
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        total, seen = 0.0, False
        for line in r.text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            head, _, rest = line.partition("{") if "{" in line.split()[0] else (line.split()[0], "", "")
            value = (rest.rpartition("}")[2] if rest else line[len(head):]).split()
            if head.endswith(suffix) and value:
                try:
                    total += float(value[0])
                except ValueError:
                    continue
                seen = True
        return total if seen else None

    def complete(self, prompt, *, max_tokens: int, temperature: float = 1.0, n: int = 1, seed: int | None = None,
                 logprobs: int | None = None, stop=None, top_p: float | None = None, top_k: int | None = None,
                 stream: bool = False, extra: dict | None = None, full: bool = False):
        """One completion request; its choices (`Choice`), in index order. Unsupported on a 4xx.
        `full`: a `Response` (choices and usage; a stream then asks for its usage chunk)."""
        if self.codec_prompts and not isinstance(prompt, str):
            prompt = self.codec.encode(prompt)
        kw = dict(model=self.model, prompt=list(prompt) if not isinstance(prompt, str) else prompt,
                  max_tokens=max_tokens, temperature=temperature)
        for name, value in (("n", n if n != 1 else None), ("seed", seed), ("logprobs", logprobs), ("stop", stop),
                            ("top_p", top_p)):
            if value is not None:
                kw[name] = value
        body = dict(self.extra if extra is None else extra)
        if top_k is not None:
            body["top_k"] = top_k
        body = {**{k: v for k, v in self.defaults.items() if k not in kw}, **body}
        if body:
            kw["extra_body"] = body
        if stream:
            if full:
                kw["stream_options"] = {"include_usage": True}
            got = self._stream(kw)
            got = Response(self._with_ids(got.choices), got.usage)
            return got if full else got.choices
        raw = self._call(lambda: self.client.completions.with_raw_response.create(**kw))
        try:
            data = raw.http_response.json()
        except ValueError:
            raise _fail(self.url, f"a completions response that is not JSON: {raw.http_response.text[:120]!r}") from None
        choices = self._with_ids(parse_choices(self.url, data))
        want = n * (1 if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int) else len(prompt))
        if len(choices) != want:
            raise _fail(self.url, f"asked for {want} {FEWER_CHOICES} {len(choices)}")
        return Response(choices, _usage(data.get("usage"))) if full else choices

    def _with_ids(self, choices: list) -> list:
        """With a codec (and a server that returns no ids): each choice's ids read through it, from the
        logprobs' tokens where sent (the tokens the server says it returned), else from the text."""
        if self.codec is None or self.support is None or self.support.ids_via != "pieces":
            return choices
        out = []
        for c in choices:
            if c.ids is not None:
                out.append(c)
                continue
            try:
                named = c.tokens is not None and c.logprobs is not None and len(c.tokens) == len(c.logprobs)
                ids = self.codec.decode("".join(c.tokens) if named else c.text)
            except ValueError as exc:
                raise _fail(self.url, f"answered text the model's vocabulary cannot hold: {exc}") from None
            out.append(replace(c, ids=ids))
        return out

    def _stream(self, kw) -> Response:
        def run():
            acc: dict = {}
            use = None
            for chunk in self.client.completions.create(stream=True, **kw):
                data = chunk.model_dump() if hasattr(chunk, "model_dump") else chunk
                if isinstance(data, dict) and data.get("usage"):
                    use = _usage(data["usage"])
                for c in parse_choices(self.url, data if isinstance(data, dict) else {}):
                    a = acc.setdefault(c.index, {"text": "", "ids": [], "lp": [], "top": [], "finish": None,
                                                 "has_ids": False, "has_lp": False, "deltas": [], "tokens": []})
                    a["text"] += c.text
                    a["deltas"].append(c.text)
                    if c.ids is not None:
                        a["ids"] += c.ids
                        a["has_ids"] = True
                    if c.logprobs is not None:
                        a["lp"] += c.logprobs
                        a["top"] += list(c.top or ())
                        a["tokens"] += list(c.tokens or ())
                        a["has_lp"] = True
                    a["finish"] = c.finish_reason or a["finish"]
            return Response([Choice(i, a["text"], tuple(a["ids"]) if a["has_ids"] else None,
                                    tuple(a["lp"]) if a["has_lp"] else None, tuple(a["top"]) or None, a["finish"],
                                    deltas=tuple(a["deltas"]),
                                    tokens=tuple(a["tokens"]) if a["has_lp"] else None)
                             for i, a in sorted(acc.items())], use)
        return self._call(run)

    # -- many requests -------------------------------------------------------------------------------
    def many(self, requests: list, in_flight: int = 16) -> list:
        """`complete(**r)` for every r in `requests`, up to `in_flight` open at once; results in order.
        A request not answered within --timeout (counted from when it was sent) ends the audit."""
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i, r in enumerate(requests):
            todo.put((i, r))
        done: queue.SimpleQueue = queue.SimpleQueue()
        started: dict = {}

        def work():
            while True:
                try:
                    i, r = todo.get_nowait()
                except queue.Empty:
                    return
                started[i] = time.monotonic()
                try:
                    done.put((i, self.complete(**r), None))
                except Unsupported as exc:         # after the probe, a refusal is the server's failure
                    done.put((i, None, _fail(self.url, f"refused a request it was probed to support: {exc}")))
                except BaseException as exc:       # noqa: BLE001 - handed to the caller's thread
                    done.put((i, None, exc))

        threads = [threading.Thread(target=work, daemon=True, name="specverify-client")
                   for _ in range(max(1, min(in_flight, len(requests))))]
        for t in threads:
            t.start()
        out: list = [None] * len(requests)
        for _ in range(len(requests)):
            while True:
                try:
                    i, res, exc = done.get(timeout=0.2)
                    break
                except queue.Empty:
                    now = time.monotonic()
                    if any(now - s > self.timeout + 5.0 for j, s in list(started.items()) if out[j] is None):
                        raise _fail(self.url, f"a request got no complete answer within --timeout {self.timeout:g} s")
            if exc is not None:
                raise exc
            out[i] = res
        return out

    # -- what the server supports --------------------------------------------------------------------
    def probe(self) -> Support:
        """Find out what the server supports (once); ServerError when it cannot serve even a plain request."""
        if self.support is not None:
            return self.support
        s = Support()
        models = self.models()
        if self.model is None:
            if len(models) != 1:
                raise _fail(self.url, f"serves {len(models)} models ({', '.join(models[:5])}); name one with --model")
            self.model = models[0]
        elif self.model not in models:
            raise _fail(self.url, f"does not serve model {self.model!r}; it serves {', '.join(models[:5])}")
        if self.codec is None:
            from specverify.models.export import served_codec
            self.codec = served_codec(self.model)
        prompt = self._probe_prompt(s)
        if s.ids_via != "pieces":
            self._probe_ids(s, prompt)

        def feature(name, fn, why_not):
            try:
                ok = fn()
            except Unsupported as exc:
                s.features[name], s.why[name] = False, str(exc)
                return
            except ServerError as exc:
                if name == "n" and FEWER_CHOICES in str(exc):
                    # mlx_lm.server ignores n and answers one choice: while probing that means "no n"
                    s.features[name], s.why[name] = False, str(exc).split(": ", 1)[-1]
                    return
                if SERVER_FAULT not in str(exc):
                    raise
                # the plain request worked, the same request with this one option made the server fail
                # (transformers serve: stop strings on a tokenizer without an unknown token): the feature
                # is not offered, and the rows needing it are SKIP with this reason under not covered
                s.features[name] = False
                s.why[name] = f"a request with {name} failed on the server: {str(exc).split(': ', 1)[-1]}"
                return
            s.features[name] = bool(ok)
            if not ok:
                s.why[name] = why_not

        base = dict(max_tokens=PROBE_TOKENS, temperature=0.0)
        feature("logprobs", lambda: _has_logprobs(self.complete(prompt, logprobs=2, **base)),
                "no logprobs in the choices")
        feature("seed", lambda: _same(self.complete(prompt, max_tokens=PROBE_TOKENS, seed=1234),
                                      self.complete(prompt, max_tokens=PROBE_TOKENS, seed=1234)),
                SEED_DIFFERS)
        # n at temperature 1: a server may refuse n > 1 when greedy (vLLM: "n must be 1 when using greedy sampling")
        feature("n", lambda: len(self.complete(prompt, n=2, max_tokens=PROBE_TOKENS, temperature=1.0)) == 2,
                "n=2 did not give 2 choices")
        feature("n_seeded_distinct", lambda: s["n"] and len({_key(c) for c in self.complete(
            prompt, max_tokens=PROBE_TOKENS, n=8, seed=4321)}) > 1, "n choices of one seeded request are identical")
        feature("stop", lambda: self.complete(prompt, stop=["\n\n"], **base) is not None, "")
        feature("top_k", lambda: self.complete(prompt, top_k=1, **base) is not None, "")
        feature("stream", lambda: [_key(c) for c in self.complete(prompt, stream=True, **base)] ==
                [_key(c) for c in self.complete(prompt, **base)], "a streamed greedy answer differs from the plain one")
        self.support = s
        return s

    def _probe_prompt(self, s: Support):
        try:
            self.complete(PROBE_PROMPT, max_tokens=1, temperature=0.0, extra={})
            s.features["token_id_prompts"] = True
            return PROBE_PROMPT
        except Unsupported as exc:
            s.features["token_id_prompts"], s.why["token_id_prompts"] = False, str(exc)
        except ServerError as exc:
            # mlx_lm.server answers 404 for a refused request (any exception in generation), llama-cpp-python's
            # server 500 for a prompt that fails validation: the route exists (GET /v1/models answered), so an
            # HTTP error here refuses token ids; the text probe below decides the rest (and fails the same way
            # on a server that answers nothing)
            if "HTTP " not in str(exc):
                raise
            s.features["token_id_prompts"], s.why["token_id_prompts"] = False, str(exc).split(": ", 1)[-1]
        s.prompt_kind = "text"
        text = self.probe_text if self.codec is None else self.codec.encode(PROBE_PROMPT)
        try:
            self.complete(text, max_tokens=1, temperature=0.0, extra={})
        except Unsupported as exc:
            raise _fail(self.url, f"refuses both a token-id and a text prompt ({exc})") from None
        if self.codec is None:
            return self.probe_text
        # ids travel as the codec's text (one character a token, exact both ways: models.pieces)
        s.prompt_kind, s.ids_via, s.codec = "ids", "pieces", "".join(self.codec.pieces)
        s.features["token_id_prompts"], s.features["token_ids"] = True, True
        s.why["token_id_prompts"] = f"sent as the GGUF's one-character pieces ({s.why.get('token_id_prompts')})"
        self.codec_prompts = True
        self.support = s                 # _with_ids reads ids through the codec from here on
        return PROBE_PROMPT

    def _probe_ids(self, s: Support, prompt) -> None:
        for via, extra, lp in (("token_ids", {"return_token_ids": True}, None),
                               ("token_id_strings", {"return_tokens_as_token_ids": True}, 0)):
            try:
                got = self.complete(prompt, max_tokens=PROBE_TOKENS, temperature=0.0, logprobs=lp, extra=extra)
            except Unsupported:
                continue
            if all(c.ids is not None for c in got):
                s.ids_via, self.extra = via, extra
                s.features["token_ids"] = True
                return
        s.features["token_ids"], s.why["token_ids"] = False, "returns no token ids (compared as text)"


def _usage(block) -> dict | None:
    """A usage block's three counts as ints (and "cached_tokens" when the server reports
    prompt_tokens_details.cached_tokens), or None when the server sent none (or not numbers)."""
    if not isinstance(block, dict):
        return None
    out = {k: block.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out.values()):
        return None
    details = block.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool):
        out["cached_tokens"] = cached          # prompt tokens the server's prefix cache served
    return out


def _message(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, str) and body:              # the openai client unwraps {"error": "text"} (mlx_lm.server's)
        return body[:200]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
        if isinstance(err, str) and err:            # {"error": "text"} (mlx_lm.server)
            return err[:200]
    return str(getattr(exc, "message", exc))[:200]


def _key(c: Choice):
    return c.ids if c.ids is not None else c.text


def _same(a: list, b: list) -> bool:
    return [_key(c) for c in a] == [_key(c) for c in b]


def _has_logprobs(choices: list) -> bool:
    return all(c.logprobs is not None and all(math.isfinite(x) or x == -math.inf for x in c.logprobs)
               for c in choices)
