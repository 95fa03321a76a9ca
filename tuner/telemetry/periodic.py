"""The background-thread loop shared by tuner's samplers (host RSS, GPU memory, /metrics).

A subclass implements :meth:`Periodic._tick` (one sample; it must never raise) and may hook
:meth:`Periodic._before_start` (acquire what sampling needs; may raise, before any thread runs)
and :meth:`Periodic._after_stop` (release it). ``start()`` ticks once at once and ``stop()`` ticks
a last time after joining, so a short phase still gets a first and a last sample.
"""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    thread_name = "tuner-sampler"

    def __init__(self, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # for what a tick records and a reader takes

    def _tick(self) -> None:
        raise NotImplementedError

    def _before_start(self) -> None:
        """Acquire what sampling needs (runs in the caller's thread; may raise)."""

    def _after_stop(self) -> None:
        """Release what :meth:`_before_start` acquired."""

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._tick()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__}.start() called twice")
        self._before_start()
        self._stop.clear()
        self._tick()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (one last tick first); idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._tick()
        self._after_stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
