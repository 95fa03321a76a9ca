"""Live progress of a study on the terminal: trial k/N (or confirmation launch k/N), phase,
best so far.

On a terminal a rich status line is redrawn in place; elsewhere (CI logs, pipes) each event is
one plain line, but for a warm-up's per-request counts (its first line only), so logs stay
readable.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from tuner.cli.common import phase_line
from tuner.domain import ServingConfig, TrialResult, TrialStatus
from tuner.study import CONFIRM_NUMBER_BASE
from tuner.study.loop import Defaults, Ranked


class ConsoleReporter:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._status: Status | None = None
        self._head = ""
        self._best = "best: -"
        self._t0 = time.monotonic()
        self._phase = ""  # the last phase reported in this launch

    def trial_started(
        self, number: int, index: int | None, total: int, config: ServingConfig, baseline: Defaults
    ) -> None:
        # Every score is against the baseline; a later trial of the defaults is not it.
        if baseline == "again":
            tag = " (vLLM defaults again)"
        else:
            tag = " (vLLM defaults, the baseline)" if baseline else ""
        # Confirmation launches are numbered apart from the search's trials.
        what = "confirmation launch" if number >= CONFIRM_NUMBER_BASE else "trial"
        if index is None:
            self._head = f"{what} #{number}, no place in the budget{tag}"
        else:
            self._head = f"{what} {index}/{total} #{number}{tag}"
        self._t0 = time.monotonic()
        self._phase = ""
        # What a user typed (a chat template's "[/INST]") is no markup.
        self.console.print(f"[bold]{self._head}[/]: {escape(config.label())}")
        if self.live and self._status is None:
            self._status = self.console.status(self._head)
            self._status.start()

    def phase(self, phase: str, detail: str) -> None:
        elapsed = time.monotonic() - self._t0
        line = escape(f"{self._head} | {phase} {detail} | {elapsed:.0f}s | {self._best}")
        if self._status is not None:
            self._status.update(line)
        elif phase_line(phase, self._phase):
            self.console.print(escape(f"  {phase} {detail}".rstrip()), highlight=False)
        self._phase = phase

    def trial_finished(self, number: int, result: TrialResult, best: Ranked | None) -> None:
        if result.status is TrialStatus.COMPLETE:
            m = result.metrics
            mem = result.memory.headline_bytes
            self.console.print(
                f"  [green]measured[/] {m['output_throughput'].median:.1f} out tok/s "
                f"[{m['output_throughput'].low:.1f}, {m['output_throughput'].high:.1f}], "
                f"P99 TTFT {m['ttft_p99_ms'].median:.0f} ms, "
                f"P99 E2E {m['e2e_p99_ms'].median:.0f} ms, "
                f"memory {(mem or 0) / 1024**3:.2f} GiB"
                + (f", backend {result.server.effective_backend}" if result.server else "")
            )
        else:
            failure = result.failure.value if result.failure else "?"
            self.console.print(
                f"  [red]{result.status.value}[/] ({failure}): {escape(result.failure_detail)}",
                highlight=False,
            )
        if best is not None:
            # A score is against vLLM's defaults: none is shown before they were measured.
            score = (
                f"score {best.score:.3f} (search phase, one launch)"
                if best.relative
                else "no score: no defaults yet that served within the SLO"
            )
            self._best = f"best: #{best.number} {score}"
            self.console.print(escape(f"  {self._best} ({best.config.label()})"), highlight=False)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
