"""``tuner serve``: the recommendations API (and dashboards) under uvicorn.

Bound to 127.0.0.1 unless told otherwise, CORS off unless origins are given, writes off unless
the API key variable is set, and a queued study's ``runner.extra_args`` refused unless
``--allow-extra-args``. Reads need no key: bound to an address other hosts reach, it says so on
stderr. The listening socket is bound here, before uvicorn starts, so that a port in use is a
clear usage error instead of a log line from deep inside uvicorn. A SQLite file that does not
exist is refused (a typo in the path would serve an empty store).
"""

from __future__ import annotations

import gc
import ipaddress
import socket
from typing import Annotated

import typer
from rich.markup import escape

from tuner.cli.common import StorageOpt, err, say, storage_url
from tuner.doctor.checks import missing_sqlite_file
from tuner.errors import UsageError


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6); UsageError if it cannot bind."""
    if not 0 <= port < 65536:
        raise UsageError(f"port {port} is outside 0-65535", hint="e.g. --port 8080")
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a host name: let getaddrinfo pick
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except OSError as exc:
            raise UsageError(
                f"cannot resolve host {host!r}: {exc}", hint="e.g. --host 127.0.0.1"
            ) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this. Without it, answers written in two parts (headers,
    # then body) wait ~40 ms for the client's delayed ACK (Nagle): uvicorn sets it only on
    # sockets it binds itself.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="pick another --port, or stop whatever holds this one",
        ) from None
    return sock


def _loopback(sock: socket.socket) -> bool:
    """Whether ``sock`` listens on a loopback address only (127.0.0.0/8, ::1)."""
    address = ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def serve_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 8080,
    storage: StorageOpt = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the key that writes need.")
    ] = "TUNER_API_KEY",
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="Allow this browser origin (repeatable).")
    ] = None,
    allow_extra_args: Annotated[
        bool,
        typer.Option(
            help="Let a key holder queue studies with runner.extra_args: any `vllm serve` flag "
            "on the workers, --trust-remote-code (code execution) included."
        ),
    ] = False,
) -> None:
    """Serve the recommendations API and dashboards (docs at /docs) until Ctrl-C."""
    import uvicorn

    from api.app import create_app
    from api.settings import ApiSettings
    from tuner.db import safe_url, with_storage

    url = storage_url(storage)
    if not api_key_env.strip():
        raise UsageError("--api-key-env must name an environment variable")
    settings = ApiSettings.from_env(  # the origins checked before the database is looked at
        url,
        api_key_env=api_key_env,
        cors_origins=cors_origin or (),
        allow_extra_args=allow_extra_args,
    )
    missing = missing_sqlite_file(url)
    if missing is not None:
        raise UsageError(
            f"database {missing} does not exist",
            hint="point --storage at an existing database, or create this one: "
            + with_storage("tuner db upgrade", url),
        )
    app = create_app(settings)
    # Everything imported and built so far lives as long as the server: keep it out of the
    # garbage collector's full passes, which otherwise stall answers for tens of ms.
    gc.collect()
    gc.freeze()
    sock = bind_socket(host, port)
    shown = f"[{host}]" if ":" in host else host
    say(f"tuner API on http://{shown}:{sock.getsockname()[1]}/ (docs at /docs)")
    say(f"  storage: {safe_url(url)}")
    if settings.api_key:
        say(f"  writes: on, with the key in ${api_key_env}")
        extra = (
            "accepted (a key holder passes any vllm serve flag to the workers)"
            if allow_extra_args
            else "refused (--allow-extra-args takes them)"
        )
        say(f"  runner.extra_args: {extra}")
    else:
        say(f"  writes: off (set {api_key_env} to allow POST /v1/studies)")
    if settings.cors_origins:
        say(f"  CORS origins: {', '.join(settings.cors_origins)}")
    if not _loopback(sock):
        warning = (
            f"warning: listening on {shown}, which other hosts may reach: every read (studies, "
            "trials with their server log tails and host names, recommendations) needs no key"
            + ("" if settings.api_key else ", and none is set")
            + "; bind 127.0.0.1 and reach it through an SSH tunnel or an authenticating proxy"
        )
        err.print(f"[yellow]{escape(warning)}[/]", soft_wrap=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="info", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
