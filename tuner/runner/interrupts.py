"""SIGTERM as a request to stop, the way Ctrl-C is.

Python's default for SIGTERM ends the process at once: no ``finally`` block runs, so a study
stopped by ``kill PID`` (systemd, ``docker stop``, a CI timeout) would leave its running trial's
vLLM server behind (until the next run reaps it) and the trial marked RUNNING. Commands that run
trials turn SIGTERM into KeyboardInterrupt instead, so the runner ends the server's process group
and the study records the trial as interrupted before the process exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread.

    A second SIGTERM during the clean-up that follows is ignored, so that it cannot cut the
    clean-up short (SIGKILL still ends everything). The previous handler is restored when the
    block ends. Outside the main thread, where Python cannot handle signals, nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        # None: a handler installed outside Python, which cannot be put back; use the default.
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for the block, then act on them once it has ended.

    For a few lines that must not be cut in the middle: starting a server and taking hold of it
    (a Ctrl-C between the fork and ``Popen`` returning would leave a server no one owns). A
    signal that arrives inside is recorded and, after the block, handed to the handler that was
    in place (so Ctrl-C still raises KeyboardInterrupt, right after the block). Only the main
    thread can handle signals; elsewhere nothing changes. Handlers set here are Python
    functions, which a child process does not inherit (exec resets them).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append((signum, frame))

    previous: dict[int, Any] = {
        int(s): signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        for signum, frame in caught[:1]:  # one stop request is enough
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)
