"""What a launcher is, and the one lifecycle every launched server goes through.

`EngineLauncher` describes one real OpenAI-compatible server: the documented command that starts it
(`command(python, model, port, spec, extra)`: the argv of the child, run with the engine's own venv
python), the speculation kinds it takes (`spec_kinds`: "none", "ngram:N", "draft:PATH", ...), the
environment it needs, how long it may take to come up and how its version is read. An engine module
subclasses it (a frozen dataclass) and overrides `command` (and `version` when the engine is not one
pip distribution).

`launched(launcher, python, model, spec, ...)` runs one:

    pick a free port on 127.0.0.1 (or check the one given is free: a port taken is one line, exit 2)
    start the child in a session of its own (its own process group), stdout+stderr to `log`
    poll GET /v1/models until it answers 200 with a model list, within the launcher's ready timeout;
      the child exiting first, or the timeout passing, is one `LaunchError` line (exit 2) naming
      the engine, what happened, the log's path and its last line
    yield a `Launched` (url, argv, log, version, served model names)
    always (success, an exception, ^C, SIGTERM of our process): SIGTERM to the child's process group,
      SIGKILL to the group after STOP_GRACE_S, then reap the child

The child is in its own session, so a ^C at the terminal reaches only us; we stop it. SIGTERM of our
process is turned into an exception (`Terminated`) while a server is up, when nobody (the CLI's
`main`) has installed a handler already, so that the stop above runs for it too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specverify.errors import AdapterError, InputError

HOST = "127.0.0.1"
READY_POLL_S = 0.25              # between two readiness requests
READY_REQUEST_S = 2.0            # one readiness request may take this long
STOP_GRACE_S = 10.0              # after SIGTERM, before SIGKILL of the group
REAP_S = 10.0                    # after SIGKILL, waiting for the child to be reaped
GROUP_POLL_S = 0.05              # while waiting for the rest of the child's process group to be gone
DEFAULT_READY_TIMEOUT_S = 300.0
NO_SPEC = "none"


class LaunchError(AdapterError):
    """A launched server did not come up (exited, or never answered /v1/models in time): one line."""


class Terminated(BaseException):
    """SIGTERM of our process while a launched server was up (raised where the program is)."""


@dataclass(frozen=True)
class EngineLauncher:
    """One real server: name, the documented install command (its own venv), the speculation kinds
    it takes, its environment, its readiness timeout. Subclasses override `command` (and `version`)."""
    name: str                                  # "llamacpp", "mlx", "vllm-cpu", "specverify"
    install_hint: str                          # the one documented install command (its own venv)
    spec_kinds: tuple = (NO_SPEC,)             # e.g. ("none", "ngram:N", "draft:PATH")
    env: dict = field(default_factory=dict)    # added to the child's environment
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    distribution: str = ""                     # the pip distribution whose version `version` reads
    # body fields every audit request carries unless it sets them: the sampler at its neutral values where the
    # server's own defaults are not OpenAI's (llama-cpp-python: top_p 0.95, top_k 40, min_p 0.05, repeat 1.1)
    request_defaults: dict = field(default_factory=dict)

    def command(self, python: str, model: str, port: int, spec: str, extra=()) -> list[str]:
        """The argv of the child serving `model` with speculation `spec` on 127.0.0.1:`port`."""
        raise NotImplementedError(f"engine {self.name}: no command")

    def version(self, python: str) -> str:
        """The engine's version as installed for `python` (its pip distribution's)."""
        if not self.distribution:
            raise NotImplementedError(f"engine {self.name}: no version")
        return distribution_version(python, self.distribution)

    def prepare(self, model: str, spec: str, workdir: Path) -> str:
        """The model argument `command` gets (default: `model` itself). A launcher whose engine takes its
        speculation from the model's files (transformers: generation_config.json) writes a derived model
        under `workdir` and returns its path."""
        return model

    def child_env(self, workdir: Path) -> dict:
        """What the child's environment adds to ours (default `env`; a launcher may point caches under
        `workdir`, a folder of this launch)."""
        return dict(self.env)

    def served_name(self, model: str) -> str | None:
        """The model name requests must carry (None: the server's only model)."""
        return None


def distribution_version(python: str, distribution: str, timeout: float = 120.0) -> str:
    """`importlib.metadata.version(distribution)` in the venv of `python`; LaunchError if absent."""
    code = f"from importlib.metadata import version; print(version({distribution!r}))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"{python}: cannot run it to read the version of {distribution} ({exc})") from None
    if out.returncode != 0:
        raise LaunchError(f"{python}: {distribution} is not installed in this venv")
    return out.stdout.strip()


def parse_spec(spec: str) -> tuple[str, str | None]:
    """("ngram", "3") of "ngram:3", ("none", None) of "none"."""
    kind, _, arg = str(spec).partition(":")
    return kind, (arg if arg else None)


def _kind_of(declared: str) -> tuple[str, str]:
    """(kind, "required" | "optional" | "none") of a declared kind: "draft:PATH", "draft[:LAYERS]", "none"."""
    if declared.endswith("]") and "[:" in declared:
        return declared[:declared.index("[:")], "optional"
    kind, _, arg = declared.partition(":")
    return kind, "required" if arg else "none"


def check_spec(launcher: EngineLauncher, spec: str) -> tuple[str, str | None]:
    """(kind, argument) of `spec`; InputError naming the kinds the engine takes for any other."""
    kind, arg = parse_spec(spec)
    kinds = dict(_kind_of(k) for k in launcher.spec_kinds)
    if kind not in kinds:
        raise InputError(f"--spec {spec}: engine {launcher.name} takes {', '.join(launcher.spec_kinds)}")
    declared = next(k for k in launcher.spec_kinds if _kind_of(k)[0] == kind)
    if kinds[kind] == "required" and arg is None:
        raise InputError(f"--spec {spec}: write {declared}")
    if kinds[kind] == "none" and arg is not None:
        raise InputError(f"--spec {spec}: {kind} takes no argument")
    return kind, arg


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the OS's pick; the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(port: int, host: str = HOST) -> None:
    """InputError unless `port` on `host` can be bound now."""
    if not 1 <= port <= 65535:
        raise InputError(f"--port {port}: must be in [1, 65535]")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InputError(f"port {host}:{port} is already taken ({exc.strerror or exc})") from None


@dataclass
class Launched:
    """A server that is up: its URL, the argv that started it, its log, version and served models."""
    engine: str
    url: str
    argv: list
    log: Path
    pid: int
    version: str
    spec: str
    models: list
    env: dict
    seconds_to_ready: float

    def to_dict(self) -> dict:
        return {"engine": self.engine, "url": self.url, "argv": list(self.argv), "log": self.log.name,
                "version": self.version, "spec": self.spec, "models": list(self.models), "env": dict(self.env),
                "seconds_to_ready": round(self.seconds_to_ready, 2)}


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _models(url: str) -> list | None:
    """The model ids of GET URL/models, or None while the server is not answering with a list."""
    import httpx
    try:
        r = httpx.get(url + "/models", timeout=READY_REQUEST_S)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        body = r.json()
    except ValueError:
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's process group, SIGKILL it after `grace_s`, reap the child. The group is
    signalled even when the child has exited already: workers it left in the group go too. Returns
    once the group is empty (members the child left behind are reaped by init, a moment later), or
    after REAP_S more."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid                         # exited and reaped: its group id was its pid
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, REAP_S)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        if _group_gone_within(pgid, grace_s if sig == signal.SIGTERM else REAP_S):
            return
        # the leader is gone but members of its group are not: SIGKILL them (next round)
    proc.poll()


def _group_gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(GROUP_POLL_S)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _sigterm_raises():
    """While inside: SIGTERM raises Terminated, unless someone (the CLI) handles it already."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def launched(launcher: EngineLauncher, python: str, model: str, spec: str = NO_SPEC, *, extra=(),
             log: str | Path, port: int | None = None, ready_timeout_s: float | None = None,
             grace_s: float = STOP_GRACE_S):
    """Run `launcher`'s server for `model` with `spec` while inside (module docstring); yield `Launched`."""
    check_spec(launcher, spec)
    python = str(python)
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise InputError(f"--python {python}: not an executable file (the engine's venv python; install: "
                         f"{launcher.install_hint})")
    if port is None:
        port = free_port()
    else:
        check_port_free(port)
    version = launcher.version(python)
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    model = launcher.prepare(str(model), spec, log.parent / f"{log.stem}-model")
    argv = [str(a) for a in launcher.command(python, model, port, spec, tuple(extra))]
    added = launcher.child_env(log.parent / f"{log.stem}-work")
    env = dict(os.environ, **added)
    url = f"http://{HOST}:{port}/v1"
    timeout = launcher.ready_timeout_s if ready_timeout_s is None else ready_timeout_s
    with _sigterm_raises():
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        try:
            start = time.monotonic()
            models = None
            while models is None:
                if proc.poll() is not None:
                    raise LaunchError(f"engine {launcher.name}: the server exited with code {proc.returncode} "
                                      f"before it was ready (log {log}: {_last_line(log)!r})")
                if time.monotonic() - start > timeout:
                    raise LaunchError(f"engine {launcher.name}: the server did not answer GET {url}/models within "
                                      f"{timeout:g} s (log {log}: {_last_line(log)!r})")
                models = _models(url)
                if models is None:
                    time.sleep(READY_POLL_S)
            yield Launched(launcher.name, url, argv, log, proc.pid, version, spec, models, added,
                           time.monotonic() - start)
        finally:
            stop(proc, grace_s)


__all__ = ["EngineLauncher", "Launched", "LaunchError", "Terminated", "launched", "stop", "free_port",
           "check_port_free", "check_spec", "parse_spec", "distribution_version", "NO_SPEC"]
