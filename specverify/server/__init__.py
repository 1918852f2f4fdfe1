"""Our engine as an OpenAI-compatible completions server, and the client that audits any such server.

    models.py    what `--model` names (tiny:V,SEED toy models with a known law, smollm2, a GGUF path)
    wire.py      the completions wire format: the request it accepts, the JSON it returns
    batching.py  continuous batching: the engine in one thread, requests joining between steps, logprobs
    variants.py  deliberately broken engines (negative controls for the server level's tests)
    app.py       the FastAPI app (/v1/completions, /v1/models, /version, /health)
    launch.py    bind a loopback socket, run uvicorn, announce the URL
    client.py    the audit's client (the `openai` package): probing what a server supports, many
                 requests in flight, every failure one line
    audit.py     `specverify audit http://HOST:PORT/v1`: the server level of the audit

The server level's checks are `specverify.checks.server` (rows server.law, server.spec_vs_plain,
server.greedy_bitwise, server.needle).
"""
