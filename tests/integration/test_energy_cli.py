"""`tuner trials` and `tuner best` show the measured GPU energy beside the throughput, and a
trial measured on a CPU (no energy) says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from typer.testing import CliRunner

from tests.integration.test_launch_cli import insert_measured_study
from tuner.cli.app import app
from tuner.domain import ServingConfig
from tuner.load.curve import trial_metrics
from tuner.load.workloads import get_workload


def _invoke(*args: str) -> str:
    run = CliRunner().invoke(app, list(args))
    assert run.exit_code == 0, run.output
    return run.stdout


def test_trials_and_best_show_energy_and_say_when_a_cpu_has_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'energy.db'}"
    repo = insert_measured_study(url, [ServingConfig(), ServingConfig(max_num_seqs=64)])
    trial = repo.get_trial("measured", 1)
    assert trial is not None and "joules_per_output_token" in trial.metrics
    per_token = trial.metrics["joules_per_output_token"]
    table = _invoke("trials", "measured", "--storage", url)
    assert "J/out tok" in table and f"{per_token.median:.3g}" in table
    best = _invoke("best", "measured", "--storage", url)
    assert "J/out token:" in best and "GPU watts:" in best

    # The same trial as a CPU records it: windows without energy, so no energy metrics.
    cpu = trial.to_result()
    windows = tuple(dataclasses.replace(w, energy=None) for w in cpu.windows)
    shape = get_workload("smoke").replace(requests_per_window=8, windows=3)
    cpu = dataclasses.replace(cpu, windows=windows, metrics=trial_metrics(shape, windows, None))
    trial_id = repo.start_trial("measured", 2, ServingConfig(max_num_seqs=32))
    repo.finish_trial(trial_id, cpu, 1.0, trial.objective_values)
    table = _invoke("trials", "measured", "--storage", url)
    assert "energy: not measured on CPU" in table
