"""`specverify serve-audit ENGINE`: launch a real OpenAI-compatible server (and a plain one), audit it
at the server level, stop it, write its report (`specverify.server.serve_audit`)."""

from __future__ import annotations

import argparse
import shlex

HELP = """\
Launch a real OpenAI-compatible server as a child process (bound to 127.0.0.1 on a free port), wait
until GET /v1/models answers, run the server level of the audit against it (server.greedy_bitwise,
server.needle, server.law, server.spec_vs_plain: docs/server-level.md), stop and reap it (also on
failure, ^C and SIGTERM), and write reports/ENGINE-server-VERSION/ (README.md, audit.json, launch.json
with the exact commands, the children's logs).

With --plain a second server of the same model is launched without speculation: greedy_bitwise and
spec_vs_plain compare the two. Without it those rows are SKIP and listed as not covered.

engines, their speculation (--spec) and install command (each engine lives in a venv of its own; pass
its python with --python):
{engines}
examples:
  specverify serve-audit specverify --python .venv/bin/python --model tiny:4,7 --spec draft --plain
  specverify serve-audit mlx --python VENV/bin/python --model TARGET_DIR \\
      --spec draft:DRAFT_DIR --plain --samples 10000

exit codes: 0 the server passes, 1 a row fails, 2 usage or input error, or the server could not be
launched or answered wrongly (one line; the children's logs are kept and named).
"""


def _engines_text() -> str:
    from specverify.server.engines import ENGINES
    out = []
    for name, launcher in sorted(ENGINES.items()):
        out.append(f"  {name:<12}--spec {' | '.join(launcher.spec_kinds)}\n  {'':<12}install: {launcher.install_hint}")
    return "\n".join(out)


def register(sub) -> None:
    p = sub.add_parser("serve-audit", help="launch a real OpenAI-compatible server and audit it",
                       description=HELP.format(engines=_engines_text()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", metavar="ENGINE", help="the server to launch (see above)")
    p.add_argument("--python", required=True, metavar="VENV/bin/python",
                   help="the python of the engine's own venv (the child runs with it)")
    p.add_argument("--model", required=True, metavar="M",
                   help="what the engine loads: a HF folder (mlx), a GGUF file (llamacpp), tiny:V,SEED / smollm2 "
                        "(specverify)")
    p.add_argument("--spec", required=True, metavar="S", help="the speculation of the audited server (see above)")
    p.add_argument("--plain", action="store_true",
                   help="also launch a plain server (--spec none) of the same model: needed by greedy_bitwise and "
                        "spec_vs_plain")
    p.add_argument("--engine-args", default="", metavar="'ARGS'",
                   help="more arguments for both servers' command lines, one shell-quoted string "
                        "(e.g. '--num-draft-tokens 4' for mlx)")
    p.add_argument("--served-model", metavar="NAME",
                   help="the model name requests carry (default: the engine's, else the server's only model)")
    p.add_argument("--port", type=int, metavar="PORT",
                   help="port of the speculative server (default: a free one); a port taken is an error")
    p.add_argument("--ready-timeout", type=float, metavar="S",
                   help="seconds a server may take to answer GET /v1/models (default: the engine's)")
    p.add_argument("--out", metavar="DIR", help="report folder (default reports/ENGINE-server-VERSION)")
    p.add_argument("--no-report", action="store_true", help="print the verdicts, write no report")
    p.add_argument("--samples", type=int, help="budget: samples // 20 runs per law row and spec_vs_plain arm")
    p.add_argument("--seed", type=int, help="seed of every prompt and request (default 0)")
    p.add_argument("--alpha", type=float, help="family-wise false-alarm rate (default 1e-3)")
    p.add_argument("--timeout", type=float, help="seconds one request, or one wave of requests, may take")
    p.add_argument("--checks", metavar="CHECK,...",
                   help="comma-separated subset of the server checks to run (server: the four server.* rows; "
                        "serving: the serving-path rows); default both")
    p.add_argument("--quiet", "-q", action="store_true", help="only the one-line verdict")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.errors import InputError
    from specverify.progress import Progress
    from specverify.server.serve_audit import serve_audit
    from specverify.verdicts import PASS

    try:
        extra = tuple(shlex.split(args.engine_args))
    except ValueError as exc:
        raise InputError(f"--engine-args {args.engine_args!r}: {exc}") from None
    if args.ready_timeout is not None and not args.ready_timeout > 0:
        raise InputError(f"--ready-timeout {args.ready_timeout}: must be > 0")
    given = {k: getattr(args, k) for k in ("samples", "seed", "alpha", "timeout", "checks")
             if getattr(args, k) is not None}
    if args.served_model:
        given["model"] = args.served_model
    progress = Progress(quiet=args.quiet)
    try:
        done = serve_audit(args.engine, args.python, args.model, args.spec, plain=args.plain, given=given,
                           out=args.out, extra=extra, port=args.port, ready_timeout_s=args.ready_timeout,
                           progress=progress, write=not args.no_report)
    finally:
        progress.done()
    result = done.result
    if args.quiet:
        from specverify.summary import verdict_line
        print(verdict_line(result))
    else:
        from specverify.cli.audit import table
        print(table(result, all_rows=True))
    if done.out is not None:
        print(f"report: {done.out}")
    return 0 if result.verdict == PASS else 1
