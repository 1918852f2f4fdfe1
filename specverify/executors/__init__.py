"""Where an audit's checks run: `local` (this host: the adapter's worker process, `--jobs` of them side by
side; the default) or `ray[:ADDRESS]` (a Ray cluster: `specverify.executors.ray_run`).

    executor = parse("ray:127.0.0.1:6379", gpus_per_adapter=0.5)   # InputError for a bad spec
    executor.connect()       # InputError: ray missing (the install line), or no cluster at ADDRESS
    specverify.audit("reference", executor=executor)

`parse` and `connect` do no audit work: a command line calls both before it builds the adapter, so a
missing ray or an unreachable cluster is exit 2 before anything runs. `ray` alone connects to the
cluster this host already belongs to (RAY_ADDRESS, or the one `ray start` left here), else starts one
in this process (`ray.init()`); `ray:HOST:PORT` connects to the head node's GCS at HOST:PORT.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass

from specverify import extras
from specverify.errors import InputError

LOCAL = "local"
RAY = "ray"
KINDS = (LOCAL, RAY)
PROBE_SECONDS = 5.0         # how long a cluster address may take to accept a TCP connection
RAY_PIN = "ray==2.60.0"     # the version the `ray` extra pins (pyproject.toml)


@dataclass(frozen=True)
class Executor:
    """How an audit runs: kind (LOCAL or RAY), the Ray address (None: this host's cluster or a new
    one), and what each adapter's actor asks the cluster for (CPUs, GPUs)."""

    kind: str = LOCAL
    address: str | None = None
    cpus_per_adapter: float = 1.0
    gpus_per_adapter: float = 0.0
    actors: int | None = None       # adapter actors at most (None: what the cluster's CPUs and GPUs allow)

    def __str__(self) -> str:
        return self.kind if self.address is None else f"{self.kind}:{self.address}"

    def connect(self) -> None:
        """Make the cluster ready (RAY): InputError if ray is not installed or the address does not answer."""
        if self.kind == RAY:
            from .ray_run import connect
            connect(self)


def parse(spec, *, cpus_per_adapter: float = 1.0, gpus_per_adapter: float = 0.0, actors=None,
          label: str = "--executor") -> Executor:
    """`local`, `ray` or `ray:HOST:PORT` as an Executor; anything else is an InputError naming `label`."""
    if isinstance(spec, Executor):
        return spec
    if spec is None:
        spec = LOCAL
    if not isinstance(spec, str):
        raise InputError(f"{label} {spec!r}: must be one of local, ray, ray:HOST:PORT")
    kind, _, address = spec.partition(":")
    if kind not in KINDS or (kind == LOCAL and address) or (kind == RAY and _ and not address):
        raise InputError(f"{label} {spec!r}: must be one of local, ray, ray:HOST:PORT")
    for name, value in (("--ray-cpus-per-adapter", cpus_per_adapter), ("--ray-gpus-per-adapter", gpus_per_adapter)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise InputError(f"{name} {value!r}: must be a number >= 0")
    if cpus_per_adapter == 0 and gpus_per_adapter == 0:
        raise InputError("--ray-cpus-per-adapter 0 with --ray-gpus-per-adapter 0: an adapter actor must ask for something")
    if actors is not None and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
        raise InputError(f"--ray-actors {actors!r}: must be an integer >= 1")
    if kind == LOCAL and (gpus_per_adapter or cpus_per_adapter != 1.0 or actors is not None):
        raise InputError("--ray-cpus-per-adapter, --ray-gpus-per-adapter and --ray-actors need --executor ray")
    if address:
        host_port(address, label)
    return Executor(kind, address or None, float(cpus_per_adapter), float(gpus_per_adapter), actors)


def host_port(address: str, label: str = "--executor") -> tuple:
    """(host, port) of a `HOST:PORT` address, else InputError."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{label} ray:{address}: the address must be HOST:PORT (the head node's GCS, "
                         "e.g. ray:127.0.0.1:6379)")
    return host, int(port)


def require_ray() -> None:
    """InputError with the install line if ray is not installed (looked up, not imported)."""
    if extras.missing(("ray",)):
        raise InputError(f"--executor ray needs ray, which is not installed: pip install 'specverify[ray]' ({RAY_PIN})")


def reachable(address: str, seconds: float = PROBE_SECONDS) -> str | None:
    """None if HOST:PORT accepts a TCP connection within `seconds`, else why not (one phrase)."""
    host, port = host_port(address)
    try:
        with socket.create_connection((host, port), timeout=seconds):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


__all__ = ["Executor", "parse", "require_ray", "reachable", "host_port", "LOCAL", "RAY", "KINDS"]
