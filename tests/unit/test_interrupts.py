"""Signals held back while a server is being taken hold of (tuner.runner.interrupts)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tuner.runner.interrupts import deferred_interrupts


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
