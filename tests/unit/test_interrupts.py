"""Signals held back while a server is being taken hold of, and SIGTERM as a stop request
(tuner.runner.interrupts)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time

import pytest

from tuner.runner.interrupts import deferred_interrupts, sigterm_as_interrupt


def test_a_ctrl_c_inside_takes_effect_after_the_block() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler has run by now: it only recorded the signal
        reached.append("end of the block")
    assert reached == ["end of the block"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigterm_inside_goes_to_the_handler_in_place() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        with deferred_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_without_a_signal_nothing_happens() -> None:
    with deferred_interrupts():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class _SignalledWhileCollected:
    """An object whose finalizer, run by the garbage collector, is where the stop signal's
    handler runs: its KeyboardInterrupt is raised inside it, where Python drops it."""

    def __init__(self, signum: int, seen: list[str]) -> None:
        self.signum, self.seen, self.cycle = signum, seen, self  # a cycle: only gc frees it

    def __del__(self) -> None:
        # To this thread (the main one), so that it arrives now; os.kill's signal to the process
        # may be taken by another thread and run the handler after the finalizer.
        self.seen.append("signalled")
        signal.pthread_kill(threading.get_ident(), self.signum)
        for _ in range(10_000):  # the handler runs here, inside __del__
            pass
        self.seen.append("finalizer went on")  # not reached: the interrupt ended it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_dropped_inside_a_finalizer_is_raised_again_after_it(signum: int) -> None:
    """A `tuner worker` lost its SIGTERM inside one of SQLAlchemy's weakref callbacks ("Exception
    ignored in"), ignored the next and ran on until killed: the stop must still land."""
    seen: list[str] = []
    hook = sys.unraisablehook
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        _SignalledWhileCollected(signum, seen)
        gc.collect()  # may outlast the 50 ms in a big heap: the stop then lands in it
        seen.append("collected")
        time.sleep(5)  # the stop lands at once, not after this
        seen.append("slept")
    # Raised inside the finalizer (it went no further), dropped there, raised again after.
    assert seen in (["signalled", "collected"], ["signalled"])
    assert sys.unraisablehook is hook
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_stop_dropped_as_the_block_ends_is_raised_there_and_not_sent_after_it() -> None:
    late: list[int] = []
    outside = signal.signal(signal.SIGTERM, lambda signum, _frame: late.append(signum))
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
            _SignalledWhileCollected(signal.SIGTERM, [])
            gc.collect()  # the block ends at once, before the stop is sent again
        time.sleep(0.2)  # past REDELIVER_S: nothing reaches the handler outside
        assert late == []
    finally:
        signal.signal(signal.SIGTERM, outside)
