"""The database the dashboard tests browse: a real study through the fake server, an A/B
comparison as ``tuner.abtest.compare`` records it, a hostile study whose every free-text field is
an XSS payload, a study whose trials measured a 3-point load curve (one of them with a
client-bound window), and an old-style study whose windows carry no load point."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.studykit import TINY_WORKLOAD, fake_server_runner, make_context, make_repo
from tuner.abtest.compare import Arm, compare
from tuner.db.repository import Repository
from tuner.domain import (
    ClientHealth,
    FailureClass,
    ServingConfig,
    Slo,
    TrialResult,
    TrialStatus,
    Workload,
)
from tuner.load.curve import trial_metrics
from tuner.runner.vllm import PhaseCallback
from tuner.scoring import objectives as scoring
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

STUDY = "chat-h100"
SCRIPT_PAYLOAD = "<script>window.__xss=1</script>"
IMG_PAYLOAD = '<img src=x onerror="window.__xss=2">'
XSS_STUDY = f"{SCRIPT_PAYLOAD}{IMG_PAYLOAD}"
XSS_NOTES = f"notes {IMG_PAYLOAD} & {SCRIPT_PAYLOAD}"


@dataclass(frozen=True)
class DashboardDb:
    url: str
    repo: Repository
    comparison_id: int
    xss_comparison_id: int
    long_comparison_id: int


def build(tmp: Path) -> DashboardDb:
    url = f"sqlite:///{tmp / 'dashboards.db'}"
    repo = make_repo(url)
    ctx = make_context(
        url,
        name=STUDY,
        trials=4,
        # 0.97 does not fit on the fake server: one FAILED trial with a finding and a log tail.
        enqueue=[{"gpu_memory_utilization": 0.97}, {"max_num_seqs": 4}],
        choices={"gpu_memory_utilization": (0.5, 0.9, 0.97), "max_num_seqs": (4, 16, 64)},
    )
    run_study(ctx, fake_server_runner(tmp), repo)
    curve_study(repo, url)
    old_study(repo)
    return DashboardDb(
        url=url,
        repo=repo,
        comparison_id=_comparison(repo, STUDY, "defaults", "max_num_seqs=16"),
        xss_comparison_id=_xss_study(repo),
        long_comparison_id=_comparison(repo, None, LONG_LABEL, LONG_LABEL + ",max_num_seqs=16"),
    )


# An arm label as long as a real claim's (several flags, no spaces to break at).
LONG_LABEL = "attention_backend=FLASH_ATTN,flash_attn_version=2,max_model_len=16896"


def _comparison(repo: Repository, study: str | None, a_label: str, b_label: str) -> int:
    """A/B of the defaults and max_num_seqs=16 over three in-process launches each."""
    a = Arm(a_label, ServingConfig())
    b = Arm(b_label, ServingConfig(max_num_seqs=16))
    runs = [[FakeRunner(seed=i).run(arm.config, TINY_WORKLOAD) for i in range(3)] for arm in (a, b)]
    c = compare(a, runs[0], b, runs[1])
    prov = runs[0][0].provenance
    row = repo.add_comparison(
        model="tiny-ernie",
        gpu=prov.gpu_name if prov else "",
        workload=TINY_WORKLOAD.name,
        a_config=a.config,
        b_config=b.config,
        repeats=3,
        results=c.to_results(),
        verdicts=c.to_verdicts(),
        provenance=prov,
        study_name=study,
    )
    return row.id


def _xss_study(repo: Repository) -> int:
    """A study and a comparison whose free text (name, notes, failure detail, log tail, arm
    labels) is hostile markup; returns the comparison's id."""
    repo.create_study(
        name=XSS_STUDY,
        optuna_study_name=XSS_STUDY,  # no Optuna study of this name: importances fall back
        model="tiny-ernie",
        model_source=None,
        gpu="h100",
        workload=TINY_WORKLOAD.name,
        objective="balanced",
        slo={},
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        n_trials_requested=3,
        notes=XSS_NOTES,
    )
    runner = FakeRunner()
    configs = (ServingConfig(), ServingConfig(max_num_seqs=16))
    for number, config in enumerate(configs):
        result = runner.run(config, TINY_WORKLOAD)
        trial_id = repo.start_trial(XSS_STUDY, number, config, is_baseline=number == 0)
        values = scoring.objective_values(result, memory_ceiling_gib=80.0)
        repo.finish_trial(trial_id, result, 1.0, values)
    failed = TrialResult(
        config=ServingConfig(max_num_seqs=64),
        status=TrialStatus.FAILED,
        failure=FailureClass.START_FAILED,
        failure_detail=f"detail {SCRIPT_PAYLOAD}",
        log_tail=f"log {IMG_PAYLOAD}\nTraceback </pre>{SCRIPT_PAYLOAD}",
    )
    trial_id = repo.start_trial(XSS_STUDY, 2, failed.config)
    repo.finish_trial(trial_id, failed, None, None)
    return _comparison(repo, XSS_STUDY, SCRIPT_PAYLOAD, IMG_PAYLOAD)


# -- load curves -----------------------------------------------------------------------------

CURVE_STUDY = "chat-h100-curve"
CURVE_LADDER = (2, 4, 8)
CURVE_WORKLOAD = TINY_WORKLOAD.replace(concurrency_ladder=CURVE_LADDER)
CURVE_SLO = "ttft_p99=40ms,e2e_p99=60ms"
# Baseline, then these. On the fake runner more streams than max_num_seqs queue (throughput
# falls, TTFT grows: max_num_seqs=2 misses the SLO at 8 streams), and enforce_eager=True is
# slower per token. Its 8-stream point is client-bound, so its capacity is read at 4 streams.
CURVE_CONFIGS = ({"max_num_seqs": 4}, {"enforce_eager": True}, {"max_num_seqs": 2})
CLIENT_BOUND_CONFIG = ServingConfig(enforce_eager=True)
CLIENT_BOUND_NOTE = "client used 97% of a core (saturated at 90%)"


class SaturatingClientRunner:
    """A FakeRunner whose load generator saturates in the last window of
    :data:`CLIENT_BOUND_CONFIG`'s highest load point, as tuner's self-check would record it."""

    def __init__(self) -> None:
        self.inner = FakeRunner()

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Slo | None = None,
        on_phase: PhaseCallback | None = None,
        **kw: Any,
    ) -> TrialResult:
        result = self.inner.run(config, workload, slo=slo, on_phase=on_phase, **kw)
        if config != CLIENT_BOUND_CONFIG or result.status is not TrialStatus.COMPLETE:
            return result
        health = ClientHealth(
            client_cpu=0.97,
            loop_lag_p99_ms=42.0,
            loop_lag_max_ms=80.0,
            host_cpu=1.9,
            host_cores=2,
            client_bound=True,
            notes=(CLIENT_BOUND_NOTE,),
        )
        windows = list(result.windows)
        windows[-1] = dataclasses.replace(windows[-1], client=health)
        return dataclasses.replace(
            result, windows=tuple(windows), metrics=trial_metrics(workload, windows, slo)
        )


def curve_study(repo: Repository, url: str) -> None:
    """:data:`CURVE_STUDY`: the capacity objective over a 2/4/8-stream ladder, four trials."""
    ctx = make_context(
        url,
        name=CURVE_STUDY,
        trials=1 + len(CURVE_CONFIGS),
        workload=CURVE_WORKLOAD,
        objective="capacity",
        slo=CURVE_SLO,
        params=("max_num_seqs", "enforce_eager"),
        choices={"max_num_seqs": (2, 4, 64), "enforce_eager": (False, True)},
        enqueue=CURVE_CONFIGS,
    )
    run_study(ctx, SaturatingClientRunner(), repo)


OLD_STUDY = "chat-h100-old"


def old_study(repo: Repository) -> None:
    """:data:`OLD_STUDY`: two trials stored as before load curves, one untagged load point and
    no client self-check per window."""
    repo.create_study(
        name=OLD_STUDY,
        optuna_study_name=OLD_STUDY,
        model="tiny-ernie",
        model_source=None,
        gpu="h100",
        workload=TINY_WORKLOAD.name,
        objective="balanced",
        slo={"e2e_p99_ms": 60.0},
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        n_trials_requested=2,
    )
    runner = FakeRunner()
    for number, config in enumerate((ServingConfig(), ServingConfig(max_num_seqs=16))):
        result = runner.run(config, TINY_WORKLOAD)
        untagged = tuple(
            dataclasses.replace(w, concurrency=None, request_rate=None, client=None)
            for w in result.windows
        )
        result = dataclasses.replace(result, windows=untagged)
        trial_id = repo.start_trial(OLD_STUDY, number, config, is_baseline=number == 0)
        values = scoring.objective_values(result, memory_ceiling_gib=80.0)
        repo.finish_trial(trial_id, result, 1.0, values)


NO_DEFAULTS_STUDY = "chat-h100-no-defaults"


def no_defaults_study(repo: Repository) -> None:
    """:data:`NO_DEFAULTS_STUDY`: its defaults' trial failed to start, then two measured trials
    (rows as the study loop stores them, without Optuna: nothing here runs an event loop)."""
    repo.create_study(
        name=NO_DEFAULTS_STUDY,
        optuna_study_name=NO_DEFAULTS_STUDY,
        model="tiny-ernie",
        model_source=None,
        gpu="h100",
        workload=TINY_WORKLOAD.name,
        objective="balanced",
        slo={},
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        n_trials_requested=3,
    )
    failed = TrialResult(
        ServingConfig(),
        TrialStatus.FAILED,
        failure=FailureClass.START_FAILED,
        failure_detail="the server exited during start-up",
    )
    trial_id = repo.start_trial(NO_DEFAULTS_STUDY, 0, failed.config, is_baseline=True)
    repo.finish_trial(trial_id, failed, None, None)
    runner = FakeRunner()
    for number, config in enumerate(
        (ServingConfig(max_num_seqs=4), ServingConfig(max_num_seqs=16)), 1
    ):
        result = runner.run(config, TINY_WORKLOAD)
        trial_id = repo.start_trial(NO_DEFAULTS_STUDY, number, config)
        values = scoring.objective_values(result, memory_ceiling_gib=80.0)
        repo.finish_trial(trial_id, result, None, values)
