"""The checks of ``tuner doctor`` that need no vLLM: tuner's storage and the ports trials use.

Both only look: the storage check never creates a database or migrates one, and the port
check releases every port it binds.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import EnvironmentProblem, StorageError

LAUNCH_PORT = 8000  # `tuner launch`'s default port, like vLLM's


@dataclass(frozen=True)
class Problem:
    """Something that stops a study, and what to do about it."""

    what: str
    fix: str


@dataclass(frozen=True)
class StorageFacts:
    url: str
    revision: str | None
    head: str | None
    problem: Problem | None = None
    note: str = ""


@dataclass(frozen=True)
class PortFacts:
    host: str
    checked: tuple[int, ...]
    range: tuple[int, int] | None
    launch_port_free: bool
    error: str | None = None


def gather_storage(url: str) -> StorageFacts:
    """The schema revision of tuner's tables at ``url``; never creates a database."""
    from tuner.db import (
        check_integrity,
        check_leftovers,
        current_revision,
        ensure_current,
        head_revision,
        safe_url,
    )

    where = safe_url(url)
    try:
        head = head_revision()
    except StorageError as exc:
        return StorageFacts(where, None, None, problem=Problem(exc.message, exc.hint))
    blank = blank_sqlite_file(url)  # not opened: that would create or write the file
    if blank is not None:
        return StorageFacts(where, None, head, note=f"{blank[1]}: `tuner run` {SETS_UP[blank[1]]}")
    revision = None
    try:
        check_integrity(url)  # a damaged file is not "at revision N", as `tuner db current` says
        revision = current_revision(url)
        if revision is None:
            check_leftovers(url)  # tables `tuner run` would refuse are no "not yet"
            return StorageFacts(
                where, None, head, note="no tuner tables yet: `tuner run` adds them"
            )
        ensure_current(url)
    except StorageError as exc:
        return StorageFacts(where, revision, head, problem=Problem(exc.message, exc.hint))
    return StorageFacts(where, revision, head)


def missing_sqlite_file(url: str) -> Path | None:
    """The path of a SQLite database file that does not exist; None for anything else."""
    from tuner.db import sqlite_file

    path = sqlite_file(url)
    return None if path is None or path.exists() else path


SETS_UP = {"does not exist": "creates it", "is empty": "creates tuner's tables in it"}
"""What ``tuner run`` does with a file :func:`blank_sqlite_file` finds, by what it found."""


def blank_sqlite_file(url: str) -> tuple[Path, str] | None:
    """A SQLite database file that holds nothing, and how: it "does not exist", or it "is
    empty" (0 bytes: ``touch``, or a tool that made it and wrote nothing). Neither has a table
    to read, and opening either writes it (SQLite's header and WAL mode: 4 KiB), so what only
    reads leaves it alone. None for anything else."""
    from tuner.db import sqlite_file

    path = sqlite_file(url)
    if path is None:
        return None
    if not path.exists():
        return path, "does not exist"
    return (path, "is empty") if path.is_file() and path.stat().st_size == 0 else None


def _port_range() -> tuple[int, int] | None:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def gather_ports(host: str = "127.0.0.1", count: int = 3) -> PortFacts:
    """Take ``count`` ports the way trials do (:func:`free_port`) and bind each of them."""
    from tuner.runner import free_port, port_is_open

    checked: list[int] = []
    error = None
    try:
        for _ in range(count):
            port = free_port(host)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, port))
            checked.append(port)
    except EnvironmentProblem as exc:
        error = exc.message
    except OSError as exc:
        error = f"cannot bind a port on {host}: {exc}"
    launch_free = not port_is_open(host, LAUNCH_PORT)
    return PortFacts(host, tuple(checked), _port_range(), launch_free, error)
