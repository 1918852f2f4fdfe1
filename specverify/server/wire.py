"""The OpenAI completions wire format the server speaks: the request it accepts and the JSON it returns.

Request (`CompletionRequest`): the OpenAI fields, plus vLLM's extensions `top_k`, `stop_token_ids`,
`ignore_eos`, `return_token_ids` (each choice then carries `token_ids`, the response `prompt_token_ids`)
and `return_tokens_as_token_ids` (logprobs' tokens as "token_id:N"). A field it does not know, or a
value it cannot honour (echo, best_of > 1, suffix, penalties, logit_bias), is a 400 naming it: a server
that silently ignored a parameter would let an audit pass on something it never tested.

Prompt: a string, a list of strings, a list of token ids, or a list of lists of token ids; each prompt
gives `n` choices, choice index = prompt index * n + i (OpenAI's order).

Response: {"id", "object": "text_completion", "created", "model", "choices": [{"index", "text",
"logprobs", "finish_reason", ["token_ids"]}], "usage": {"prompt_tokens", "completion_tokens",
"total_tokens", "prompt_tokens_details": {"cached_tokens"}}}; logprobs in the legacy completions layout {"tokens", "token_logprobs",
"top_logprobs", "text_offset"}. Streaming: the same choices as "data: {json}" server-sent events with
the text and logprobs of the new tokens, a last chunk with usage when stream_options.include_usage,
then "data: [DONE]". Errors: {"error": {"message", "type", "code"}} with the HTTP status.
"""

from __future__ import annotations

import json
import time
import uuid

from pydantic import BaseModel, ConfigDict, Field

MAX_LOGPROBS = 20         # the most top entries a token may ask for (OpenAI's limit for completions)
MAX_N = 1024              # choices per prompt
TOKEN_ID_PREFIX = "token_id:"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1)            # -1 or 0: off
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    ignore_eos: bool = False
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    # OpenAI fields the server refuses unless they are at their neutral value
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict | None = None
    user: str | None = None

    def unsupported(self) -> str | None:
        """The first field set to a value the server does not implement (None: all honoured)."""
        if self.echo:
            return "echo is not supported"
        if self.best_of not in (None, 1) and self.best_of != self.n:
            return "best_of is not supported"
        if self.suffix:
            return "suffix is not supported"
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty / frequency_penalty are not supported by this server"
        if self.logit_bias:
            return "logit_bias is not supported by this server"
        return None

    def stops(self) -> tuple:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def error_body(status: int, message: str) -> dict:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


def logprobs_block(tokens: list, entries: list, piece, as_ids: bool, offset: int) -> dict:
    """The legacy completions logprobs of `tokens` (their `entries` from the batcher), text offsets from
    `offset` on; `piece(id)` is a token's text."""
    def name(t):
        return f"{TOKEN_ID_PREFIX}{t}" if as_ids else piece(t)

    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for tok, (lp, top) in zip(tokens, entries):
        out["tokens"].append(name(tok))
        out["token_logprobs"].append(lp)
        out["top_logprobs"].append({name(i): v for i, v in top})
        out["text_offset"].append(offset)
        offset += len(piece(tok))
    return out


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict:
    """The usage block; `cached_tokens` (prompt tokens the prefix cache served) as OpenAI's
    prompt_tokens_details.cached_tokens."""
    out = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": int(cached_tokens)}
    return out


def envelope(cid: str, model: str, choices: list, use: dict | None = None) -> dict:
    body = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model, "choices": choices}
    if use is not None:
        body["usage"] = use
    return body


def sse(body) -> str:
    return f"data: {body if isinstance(body, str) else json.dumps(body)}\n\n"
