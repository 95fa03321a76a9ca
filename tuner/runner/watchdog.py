"""A server's watchdog: a small process that ends the server's group when its tuner dies.

Leases (:mod:`tuner.runner.leases`) let the *next* tuner end a server that an earlier one left
behind; the watchdog makes sure there is rarely anything to leave. Before each server, tuner
starts ``python -m tuner.runner.watchdog GRACE_S [SOCKETS_DIR]`` in a session of its own with
the read end of a pipe as its stdin, and keeps the write end; the server gets the watchdog's
pid in its environment (:data:`ENV`), and once it runs tuner writes its group id to the pipe
(:func:`arm`). The watchdog blocks reading. The kernel closes the write end whenever the tuner
ends, however it ends (``kill -9`` included), so the read returns end-of-file; the watchdog
then ends the group (TERM, grace, KILL), unless it is already empty, removes the server's
directory of vLLM's socket files (:func:`tuner.runner.leases.sockets_dir`) once the group is
gone, and exits. A tuner killed after it started the server but before it wrote the group id
(a window no signal handler can close) leaves a watchdog that finds the group by :data:`ENV`
instead. A tuner that stops its server itself ends the group first and then closes the pipe,
so the watchdog finds nothing to do.

Only the standard library, psutil, :mod:`tuner.runner.procgroup`, :mod:`tuner.runner.leases`
and :mod:`tuner.telemetry`'s process facts are imported (before it blocks, so that nothing is
loaded once the tuner is gone), and the watchdog starts in a few tens of milliseconds. It
ignores SIGINT and SIGHUP (a Ctrl-C or a closed terminal reaches the tuner, which stops the
server itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

MODULE = "tuner.runner.watchdog"
ENV = "TUNER_WATCHDOG_PID"  # in a server's environment: the pid of the watchdog that ends it


def spawn(grace_s: float, sockets: str = "") -> tuple[subprocess.Popen[bytes], int]:
    """Start a watchdog before its server; returns it and the pipe's write end to hold.

    Put ``{ENV: str(proc.pid)}`` in the server's environment and :func:`arm` the watchdog with
    the server's group once it runs. Closing the descriptor (or the end of this process) lets
    the watchdog act; it then removes ``sockets`` (a directory from
    :func:`tuner.runner.leases.sockets_dir`, "" none) once the group is gone.
    """
    read_end, write_end = os.pipe()  # both not inheritable: no other child holds them
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, repr(grace_s), *([sockets] if sockets else [])],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end


def arm(fd: int, pgid: int) -> None:
    """Tell the watchdog behind ``fd`` which group it guards."""
    os.write(fd, f"{pgid}\n".encode())


def tagged_groups(watchdog_pid: int) -> set[int]:
    """The process groups of the processes whose environment names ``watchdog_pid``."""
    import psutil

    out: set[int] = set()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(ENV) == str(watchdog_pid):
                out.add(os.getpgid(proc.pid))
        except (psutil.Error, OSError):
            continue
    return out


def watch(fd: int, grace_s: float, sockets: str = "") -> bool:
    """Block until ``fd`` reaches end-of-file, then end the group; True when it had members.

    The group is the one :func:`arm` wrote, else every group of a process that carries this
    watchdog's pid in :data:`ENV`; only members younger than the watchdog are ended. Once no
    group has a member left, ``sockets`` goes (:func:`tuner.runner.leases.remove_sockets_dir`)."""

    from tuner.runner.leases import remove_sockets_dir
    from tuner.runner.procgroup import group_members, kill_group
    from tuner.telemetry import since_boot

    data = b""
    while True:
        try:
            chunk = os.read(fd, 64)  # retried by Python itself when a signal interrupts it
        except OSError:
            break
        if not chunk:
            break
        data = (data + chunk)[-64:]
    line = data.split(b"\n")[0].strip() if b"\n" in data else b""
    pgids = {int(line)} if line.isdigit() else tagged_groups(os.getpid())
    born = since_boot(os.getpid())
    ended = any([kill_group(pgid, grace_s, not_before=born) for pgid in sorted(pgids)])
    if sockets and not any(group_members(pgid) for pgid in pgids):
        remove_sockets_dir(sockets)
    return ended


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        print(
            f"usage: python -m {MODULE} GRACE_S [SOCKETS_DIR] (the group id arrives on stdin)",
            file=sys.stderr,
        )
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(0, float(argv[0]), argv[1] if len(argv) == 2 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
