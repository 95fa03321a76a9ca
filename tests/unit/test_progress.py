"""The live progress lines: a confirmation launch says so, a search trial is a trial."""

from __future__ import annotations

import io

from rich.console import Console

from tuner.cli.progress import ConsoleReporter
from tuner.domain import ServingConfig, TrialResult, TrialStatus
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


def test_a_draw_that_takes_no_place_in_the_budget_says_so() -> None:
    """A ruled-out first draw was announced "trial 2/5", and so was the next trial."""
    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, width=200))
    reporter.trial_started(1, None, 5, ServingConfig(max_num_seqs=64), False)
    reporter.trial_started(2, 2, 5, ServingConfig(max_num_seqs=8), False)
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("trial #1, no place in the budget: ")
    assert lines[1].startswith("trial 2/5 #2: ")


def test_what_a_user_typed_is_printed_as_typed_not_read_as_markup() -> None:
    """A chat template's "[/INST]" in a searched value crashed the progress line with rich's
    MarkupError after the baseline, and again on every resume; "[red]x" lost its brackets."""
    from tuner.domain import FailureClass

    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, width=300))
    config = ServingConfig(extra={"chat_template": "[INST] {q} [/INST] [red]x"})
    reporter.trial_started(1, 2, 5, config, False)
    reporter.phase("starting", "server log: [/bold] ready")
    failed = TrialResult(config, TrialStatus.FAILED, failure=FailureClass.UNSUPPORTED,
                         failure_detail="vLLM said: [/INST] is no token")  # fmt: skip
    reporter.trial_finished(1, failed, None)
    text = buffer.getvalue()
    assert "chat_template=[INST] {q} [/INST] [red]x" in text
    assert "server log: [/bold] ready" in text and "vLLM said: [/INST] is no token" in text


def test_only_the_baseline_is_called_so_a_later_trial_of_the_defaults_measures_them_again() -> None:
    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, width=200))
    reporter.trial_started(0, 1, 5, ServingConfig(), True)
    reporter.trial_started(4, 5, 5, ServingConfig(), "again")
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("trial 1/5 #0 (vLLM defaults, the baseline): ")
    assert lines[1].startswith("trial 5/5 #4 (vLLM defaults again): ")
    assert "baseline" not in lines[1]


def test_a_log_gets_a_line_per_phase_and_per_window_not_per_warm_up_request() -> None:
    buffer = io.StringIO()
    reporter = ConsoleReporter(Console(file=buffer, width=200))  # not a terminal: plain lines
    for _ in range(2):  # a second launch starts its phases afresh
        reporter.trial_started(1, 2, 5, ServingConfig(max_num_seqs=8), False)
        reporter.phase("starting", "port 8000")
        for done in range(9):
            reporter.phase("warming up", f"{done}/8 requests")
        for window in (1, 2, 3):
            reporter.phase("measuring", f"window {window}/3")
        reporter.phase("stopping", "")
    lines = [line.strip() for line in buffer.getvalue().splitlines()]
    assert lines[1:7] == [
        "starting port 8000",
        "warming up 0/8 requests",
        "measuring window 1/3",
        "measuring window 2/3",
        "measuring window 3/3",
        "stopping",
    ]
    assert lines[8:] == lines[1:7]
    # Other phases that repeat with new details are each worth their line.
    buffer.truncate(0)
    buffer.seek(0)
    for phase, detail in [("prediction", "a"), ("prediction", "b"), ("waiting", "4")] * 2:
        reporter.phase(phase, detail)
    assert len(buffer.getvalue().splitlines()) == 6
