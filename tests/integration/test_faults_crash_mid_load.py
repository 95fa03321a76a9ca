"""A server that dies during the measurement, seen through a whole study (the runner contract
tests cover the runner alone): the trial is recorded failed/crashed with no metrics, Optuna is
told FAIL (a fault, not a finding), the trial is left out of the ranking, and the study goes on
to finish with the trials after it measured normally."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import optuna
import psutil

from tests.studykit import fake_server_runner, make_context, make_repo
from tuner.domain import FailureClass, ServingConfig, Slo, TrialResult, TrialStatus, Workload
from tuner.runner.vllm import PhaseCallback, VllmTrialRunner
from tuner.study.loop import rank, run_study
from tuner.study.sampling import open_optuna_study

CRASH_AT_LAUNCH = 2  # the trial after the baseline
# The fake SIGKILLs itself when request 7 arrives: after the 2 warm-up requests, so in the
# first measurement window.
CRASH_AFTER_REQUESTS = "6"


class OneServerCrashes:
    """The real runner on the fake server; launch number ``crash_at`` gets a server that dies
    under load (``TUNER_FAKE_FAULT=crash_mid_load``), every other launch a healthy one."""

    def __init__(self, tmp_path: Path, crash_at: int, tag: str) -> None:
        env = {"TUNER_TEST_TAG": tag}
        self.healthy: VllmTrialRunner = fake_server_runner(tmp_path, env=env)
        self.crashing: VllmTrialRunner = fake_server_runner(
            tmp_path,
            env={
                **env,
                "TUNER_FAKE_FAULT": "crash_mid_load",
                "TUNER_FAKE_CRASH_AFTER": CRASH_AFTER_REQUESTS,
            },
        )
        self.crash_at = crash_at
        self.launches = 0
        self.phases: list[list[str]] = []

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Slo | None = None,
        on_phase: PhaseCallback | None = None,
        **kw: Any,
    ) -> TrialResult:
        self.launches += 1
        runner = self.crashing if self.launches == self.crash_at else self.healthy
        seen: list[str] = []
        self.phases.append(seen)
        return runner.run(config, workload, slo=slo, on_phase=lambda p, _d: seen.append(p), **kw)


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and (
                proc.environ().get("TUNER_TEST_TAG") == tag
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_server_crash_mid_measurement_fails_one_trial_and_the_study_goes_on(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'study.db'}"
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=4,
        params=("max_num_seqs",),
        choices={"max_num_seqs": (4, 16, 64)},
        # Four trials, four launches: a configuration drawn again would not be launched again.
        enqueue=[{"max_num_seqs": n} for n in (4, 16, 64)],
    )
    tag = uuid.uuid4().hex
    runner = OneServerCrashes(tmp_path, CRASH_AT_LAUNCH, tag)
    ranked = run_study(ctx, runner, repo)

    rows = {r.number: r for r in repo.list_trials(ctx.name, limit=None)}
    crashed = rows[CRASH_AT_LAUNCH - 1]
    assert "measuring" in runner.phases[CRASH_AT_LAUNCH - 1], "it must die mid-measurement"
    assert crashed.status is TrialStatus.FAILED
    assert crashed.failure is FailureClass.CRASHED, crashed.failure_detail
    # The words depend on who saw it first (the load generator or the runner); the class not.
    assert crashed.failure_detail
    assert crashed.log_tail.strip(), "a crash keeps the server's log tail"
    # Whatever windows it measured before dying are not presented as a result.
    assert not crashed.metrics and not crashed.windows
    assert crashed.objective_values is None and crashed.score is None

    others = [r for n, r in rows.items() if n != crashed.number]
    assert len(rows) == 4 and all(r.status is TrialStatus.COMPLETE for r in others)
    study = repo.get_study(ctx.name)
    assert study is not None and study.status == "finished"
    assert crashed.number not in {r.number for r in ranked}
    assert {r.number for r in ranked} == {r.number for r in others}
    assert ranked == rank(repo, ctx.name, ctx.spec.objective)

    frozen = {t.number: t for t in open_optuna_study(ctx, create=False).get_trials()}
    assert frozen[crashed.number].state is optuna.trial.TrialState.FAIL
    assert frozen[crashed.number].user_attrs["failure_class"] == "crashed"
    assert _tagged(tag) == [], "the crashed server's engine-core child must be ended too"
    print(
        "RELIABILITY "
        + json.dumps(
            {
                "test": "crash_mid_load_study",
                "faults_injected": 1,
                "survived": 1,
                "completed_lost": 0,
                "orphans_left": len(_tagged(tag)),
            }
        )
    )
