"""Ports for trial servers.

Each trial gets a port of its own: vLLM binds with SO_REUSEPORT, so a leftover server on a
shared port would silently take part of the next trial's traffic.
"""

from __future__ import annotations

import socket

from tuner.errors import EnvironmentProblem


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it; another process may race us)."""
    try:
        # the address family of ``host`` ("::1" is IPv6; an AF_INET socket cannot bind it)
        family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot find a free port on {host}: {exc}",
            hint="check the --host setting names an address of this machine",
        ) from None


def port_is_open(host: str, port: int, timeout_s: float = 0.25) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
