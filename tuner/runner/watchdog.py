"""A server's watchdog: a small process that ends the server's group when its tuner dies.

Leases (:mod:`tuner.runner.leases`) let the *next* tuner end a server that an earlier one left
behind; the watchdog makes sure there is rarely anything to leave. For each server tuner
starts ``python -m tuner.runner.watchdog PGID CREATE_TIME GRACE_S`` in a session of its own with
the read end of a pipe as its stdin, and keeps the write end. The watchdog blocks reading it.
The kernel closes the write end whenever the tuner ends, however it ends (``kill -9``
included), so the read returns end-of-file; the watchdog then ends the group (TERM, grace,
KILL), unless it is already empty, and exits. A tuner that stops its server itself ends the
group first and then closes the pipe, so the watchdog finds nothing to do.

Only the standard library and :mod:`tuner.runner.procgroup` are imported, so the watchdog
starts in a few tens of milliseconds; it ignores SIGINT and SIGHUP (a Ctrl-C or a closed
terminal reaches the tuner, which stops the server itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

MODULE = "tuner.runner.watchdog"


def spawn(pgid: int, create_time: float, grace_s: float) -> tuple[subprocess.Popen[bytes], int]:
    """Start the watchdog of group ``pgid``; returns it and the pipe's write end to hold.

    Closing the returned descriptor (or the end of this process) lets the watchdog act.
    """
    read_end, write_end = os.pipe()  # both not inheritable: no other child holds them
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(pgid), repr(create_time), repr(grace_s)],
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


def watch(fd: int, pgid: int, create_time: float, grace_s: float) -> bool:
    """Block until ``fd`` reaches end-of-file, then end the group; True when it had members."""
    from tuner.runner.procgroup import kill_group

    while True:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
    return kill_group(pgid, grace_s, not_before=create_time)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3:
        print(f"usage: python -m {MODULE} PGID CREATE_TIME GRACE_S", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(0, int(argv[0]), float(argv[1]), float(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
