"""Lease files: a note per running server so that a later tuner can end what an earlier one
left behind (killed tuner, power cut of the terminal, a bug).

A lease names the process group, the leader's pid, its start time and its argv, and the
tuner process that owns it. Only leases whose owner has exited count: a server another
running tuner owns is left alone. Such a group is ended when its leader is still the very
process tuner started (same pid, same start time, same command line), or when the leader
is gone but members of its group live on; a pid the OS has since given to another program
is never touched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from tuner.errors import EnvironmentProblem
from tuner.runner.procgroup import (
    START_TIME_TOLERANCE_S,
    group_members,
    kill_group,
    still_running,
)
from tuner.telemetry import since_boot

log = logging.getLogger(__name__)

_REAP_GRACE_S = 5.0


@dataclass(frozen=True)
class Lease:
    pgid: int
    pid: int
    served_model_name: str
    argv: tuple[str, ...]
    started_at: float  # unix time tuner launched it
    start: float  # the leader's start (tuner.telemetry.since_boot), to tell a recycled pid apart
    owner_pid: int  # the tuner process that launched it
    owner_start: float
    sockets: str = ""  # the server's own directory of vLLM's socket files ("" none: sockets_dir)


def write_lease(lease_dir: Path, lease: Lease) -> Path:
    """Write ``lease`` atomically (a reader never sees half a file); returns its path."""
    path = lease_dir / f"server-{lease.pid}.json"
    tmp = path.with_suffix(".tmp")
    try:
        lease_dir.mkdir(parents=True, exist_ok=True)
        # Older tuners read psutil's wall-clock start times: written beside, so that one
        # running on this host does not take a live tuner's lease for a broken one.
        boot = psutil.boot_time()
        record = {
            **asdict(lease),
            "create_time": lease.start + boot,
            "owner_create_time": lease.owner_start + boot,
        }
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write the server lease {path}: {exc}",
            hint="make the lease directory writable or point tuner at another one",
        ) from None
    return path


def read_lease(path: Path) -> Lease | None:
    """The lease in ``path``; None when it is unreadable or not a lease."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if "start" not in data:  # an older tuner's lease: psutil's wall-clock start times
            boot = psutil.boot_time()
            data["start"] = float(data["create_time"]) - boot
            data["owner_start"] = float(data["owner_create_time"]) - boot
        return Lease(
            pgid=int(data["pgid"]),
            pid=int(data["pid"]),
            served_model_name=str(data["served_model_name"]),
            argv=tuple(str(a) for a in data["argv"]),
            started_at=float(data["started_at"]),
            start=float(data["start"]),
            owner_pid=int(data["owner_pid"]),
            owner_start=float(data["owner_start"]),
            sockets=str(data.get("sockets", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


SOCKETS_PREFIX = "tuner-vllm-"
_SOCKET_PATH_MAX = 107  # the longest path a Unix socket can bind to (sun_path, less its NUL)


def sockets_dir(env: Mapping[str, str]) -> str:
    """A new directory for one server's socket files; "" where ``env`` names one already.

    vLLM binds its engine's ZeroMQ sockets as files named by a UUID in ``VLLM_RPC_BASE_PATH``
    (the temporary directory by default) and leaves them there when its process is killed,
    as a trial's server is: two a launch, thousands after a few studies. A directory of the
    server's own, given to vLLM in that variable and removed with the server
    (:func:`remove_sockets_dir`), leaves nothing behind. Where it would lengthen a socket's
    path past what a Unix socket can bind to, vLLM keeps its default."""
    if env.get("VLLM_RPC_BASE_PATH"):
        return ""
    longest = os.path.join(tempfile.gettempdir(), SOCKETS_PREFIX + "x" * 8, "x" * 36)
    if len(os.fsencode(longest)) > _SOCKET_PATH_MAX:
        return ""
    try:
        return os.path.abspath(tempfile.mkdtemp(prefix=SOCKETS_PREFIX))
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot make a directory for the server's sockets in {tempfile.gettempdir()}: {exc}",
            hint="make the temporary directory writable, or set TMPDIR to one that is",
        ) from None


def remove_sockets_dir(path: str) -> None:
    """Remove a directory :func:`sockets_dir` made: its socket files, then the directory where
    that left it empty. Anything else is left alone (a path from a lease file may have been
    edited): a relative path, a link, one of another name, a file that is not a socket."""
    where = Path(path)
    if not (path and where.is_absolute() and where.name.startswith(SOCKETS_PREFIX)):
        return
    with contextlib.suppress(OSError):
        if where.is_symlink() or not where.is_dir():
            return
        for entry in where.iterdir():
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
        where.rmdir()


def _leader_state(lease: Lease) -> str:
    """Whether the leader is "ours" (still runs), "gone" (exited) or "other" (pid reused)."""
    try:
        proc = psutil.Process(lease.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return "gone"
        same_start = abs(since_boot(lease.pid) - lease.start) <= START_TIME_TOLERANCE_S
        return "ours" if same_start and tuple(proc.cmdline()) == lease.argv else "other"
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "other"  # cannot inspect it: not ours to kill


def reap_orphans(lease_dir: Path) -> list[int]:
    """End every server group whose owning tuner has exited; drop their leases.

    Leases of a live owner (this process included) stay untouched. Returns the
    process-group ids that were ended.
    """
    ended: list[int] = []
    if not lease_dir.is_dir():
        return ended
    for path in sorted(lease_dir.glob("server-*.json")):
        lease = read_lease(path)
        if lease is None or lease.pgid == os.getpgrp():
            path.unlink(missing_ok=True)
            continue
        if still_running(lease.owner_pid, lease.owner_start):
            continue
        # A leader that exited may leave children alive; while any lives, the kernel keeps
        # the group id (and so the pid) reserved, and kill_group checks they are younger
        # than our leader, so those are our server's children.
        state = _leader_state(lease)
        if state in ("ours", "gone") and kill_group(
            lease.pgid, _REAP_GRACE_S, not_before=lease.start
        ):
            ended.append(lease.pgid)
            log.warning(
                "ended the server %s (process group %d) that tuner pid %d left running when it "
                "exited", lease.served_model_name, lease.pgid, lease.owner_pid,
            )  # fmt: skip
        elif state == "other":
            log.warning(
                "lease %s dropped: pid %d is no longer the server tuner started (another "
                "program has it, or it cannot be inspected); left alone", path.name, lease.pid,
            )  # fmt: skip
        if lease.sockets and not group_members(lease.pgid):  # gone: its socket files go too
            remove_sockets_dir(lease.sockets)
        path.unlink(missing_ok=True)
    return ended
