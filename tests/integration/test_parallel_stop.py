"""How `tuner run --parallel` ends a worker that does not stop after its SIGTERM: it prints the
worker's threads' stacks (which `tuner`'s entry point writes on SIGUSR1), then kills it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tuner.study import parallel

# A `tuner` process (its real entry point, tuner.cli.app.main) whose command ignores SIGTERM and
# sleeps in a function the stacks must name.
_STUCK = textwrap.dedent(
    """
    import signal, time
    from tuner.cli import app

    def held_in_a_call_that_never_returns(standalone_mode):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(600)

    app.app = held_in_a_call_that_never_returns
    app.main()
    """
)
_QUICK = "import time; print('ready', flush=True); time.sleep(600)"


def _start(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_worker_still_running_after_its_sigterm_has_its_stacks_printed_then_is_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parallel, "STOP_GRACE_S", 1.0)
    stuck, quick = _start(_STUCK), _start(_QUICK)
    seats = [parallel.Seat("worker 0"), parallel.Seat("worker 1")]
    said: list[str] = []
    lines: list[str] = []
    pump = threading.Thread(target=lambda: lines.extend(stuck.stdout or ()), daemon=True)
    pump.start()
    try:
        for proc in (stuck, quick):
            proc.terminate()
        started = time.monotonic()
        parallel._stop([stuck, quick], seats, said.append)
        took = time.monotonic() - started
    finally:
        for proc in (stuck, quick):
            proc.kill()
            proc.wait()
        pump.join(timeout=10)
        for proc in (stuck, quick):
            if proc.stdout is not None:
                proc.stdout.close()
    assert quick.returncode == -15  # stopped by its SIGTERM: nothing said of it
    assert stuck.returncode == -9
    assert said == [
        "[worker 0] still running 1 s after its SIGTERM: its threads' stacks follow, "
        "then it is killed"
    ]
    stacks = "".join(lines)
    assert "most recent call first" in stacks, stacks
    assert "held_in_a_call_that_never_returns" in stacks, stacks
    assert took < 1.0 + parallel._STACKS_S + 5, took
