"""How `tuner run --parallel` ends workers that do not stop after their SIGTERM: it prints their
threads' stacks (which `tuner`'s entry point writes on SIGUSR1), then kills them."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time

import pytest

from tests.studykit import processes_mentioning
from tuner.study import parallel

# A `tuner` process (its real entry point, tuner.cli.app.main) whose command sleeps in a
# function the stacks must name, ignoring SIGTERM unless its seat's GPU is "quick".
_WORKER = textwrap.dedent(
    """
    import os, signal, time
    from tuner.cli import app

    def held_in_a_call_that_never_returns(standalone_mode):
        if os.environ.get("CUDA_VISIBLE_DEVICES") != "quick":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(600)

    app.app = held_in_a_call_that_never_returns
    app.main()
    """
)


def test_workers_still_running_after_their_sigterm_have_their_stacks_printed_then_are_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C to `tuner run --parallel` while its workers run: each gets a SIGTERM; one that
    stops is not spoken of, those that do not are named, their stacks printed, then killed."""
    monkeypatch.setattr(parallel, "STOP_GRACE_S", 1.0)
    said: list[str] = []

    def interrupt_once_ready() -> None:
        deadline = time.monotonic() + 60
        while sum(line.endswith("] ready") for line in said) < 3:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # the parent's Ctrl-C

    threading.Thread(target=interrupt_once_ready, daemon=True).start()
    seats = [parallel.Seat("worker 0"), parallel.Seat("worker 1", "quick"), parallel.Seat("w 2")]
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        parallel.run_workers([sys.executable, "-c", _WORKER], seats, said.append, "sqlite://")
    took = time.monotonic() - started
    notes = [line for line in said if "after its SIGTERM" in line]
    assert notes == [
        f"[{label}] still running 1 s after its SIGTERM: its threads' stacks follow, "
        "then it is killed"
        for label in ("worker 0", "w 2")
    ], said
    for label in ("worker 0", "w 2"):
        mine = "\n".join(line for line in said if line.startswith(f"[{label}]"))
        assert "most recent call first" in mine, said
        assert "held_in_a_call_that_never_returns" in mine, said
    assert processes_mentioning("held_in_a_call_that_never_returns") == []
    assert took < 60, took
