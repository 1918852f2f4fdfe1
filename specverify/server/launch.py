"""Run the app under uvicorn: bind, announce the URL, serve until ^C / SIGTERM.

The socket is bound here (port 0: the OS picks a free one) before uvicorn starts, so the URL printed
is the one bound. Once uvicorn reports started, the first line on stdout is

    specverify serve: listening on http://HOST:PORT/v1 (model NAME, spec SPEC)

and, with `ready_file`, that URL alone is written to it atomically (a test waits for the file). Only
loopback hosts are allowed unless `allow_remote`: the server has no authentication.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys

from specverify.errors import InputError

LOOPBACK_NAMES = ("localhost",)
STARTUP_POLL_S = 0.01


def check_host(host: str, allow_remote: bool) -> None:
    """InputError unless `host` is a loopback address (or `allow_remote`)."""
    if allow_remote or host in LOOPBACK_NAMES:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(f"--host {host}: the server has no authentication and binds loopback addresses only "
                         "(127.0.0.1, ::1, localhost); pass --allow-remote to bind another")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"


def serve(app, sock: socket.socket, announce: str, ready_file: str | None = None) -> None:
    """Serve `app` on the bound socket until interrupted; print `announce` once started."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)

    async def main():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                await task
                return
            await asyncio.sleep(STARTUP_POLL_S)
        print(announce, flush=True)
        if ready_file:
            from specverify.io import write_atomic
            write_atomic(ready_file, url_of(sock) + "\n")
        await task

    try:
        asyncio.run(main())
    finally:
        sock.close()
        sys.stdout.flush()
