"""The live progress lines: a confirmation launch says so, a search trial is a trial."""

from __future__ import annotations

import io

from rich.console import Console

from tuner.cli.progress import ConsoleReporter
from tuner.domain import ServingConfig
from tuner.study.confirm import CONFIRM_NUMBER_BASE


def test_confirmation_launches_are_named_so() -> None:
    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, width=200))
    reporter.trial_started(3, 2, 5, ServingConfig(max_num_seqs=8), False)
    reporter.trial_started(CONFIRM_NUMBER_BASE, 1, 4, ServingConfig(), True)
    reporter.trial_started(CONFIRM_NUMBER_BASE + 1, 2, 4, ServingConfig(max_num_seqs=8), False)
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("trial 2/5 #3: ")
    assert lines[1].startswith("confirmation launch 1/4 #100000 (vLLM defaults, the baseline)")
    assert lines[2].startswith("confirmation launch 2/4 #100001: ")
