"""`specverify serve-audit ENGINE`: launch a real server (and a plain one), audit it, write the report.

    serve_audit(engine, python, model, spec, plain=True, given={...}, out=None)

launches the speculative server (`engines.launched`) and, with `plain`, a plain one of the same model
(spec "none"), runs the server level on them (`audit.prepare_server(...).run()`: the same rows,
Holm family and not-covered list as `specverify audit URL --plain-url URL`), stops and reaps both,
then writes `reports/<engine>-server-<version>/` atomically (`render.atomic.atomic_dir`):

    README.md       the verdict table, the launch commands, the version and flags, not covered
    audit.json      the result (`AuditResult.to_dict()`) with a "launch" section
    launch.json     for each server: argv, env added, version, spec, served models, seconds to ready
    logs/spec.log   the child's stdout+stderr (and logs/plain.log)

The children's logs are written to a temporary folder while they run; on an error that folder is kept
(its path is in the error line) and no report is written.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from specverify.errors import AdapterError, InputError
from specverify.render.atomic import check_replaceable

from . import engines
from .audit import prepare_server
from .engines.base import NO_SPEC, check_spec

REPORTS = Path("reports")
LOG_PREFIX = "specverify-serve-audit-"


@dataclass
class ServeAuditResult:
    result: object               # the AuditResult
    launch: dict                 # {"spec": Launched.to_dict(), "plain": ... or None, "engine", "version", ...}
    out: Path | None             # the report folder written (None: not asked)


def default_out(engine: str, version: str, tag: str | None = None) -> Path:
    return REPORTS / (f"{engine}-server-{version}" + (f"-{tag}" if tag else ""))


def serve_audit(engine: str, python: str, model: str, spec: str, *, plain: bool = True, given: dict | None = None,
                out=None, extra=(), port: int | None = None, ready_timeout_s: float | None = None,
                progress=None, write: bool = True) -> ServeAuditResult:
    """Launch, audit, stop, report (module docstring). Every user error is an InputError, every server
    failure a one-line AdapterError naming the folder where the children's logs are kept; the servers
    are reaped on every path."""
    launcher = engines.get(engine)
    check_spec(launcher, spec)
    if spec == NO_SPEC and plain:
        raise InputError("--spec none with --plain: both servers would be plain; name the speculation to audit")
    if out is not None and write:
        check_replaceable(str(out))
    logs = Path(tempfile.mkdtemp(prefix=LOG_PREFIX))
    given = dict(given or {})
    try:
        with ExitStack() as stack:
            spec_srv = stack.enter_context(engines.launched(launcher, python, model, spec, extra=extra, port=port,
                                                            log=logs / "spec.log", ready_timeout_s=ready_timeout_s))
            target = Path(out) if out is not None else default_out(engine, spec_srv.version)
            if write:
                check_replaceable(str(target))
            plain_srv = None
            if plain:
                plain_srv = stack.enter_context(engines.launched(launcher, python, model, NO_SPEC, extra=extra,
                                                                 log=logs / "plain.log",
                                                                 ready_timeout_s=ready_timeout_s))
                given["plain_url"] = plain_srv.url
            served = launcher.served_name(model)
            if served is not None and given.get("model") is None:
                given["model"] = served
            result = prepare_server(spec_srv.url, given, progress=progress, word_vocab=tiny_words(model),
                                    request_defaults=launcher.request_defaults).run()
    except AdapterError as exc:
        if str(logs) in str(exc):
            raise
        raise type(exc)(f"{exc} (server logs kept in {logs})") from None
    launch = {"engine": engine, "version": spec_srv.version, "python": str(python), "model": str(model),
              "spec": spec_srv.to_dict(), "plain": plain_srv.to_dict() if plain_srv else None,
              "install": launcher.install_hint, "request_defaults": dict(launcher.request_defaults)}
    if write:
        write_report(target, result, launch, logs)
    shutil.rmtree(logs, ignore_errors=True)
    return ServeAuditResult(result, launch, target if write else None)


def tiny_words(model) -> int | None:
    """V of a tiny Llama folder (`models.tiny.build`: its tokenizer knows only "t0".."t{V-1}"), else None."""
    from specverify.models.tiny import STAMP
    stamp = Path(str(model)) / STAMP
    if not stamp.is_file():
        return None
    try:
        return int(json.loads(stamp.read_text())["vocab"])
    except (ValueError, KeyError, TypeError):
        return None


def command_line(argv) -> str:
    return shlex.join(str(a) for a in argv)


def readme(result, launch: dict) -> str:
    from specverify.cli.audit import table
    lines = [f"# {launch['engine']} {launch['version']}: the server level, launched by specverify serve-audit", ""]
    lines += [f"Verdict: **{result.verdict.upper()}**. Model `{launch['model']}`, python `{launch['python']}`.", ""]
    lines += ["## Launch", ""]
    for role in ("spec", "plain"):
        srv = launch.get(role)
        if not srv:
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(srv["env"].items()))
        lines += [f"{role} server (`--spec {srv['spec']}`, ready in {srv['seconds_to_ready']:.1f} s, served models "
                  f"{', '.join(srv['models']) or '-'}; log `logs/{srv['log']}`):", "",
                  "```sh", (env + " " if env else "") + command_line(srv["argv"]), "```", ""]
    if launch.get("request_defaults"):
        lines += ["Every request carries " + ", ".join(f"`{k}={v}`" for k, v in launch["request_defaults"].items())
                  + " unless a row sets it (the server's own sampler defaults are not OpenAI's).", ""]
    lines += [f"Install: `{launch['install']}`", "", "## Result", "", "```", table(result, all_rows=True), "```", ""]
    return "\n".join(lines)


def write_report(target: Path, result, launch: dict, logs: Path) -> None:
    from specverify.format import json_safe
    from specverify.render.atomic import atomic_dir

    with atomic_dir(str(target)) as tmp:
        tmp = Path(tmp)
        body = result.to_dict()
        body["launch"] = launch
        (tmp / "audit.json").write_text(json.dumps(json_safe(body), indent=1) + "\n")
        (tmp / "launch.json").write_text(json.dumps(json_safe(launch), indent=1) + "\n")
        (tmp / "README.md").write_text(readme(result, launch))
        (tmp / "logs").mkdir()
        for log in sorted(logs.glob("*.log")):
            shutil.copyfile(log, tmp / "logs" / log.name)


__all__ = ["serve_audit", "ServeAuditResult", "default_out", "write_report"]
