"""`tuner trials` says which trials had client-bound or disturbed windows: a "flags" column
in the table and a "flags" object per trial in --json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from tests.studykit import make_repo
from tuner.cli.app import app
from tuner.domain import (
    ClientHealth,
    LatencyStats,
    ServingConfig,
    TrialResult,
    TrialStatus,
    WindowMetrics,
)
from tuner.load.stats import summarize

LAT = LatencyStats(count=8, mean=10.0, p50=9.0, p90=12.0, p99=15.0, max=16.0)
WINDOW = WindowMetrics(
    duration_s=1.0,
    requests_ok=8,
    requests_failed=0,
    prompt_tokens=256,
    output_tokens=64,
    request_throughput=8.0,
    output_throughput=64.0,
    total_throughput=320.0,
    ttft_ms=LAT,
    itl_ms=LAT,
    e2e_ms=LAT,
)


def _health(bound: bool, disturbed: bool) -> ClientHealth:
    return ClientHealth(0.95, 1.0, 2.0, 1.0, 2, client_bound=bound, disturbed=disturbed)


def _result(*flags: tuple[bool, bool]) -> TrialResult:
    windows = tuple(dataclasses.replace(WINDOW, client=_health(b, d)) for b, d in flags)
    return TrialResult(
        config=ServingConfig(), status=TrialStatus.COMPLETE, windows=windows,
        metrics=summarize(windows),
    )  # fmt: skip


def test_trials_lists_client_bound_and_disturbed_windows(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    repo = make_repo(url)
    repo.create_study(
        name="s", optuna_study_name="s", model="tiny-ernie", model_source=None, gpu="cpu",
        workload="smoke", objective="balanced", slo={}, spec={}, emulated=False,
        vllm_version="0.32.0", n_trials_requested=2,
    )  # fmt: skip
    quiet = _result((False, False), (False, False), (False, False))
    busy = _result((True, False), (True, True), (False, True))
    for number, result in enumerate((quiet, busy)):
        trial = repo.start_trial("s", number, ServingConfig(), is_baseline=number == 0)
        repo.finish_trial(trial, result, 1.0, (64.0, 1.0, 15.0))

    run = CliRunner().invoke(app, ["trials", "s", "--json", "--storage", url])
    assert run.exit_code == 0, run.output
    records = json.loads(run.stdout)
    assert [r["flags"] for r in records] == [
        {"windows": 3, "client_bound": 0, "disturbed": 0},
        {"windows": 3, "client_bound": 2, "disturbed": 2},
    ]
    assert records[1]["windows"][0]["client"]["client_bound"] is True  # the raw record stays

    run = CliRunner().invoke(app, ["trials", "s", "--storage", url])
    assert run.exit_code == 0, run.output
    table = run.stdout  # not a terminal: never wrapped
    assert "flags" in table.splitlines()[1]
    row = next(line for line in table.splitlines() if line.lstrip("│ ").startswith("1 "))
    assert "2/3 client-bound, 2/3 disturbed" in row
