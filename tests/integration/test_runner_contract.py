"""The runner contract, for the in-process fake runner and for the real runner driving the fake
server as a real process (ports, process groups, signals, logs). The e2e suite runs the same
checks against real vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.studykit import (
    TINY_WORKLOAD,
    fake_server_runner,
    make_context,
    make_repo,
    processes_mentioning,
)
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.study.loop import run_study
from tuner.testing.contract import check_complete, check_failed, check_stopped_early
from tuner.testing.fake_runner import FakeRunner


def test_fake_runner_passes_the_contract() -> None:
    runner = FakeRunner(max_utilization=0.9)
    check_complete(runner.run(ServingConfig(), TINY_WORKLOAD))
    check_failed(
        runner.run(ServingConfig(gpu_memory_utilization=0.95), TINY_WORKLOAD),
        FailureClass.MEMORY_EXCEEDED,
    )


@pytest.mark.parametrize("real", [False, True], ids=["fake-runner", "real-runner-fake-server"])
def test_a_first_point_check_stops_the_measurement_there(tmp_path: Path, real: bool) -> None:
    runner = fake_server_runner(tmp_path) if real else FakeRunner()
    seen: list[int] = []

    def stop(windows: tuple[object, ...]) -> str:
        seen.append(len(windows))
        return "worse than the best so far"

    result = runner.run(ServingConfig(), TINY_WORKLOAD, first_point=stop)
    check_stopped_early(result, seen, first=1)
    kept: list[int] = []
    whole = runner.run(ServingConfig(), TINY_WORKLOAD, first_point=lambda w: kept.append(len(w)))
    check_complete(whole)
    assert kept == [1], "the check is asked once, after the first window of a one-point workload"
    if real:
        assert processes_mentioning(str(tmp_path)) == []


def test_real_runner_on_fake_server_measures_and_leaves_nothing(tmp_path: Path) -> None:
    runner = fake_server_runner(tmp_path)
    phases: list[str] = []
    result = runner.run(
        ServingConfig(max_num_seqs=64), TINY_WORKLOAD, on_phase=lambda p, _d: phases.append(p)
    )
    check_complete(result)
    assert result.server is not None
    assert "--max-num-seqs" in result.server.argv
    assert result.server.kv_cache_tokens and result.server.kv_cache_tokens > 0
    assert result.server.startup_s is not None and result.server.startup_s > 0
    assert result.memory.host_peak_rss_bytes and result.memory.host_peak_rss_bytes > 10 * 2**20
    assert result.server_metrics.get("generation_tokens", 0) > 0
    assert phases[0] == "starting" and "measuring" in phases and "warming up" in phases
    assert processes_mentioning(str(tmp_path)) == []
    assert not list((tmp_path / "leases").glob("*"))


def test_config_that_cannot_start_is_a_finding_with_log_tail(tmp_path: Path) -> None:
    # The fake, like vLLM on CPU, refuses utilization above what is free (0.95 for the fake).
    result = fake_server_runner(tmp_path).run(
        ServingConfig(gpu_memory_utilization=0.97), TINY_WORKLOAD
    )
    check_failed(result, FailureClass.MEMORY_EXCEEDED)
    assert "memory" in result.failure_detail.lower()
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("hang", FailureClass.TIMEOUT),
        ("crash_at_start", FailureClass.START_FAILED),
        ("crash_mid_load", FailureClass.CRASHED),
        ("stranger", FailureClass.STRANGER),
    ],
)
def test_faults_become_failed_trials_and_no_process_survives(
    tmp_path: Path, fault: str, expected: FailureClass
) -> None:
    runner = fake_server_runner(
        tmp_path,
        env={"TUNER_FAKE_FAULT": fault, "TUNER_FAKE_CRASH_AFTER": "4"},
        # The hang is cut short; the others fail on their own, however loaded the machine is.
        startup_timeout_s=3.0 if fault == "hang" else 30.0,
    )
    result = runner.run(ServingConfig(), TINY_WORKLOAD)
    check_failed(result, expected)
    assert processes_mentioning(str(tmp_path)) == []


def test_study_over_fake_server_goes_on_after_a_failed_start(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'study.db'}"
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=3,
        enqueue=[{"gpu_memory_utilization": 0.97}],
        choices={"gpu_memory_utilization": (0.5, 0.97), "max_num_seqs": (4, 64)},
    )
    run_study(ctx, fake_server_runner(tmp_path), repo)
    rows = repo.list_trials(ctx.name, limit=None)
    assert [r.number for r in rows] == [0, 1, 2]
    assert rows[0].status is TrialStatus.COMPLETE and rows[0].effective_backend
    assert rows[1].status is TrialStatus.FAILED
    assert rows[1].failure is FailureClass.MEMORY_EXCEEDED and rows[1].log_tail
    assert rows[2].status in (TrialStatus.COMPLETE, TrialStatus.PRUNED)
    assert rows[0].vllm_version == "0.32.0" and rows[0].gpu_name == "test host"
    assert processes_mentioning(str(tmp_path)) == []


def test_a_log_directory_that_cannot_be_made_is_an_environment_problem(tmp_path: Path) -> None:
    """The runner made the log directory itself before the server's start, outside the error
    handling the start has: a file in its place (or a read-only working directory) ended the
    study with a traceback, its trial recorded as interrupted."""
    import dataclasses

    from tuner.errors import EnvironmentProblem

    (tmp_path / "taken").write_text("a file where the logs would go\n")
    runner = fake_server_runner(tmp_path)
    runner.settings = dataclasses.replace(runner.settings, log_dir=tmp_path / "taken" / "logs")
    with pytest.raises(EnvironmentProblem, match="cannot write the server log") as raised:
        runner.run(ServingConfig(), TINY_WORKLOAD)
    assert raised.value.hint
    assert processes_mentioning(str(tmp_path)) == []
