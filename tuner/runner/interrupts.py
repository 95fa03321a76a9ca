"""SIGTERM and SIGHUP as a request to stop, the way Ctrl-C is.

Python's default for SIGTERM and SIGHUP ends the process at once: no ``finally`` block runs, so
a study stopped by ``kill PID`` (systemd, ``docker stop``, a CI timeout) or by its terminal
closing (a dropped SSH session) would leave its running trial's vLLM server to the watchdog,
the trial marked RUNNING and its lease behind. Commands that run trials turn both into
KeyboardInterrupt instead, so the runner ends the server's process group and the study records
the trial as interrupted before the process exits.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# Seconds after a stop was dropped (see sigterm_as_interrupt) before its signal is sent again.
REDELIVER_S = 0.05


def _stop_signals() -> list[signal.Signals]:
    """:data:`STOP_SIGNALS` less one this process was told to ignore: ``nohup tuner run`` (or
    ``trap '' HUP``) means a closed terminal must not stop the study."""
    return [s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM or SIGHUP raises KeyboardInterrupt in the main thread.

    A second one during the clean-up that follows is ignored, so that it cannot cut the
    clean-up short (SIGKILL still ends everything). The previous handlers are restored when the
    block ends. Outside the main thread, where Python cannot handle signals, nothing changes.

    A signal's handler runs wherever the main thread is, and the KeyboardInterrupt it raises
    inside a ``__del__`` or a weakref callback that the garbage collector runs is printed
    ("Exception ignored in") and dropped. A `tuner worker` lost its SIGTERM so inside one of
    SQLAlchemy's, then ignored the next (above), and ran on until killed. Within the block such
    a dropped KeyboardInterrupt (a Ctrl-C's too) is not printed; its signal is sent to the main
    thread again (:data:`REDELIVER_S` later, from another thread: any Python code run before,
    the hook's own included, would drop it again), so that it lands where the code can act. A
    dropped stop whose signal has not landed when the block ends is raised there.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    main = threading.main_thread().ident
    assert main is not None
    pending: list[int] = []  # a dropped stop's signal, sent again, not landed yet
    lock, sending = threading.Lock(), [True]

    def stop(signum: int, _frame: FrameType | None) -> None:
        pending.clear()
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        raise _Stop(signum)

    def resend(signum: int) -> None:
        with lock:
            if sending[0]:  # not once the block has put the handlers back
                signal.pthread_kill(main, signum)

    def dropped(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt) or threading.get_ident() != main:
            hook(unraisable)
            return
        if isinstance(exc, _Stop):
            for s in previous:  # it did not land: the next one is not ignored
                signal.signal(s, stop)
            pending.append(exc.signum)
            again = exc.signum
        else:
            again = signal.SIGINT  # Python's own handler raised it: a Ctrl-C
        timer = threading.Timer(REDELIVER_S, resend, (again,))
        timer.daemon = True
        timer.start()

    previous = {s: signal.signal(s, stop) for s in _stop_signals()}
    hook, sys.unraisablehook = sys.unraisablehook, dropped
    try:
        yield
    finally:
        with lock:
            sending[0] = False
        sys.unraisablehook = hook
        # None: a handler installed outside Python, which cannot be put back; use the default.
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    if pending:
        raise _Stop(pending[-1])


class _Stop(KeyboardInterrupt):
    """The KeyboardInterrupt of a stop signal inside :func:`sigterm_as_interrupt`."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back for the block, then act on them once it has ended.

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
        int(s): signal.signal(s, hold) for s in (signal.SIGINT, *_stop_signals())
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
