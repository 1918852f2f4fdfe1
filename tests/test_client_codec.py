"""The server client's text codec: a server that takes text only (llama-cpp-python's) serving a GGUF whose
text is one character a token gets id prompts as that text, and its answers' ids are read back through
the pieces; the launcher's request defaults fill only what a request leaves unset.

The server is an httpx MockTransport that answers like llama-cpp-python's completions endpoint: HTTP 500
on a token-id prompt, text + logprobs tokens otherwise. Each test can fail: a prompt sent as ids or as
the wrong text, ids read from the wrong field, a character outside the vocabulary accepted, a default
overriding a row's own value.
"""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("openai", reason="pip install 'specverify[server]'")

from specverify.models.pieces import codec as make_codec          # noqa: E402
from specverify.server.client import ServerClient, ServerError    # noqa: E402

MODEL = "/models/tiny/target/model-f32.gguf"


class FakeLlamaCppServer:
    """Answers each completion with the prompt's characters reversed (so the answer depends on the text
    sent), or with `answer` when set; records every request body."""

    def __init__(self, answer=None, tokens=None):
        self.bodies = []
        self.answer, self.tokens = answer, tokens

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        body = json.loads(request.content)
        self.bodies.append(body)
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            return httpx.Response(500, json={"error": {"message": "Input should be a valid string"}})
        text = self.answer if self.answer is not None else prompt[::-1][:body.get("max_tokens", 16)]
        choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        if body.get("logprobs") is not None:
            tokens = self.tokens if self.tokens is not None else list(text)
            choice["logprobs"] = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens),
                                  "top_logprobs": [{t: -0.5} for t in tokens], "text_offset": list(range(len(tokens)))}
        return httpx.Response(200, json={"id": "x", "object": "text_completion", "created": 0, "model": MODEL,
                                         "choices": [choice]})


def _client(server, defaults=None):
    client = ServerClient("http://127.0.0.1:9/v1", timeout=10, defaults=defaults)
    client.client = client.openai.OpenAI(base_url=client.url, api_key="x", max_retries=0,
                                         http_client=httpx.Client(transport=httpx.MockTransport(server)))
    client.codec = make_codec(4)
    return client


def test_id_prompts_travel_as_the_pieces_and_ids_come_back_through_them():
    server = FakeLlamaCppServer()
    client = _client(server)
    s = client.probe()
    assert s["token_id_prompts"] and s["token_ids"] and s.ids_via == "pieces" and s.prompt_kind == "ids"
    [c] = client.complete((1, 0, 3), max_tokens=3, temperature=0.0)
    assert server.bodies[-1]["prompt"] == "bad"           # ids 1 0 3 as their pieces
    assert c.text == "dab" and c.ids == (3, 0, 1)         # read back through the pieces
    [c] = client.complete((2, 2, 1), max_tokens=3, temperature=0.0, logprobs=1)
    assert c.ids == (1, 2, 2)


def test_ids_follow_the_logprobs_tokens_where_sent_and_unknown_characters_are_an_error():
    # the text was cut (a stop string) but the server names four tokens: the ids are the tokens it returned
    client = _client(FakeLlamaCppServer(answer="ab", tokens=["a", "b", "c", "d"]))
    client.probe()
    [c] = client.complete((0,), max_tokens=4, temperature=0.0, logprobs=1)
    assert c.text == "ab" and c.ids == (0, 1, 2, 3)
    [c] = client.complete((0,), max_tokens=4, temperature=0.0)   # no logprobs: the text is all there is
    assert c.ids == (0, 1)
    bad = _client(FakeLlamaCppServer(answer="az"))
    with pytest.raises(ServerError, match="cannot hold"):
        bad.probe()


def test_without_a_codec_a_text_only_server_returns_no_ids():
    server = FakeLlamaCppServer()
    client = _client(server)
    client.codec = None
    client.probe_text = "ab"
    from specverify.models import export
    assert export.served_codec(MODEL) is None              # not an export: nothing found by name
    s = client.probe()
    assert not s["token_id_prompts"] and not s["token_ids"] and s.prompt_kind == "text"


def test_request_defaults_fill_only_what_the_request_leaves_unset():
    server = FakeLlamaCppServer()
    client = _client(server, defaults={"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0})
    client.probe()
    client.complete((1,), max_tokens=2, temperature=1.0)
    body = server.bodies[-1]
    assert (body["top_p"], body["top_k"], body["min_p"], body["repeat_penalty"]) == (1.0, 0, 0.0, 1.0)
    client.complete((1,), max_tokens=2, temperature=0.8, top_p=0.9, top_k=2)
    body = server.bodies[-1]
    assert (body["top_p"], body["top_k"], body["min_p"]) == (0.9, 2, 0.0)


class FailsWithStop(FakeLlamaCppServer):
    """A 500 on any request carrying `stop` (transformers serve on a tokenizer without an unknown token)."""

    def __call__(self, request):
        if request.url.path.endswith("/completions") and "stop" in json.loads(request.content):
            return httpx.Response(500, json={"error": {"message": "Missing [UNK] token"}})
        return super().__call__(request)


class FailsAlways(FakeLlamaCppServer):
    def __call__(self, request):
        if request.url.path.endswith("/completions"):
            return httpx.Response(500, json={"error": {"message": "boom"}})
        return super().__call__(request)


def test_a_server_failing_only_requests_with_an_option_lacks_that_option():
    support = _client(FailsWithStop()).probe()
    assert support.features["stop"] is False
    assert "stop" in support.why["stop"] and "HTTP 500" in support.why["stop"]
    assert support.features["logprobs"] is True          # the other options are probed as usual


def test_a_server_failing_every_request_is_still_an_error():
    with pytest.raises(ServerError, match="HTTP 500"):
        _client(FailsAlways()).probe()


class ResetsFirst(FakeLlamaCppServer):
    """A connection reset on the first `resets` completion requests (a keep-alive connection the server
    closed after failing a request), then the usual answers."""

    def __init__(self, resets):
        super().__init__()
        self.resets = resets

    def __call__(self, request):
        if request.url.path.endswith("/completions") and self.resets > 0:
            self.resets -= 1
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        return super().__call__(request)


def test_a_request_that_meets_a_closed_connection_is_sent_once_more():
    server = ResetsFirst(resets=1)
    out = _client(server).complete("ab", max_tokens=2, temperature=0.0)
    assert out is not None and server.resets == 0 and len(server.bodies) == 1


def test_a_second_reset_is_the_error_it_was():
    with pytest.raises(ServerError, match="Connection reset"):
        _client(ResetsFirst(resets=2)).complete("ab", max_tokens=2, temperature=0.0)
