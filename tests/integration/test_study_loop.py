"""The study loop over the in-process fake runner: baseline first, findings recorded and told to
the sampler as infeasible, dominated configs never launched, interruption and resume."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.studykit import TINY_WORKLOAD, make_context, make_repo
from tuner.compose import StudyContext
from tuner.db import Repository
from tuner.domain import FailureClass, ServingConfig, TrialStatus
from tuner.errors import UsageError
from tuner.study.loop import rank, run_study
from tuner.study.sampling import open_optuna_study
from tuner.testing.contract import check_complete, check_failed
from tuner.testing.fake_runner import FakeRunner


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_baseline_first_findings_recorded_and_dominated_configs_never_launched(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = make_context(db_url, trials=10, enqueue=[{"gpu_memory_utilization": 0.95}])
    runner = FakeRunner(max_utilization=0.9)
    ranked = run_study(ctx, runner, repo)

    rows = repo.list_trials(ctx.name, limit=None)
    assert len(rows) == 10
    assert rows[0].number == 0 and rows[0].is_baseline
    assert rows[0].config == ctx.space.baseline() == ServingConfig()
    assert runner.calls[0] == ServingConfig()
    assert rows[0].status is TrialStatus.COMPLETE
    assert rows[0].score == pytest.approx(1.0), "the baseline is its own reference"
    check_complete(rows[0].to_result())

    # The enqueued config does not fit: a finding, with its class and the log tail.
    enqueued = rows[1]
    assert enqueued.config.gpu_memory_utilization == 0.95
    assert enqueued.status is TrialStatus.FAILED
    assert enqueued.failure is FailureClass.MEMORY_EXCEEDED
    check_failed(enqueued.to_result(), FailureClass.MEMORY_EXCEEDED)

    # Anything at least as demanding is ruled out without a launch.
    launched_095 = [c for c in runner.calls if c.gpu_memory_utilization == 0.95]
    assert len(launched_095) == 1
    for row in rows[2:]:
        if row.config.gpu_memory_utilization == 0.95:
            assert row.status is TrialStatus.PRUNED
            assert row.failure is FailureClass.DOMINATED

    # Optuna was told: the finding is a complete trial with violated constraints.
    study = open_optuna_study(ctx, create=False)
    frozen = {t.number: t for t in study.get_trials()}
    assert frozen[1].state is optuna.trial.TrialState.COMPLETE
    assert any(v > 0 for v in frozen[1].constraints.values())
    assert all(v <= 0 for v in frozen[0].constraints.values())
    assert frozen[1].user_attrs["failure_class"] == "memory_exceeded"
    assert len(frozen) == 10

    # Ranking: measured trials only, best score first, baseline score exactly 1.
    assert ranked and all(r.number != 1 for r in ranked)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    assert next(r for r in ranked if r.is_baseline).score == pytest.approx(1.0)
    assert repo.get_study(ctx.name).status == "finished"


def test_max_num_seqs_1_ranks_below_the_default_under_concurrency(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=2,
        enqueue=[{"max_num_seqs": 1}],
        params=("max_num_seqs",),
        choices={"max_num_seqs": (1, 64)},
    )
    ranked = run_study(ctx, FakeRunner(), repo)
    assert [r.is_baseline for r in ranked] == [True, False]
    assert ranked[1].config.max_num_seqs == 1 and ranked[1].score < 1.0


def test_slo_violations_rank_after_feasible_trials(db_url: str) -> None:
    repo = make_repo(db_url)
    # max_num_seqs 1 queues requests: its P99 E2E breaks a 50 ms SLO the baseline meets.
    ctx = make_context(
        db_url,
        trials=2,
        enqueue=[{"max_num_seqs": 1}],
        params=("max_num_seqs",),
        choices={"max_num_seqs": (1, 64)},
        slo="e2e_p99=50ms",
    )
    ranked = run_study(ctx, FakeRunner(), repo)
    assert ranked[0].feasible and ranked[0].is_baseline
    assert not ranked[1].feasible


class _InterruptingRunner(FakeRunner):
    def __init__(self, after: int) -> None:
        super().__init__(max_utilization=0.9)
        self.after = after

    def run(self, config, workload, *, slo=None, on_phase=None, **kw):  # type: ignore[no-untyped-def]
        if len(self.calls) >= self.after:
            raise KeyboardInterrupt
        return super().run(config, workload, slo=slo, on_phase=on_phase, **kw)


# Four configurations queued after the defaults, so that the first six trials are six launches
# (a configuration the sampler draws again is not launched again).
_FOUR = ({"gpu_memory_utilization": 0.5}, {"max_num_seqs": 1}, {"max_num_seqs": 64})
_FOUR += ({"gpu_memory_utilization": 0.6, "max_num_seqs": 64},)


def test_a_ctrl_c_just_after_the_study_is_marked_running_records_it_interrupted(
    db_url: str,
) -> None:
    """`tuner run --parallel 2` stopped by Ctrl-C left its study "running" (CI, PostgreSQL):
    one worker had recorded it interrupted, the other, still starting, then wrote "running",
    and its SIGTERM landed before it could say otherwise."""
    repo = make_repo(db_url)
    ctx = make_context(db_url, trials=2)
    set_status = repo.set_study_status

    def signalled(name: str, status: Any) -> None:
        set_status(name, status)
        if status == "running":
            raise KeyboardInterrupt  # the SIGTERM, between this write and the next step

    repo.set_study_status = signalled  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, FakeRunner(), repo)
    assert repo.get_study(ctx.name).status == "interrupted"


def test_interrupted_study_resumes_without_losing_completed_trials(db_url: str) -> None:
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=6,
        choices={"gpu_memory_utilization": (0.5, 0.6), "max_num_seqs": (1, 64)},
        enqueue=_FOUR,
    )
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, _InterruptingRunner(after=3), repo)
    assert repo.get_study(ctx.name).status == "interrupted"
    before = {r.number: r for r in repo.list_trials(ctx.name, limit=None)}
    assert [before[n].status for n in sorted(before)] == [TrialStatus.COMPLETE] * 3 + [
        TrialStatus.FAILED
    ]
    assert before[3].failure is FailureClass.INTERRUPTED

    with pytest.raises(UsageError, match="already exists"):
        run_study(ctx, FakeRunner(), repo)
    run_study(ctx, FakeRunner(), repo, resume=True)

    after = {r.number: r for r in repo.list_trials(ctx.name, limit=None)}
    for n in range(3):
        assert after[n].metrics == before[n].metrics, "a completed trial changed on resume"
    finished = [r for r in after.values() if r.status is not TrialStatus.RUNNING]
    assert len(finished) >= 6
    assert sum(r.status is TrialStatus.COMPLETE for r in after.values()) >= 5
    assert repo.get_study(ctx.name).status == "finished"
    assert rank(repo, ctx.name, ctx.spec.objective)

    # Resuming with more trials runs the extra ones and records the new target.
    more = make_context(
        db_url,
        trials=8,
        choices={"gpu_memory_utilization": (0.5, 0.6), "max_num_seqs": (1, 64)},
        enqueue=_FOUR,
    )
    run_study(more, FakeRunner(), repo, resume=True)
    assert repo.get_study(ctx.name).n_trials_requested == 8
    assert len(repo.list_trials(ctx.name, limit=None)) >= 8


def test_a_resume_on_another_workload_is_refused_before_anything_runs(db_url: str) -> None:
    """A trial's workload never differs from its study's: the loop itself holds the rule."""
    repo = make_repo(db_url)
    with pytest.raises(KeyboardInterrupt):
        run_study(make_context(db_url, trials=4), _InterruptingRunner(after=2), repo)
    before = repo.list_trials("s1", limit=None)
    other = make_context(db_url, trials=4, workload=TINY_WORKLOAD.replace(name="chat"))
    runner = FakeRunner()
    with pytest.raises(
        UsageError, match="created with --workload smoke; this resume asks for chat"
    ):
        run_study(other, runner, repo, resume=True)
    assert runner.calls == [] and repo.list_trials("s1", limit=None) == before
    assert repo.get_study("s1").status == "interrupted"


def test_a_resume_whose_requests_changed_under_the_same_name_is_refused(db_url: str) -> None:
    """A trace file edited between two runs keeps its workload's name and settings: the resume
    ran and ranked the new trials against a baseline measured on the old requests. The
    fingerprint stored with the study is now compared with the one the resume would send."""
    repo = make_repo(db_url)
    with pytest.raises(KeyboardInterrupt):
        run_study(make_context(db_url, trials=4), _InterruptingRunner(after=2), repo)
    before = repo.list_trials("s1", limit=None)
    longer = make_context(db_url, trials=4, workload=TINY_WORKLOAD.replace(output_tokens=80))
    runner = FakeRunner()
    with pytest.raises(UsageError, match="measured on other requests") as refused:
        run_study(longer, runner, repo, resume=True)
    assert "output tokens a window 62 then, 616 now" in refused.value.message  # jittered
    assert "prompt tokens" not in refused.value.message  # only what changed is named
    assert runner.calls == [] and repo.list_trials("s1", limit=None) == before
    # The same requests resume as before.
    run_study(make_context(db_url, trials=4), FakeRunner(), repo, resume=True)
    assert repo.get_study("s1").status == "finished"


def test_optuna_tables_of_another_optuna_are_a_storage_error(tmp_path: Path) -> None:
    """Optuna refuses tables set up at a schema it does not run with a RuntimeError, which
    reached the user as a traceback after the study's banner."""
    import sqlite3

    from tuner.errors import StorageError

    url = f"sqlite:///{tmp_path / 'other.db'}"
    repo = make_repo(url)
    run_study(make_context(url, trials=1, name="first"), FakeRunner(), repo)
    with sqlite3.connect(tmp_path / "other.db") as db:
        db.execute("update alembic_version set version_num = 'zzzfuture'")
    with pytest.raises(StorageError, match="Optuna cannot use the database") as refused:
        run_study(make_context(url, trials=1, name="second"), FakeRunner(), repo)
    assert "optuna storage upgrade" in refused.value.hint
    assert repo.get_study("second") is None  # refused before anything was stored


def test_resume_of_unknown_study_is_a_usage_error(db_url: str) -> None:
    repo = make_repo(db_url)
    with pytest.raises(UsageError, match="no study"):
        run_study(make_context(db_url, name="nope"), FakeRunner(), repo, resume=True)


def test_a_capacity_study_ranks_by_the_curve_under_the_slo(db_url: str) -> None:
    """Trials that measure a ladder are ranked by their capacity: the fake runner's queueing
    grows with the streams beyond max_num_seqs, so a small max_num_seqs caps where the SLO
    holds, and the ranking follows the capacity, not the fixed-load throughput."""
    from tests.studykit import TINY_WORKLOAD

    ladder = TINY_WORKLOAD.replace(concurrency=16, concurrency_ladder=(4, 8, 16), windows=2)
    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=4,
        workload=ladder,
        objective="capacity",
        slo="ttft_p99=200ms",
        params=("max_num_seqs",),
        choices={"max_num_seqs": (2, 4, 64)},
        enqueue=[{"max_num_seqs": n} for n in (2, 4, 64)],  # four trials, four launches
    )
    run_study(ctx, FakeRunner(), repo)
    ranked = rank(repo, ctx.name, ctx.spec.objective)
    rows = {r.number: r for r in repo.list_trials(ctx.name, phase="search", limit=None)}
    assert len(rows) == 4
    caps = {}
    for number, row in rows.items():
        result = row.to_result()
        check_complete(result, min_windows=6)
        assert [w.concurrency for w in result.windows] == [4, 4, 8, 8, 16, 16]
        caps[number] = result.metrics["capacity_output_throughput"].median
        assert row.objective_values is not None and row.objective_values[0] == caps[number]
    assert [r.number for r in ranked if r.feasible] == sorted(
        (n for n in caps if caps[n] > 0), key=lambda n: -caps[n]
    )
    assert ranked[0].values[0] == max(caps.values())


def _capacity_study(db: Path, **more: Any) -> tuple[StudyContext, Repository]:
    """A capacity study of two trials on a ladder of 4, 8 and 16 streams under a TTFT SLO,
    run through the in-process fake; ``more``: make_context's other arguments."""
    url = f"sqlite:///{db}"
    ladder = TINY_WORKLOAD.replace(concurrency=16, concurrency_ladder=(4, 8, 16), windows=2)
    repo = make_repo(url)
    ctx = make_context(
        url, trials=2, workload=ladder, objective="capacity", slo="ttft_p99=200ms",
        params=("max_num_seqs",), choices={"max_num_seqs": (2, 64)}, **more,
    )  # fmt: skip
    run_study(ctx, FakeRunner(), repo)
    return ctx, repo


def test_a_capacity_study_shows_the_capacity_it_ranks_by(tmp_path: Path) -> None:
    """`tuner trials`, `tuner best` and the Markdown export showed only the out tok/s of one
    load point, unlabelled, beside a score computed from the capacity, which only --json held."""
    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.results import recommendation
    from tuner.results.export import markdown_table, study_records

    ctx, repo = _capacity_study(tmp_path / "curve.db")
    url = f"sqlite:///{tmp_path / 'curve.db'}"
    best = recommendation(repo, ctx.name)
    assert best is not None
    cap, load = best.metrics["capacity_output_throughput"], best.metrics["capacity_load"]
    shown = f"capacity: {cap.median:.1f} [{cap.low:.1f}, {cap.high:.1f}] out tok/s at "
    assert shown + f"{load.median:g} streams" in best.render()
    table = markdown_table(study_records(repo, ctx.name))
    assert "| capacity out tok/s [range] @ load |" in table
    assert f"{cap.median:.0f} [{cap.low:.0f}, {cap.high:.0f}] @ {load.median:g} |" in table
    listed = CliRunner().invoke(app, ["trials", ctx.name, "--storage", url], env={"COLUMNS": "300"})
    assert listed.exit_code == 0, listed.output
    assert "capacity" in listed.output and f"at {load.median:g} streams" in listed.output
    assert "capacity: the most a load point that met the SLO served" in listed.output


def test_the_capacity_objective_needs_a_ladder(tmp_path: Path) -> None:
    from tuner.compose import resolve_workload
    from tuner.spec.study import StudySpec

    spec = StudySpec(workload="smoke").with_overrides(objective="capacity")
    with pytest.raises(UsageError, match="one load point") as info:
        resolve_workload(spec)
    assert "concurrency_ladder" in (info.value.hint or "")


def test_the_defaults_are_measured_however_often_they_were_interrupted(tmp_path: Path) -> None:
    """Three Ctrl-Cs in the baseline's launch, then a resume: the defaults were dropped for good
    after the third (a configuration's retry cap), and the study had no score at all."""
    from tuner.domain import TrialResult, Workload

    class CtrlCOnDefaults(FakeRunner):
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            if config == ServingConfig():
                raise KeyboardInterrupt
            return super().run(config, workload, **kw)

    url = f"sqlite:///{tmp_path / 'base.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="base-cut")
    for n in range(4):
        with pytest.raises(KeyboardInterrupt):
            run_study(ctx, CtrlCOnDefaults(), repo, resume=n > 0)
    run_study(ctx, FakeRunner(), repo, resume=True)
    rows = repo.list_trials("base-cut", limit=None)
    assert any(r.is_baseline and r.status.value == "complete" for r in rows)


def test_a_fault_of_the_defaults_queues_them_again_while_nothing_measured_them(
    tmp_path: Path,
) -> None:
    """One start_failed of the defaults' cold launch left the study without a score and without
    its confirmation: a fault is counted, and the defaults were never queued again, even by a
    resume with more trials. A fault that comes back every time stops after three tries."""
    from tuner.domain import TrialResult, Workload

    class FailsDefaults(FakeRunner):
        def __init__(self, times: int) -> None:
            super().__init__()
            self.times = times

        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            if config == ServingConfig() and self.times > 0:
                self.times -= 1
                return TrialResult(config, TrialStatus.FAILED, failure=FailureClass.START_FAILED,
                                   failure_detail="EngineCore failed to start")  # fmt: skip
            return super().run(config, workload, **kw)

    url = f"sqlite:///{tmp_path / 'fault.db'}"
    repo = make_repo(url)
    ranked = run_study(make_context(url, trials=4, name="once"), FailsDefaults(1), repo)
    rows = repo.list_trials("once", limit=None)
    defaults = [r.status for r in rows if r.is_baseline and r.phase.value == "search"]
    assert defaults == [TrialStatus.FAILED, TrialStatus.COMPLETE]
    assert len([r for r in rows if r.phase.value == "search"]) == 4  # the fault used the budget
    assert ranked and all(r.relative for r in ranked)
    run_study(make_context(url, trials=6, name="always"), FailsDefaults(99), repo)
    rows = repo.list_trials("always", limit=None)
    tried = [r.failure for r in rows if r.is_baseline]
    assert tried == [FailureClass.START_FAILED] * 3  # then the search goes on without them


def test_a_users_stops_never_drop_an_enqueued_configuration(tmp_path: Path) -> None:
    """Three Ctrl-Cs while the same [[enqueue]] configuration ran used its three attempts:
    the next resume never measured it, and nothing said so. A user's stop is not the
    configuration's doing."""
    from tuner.domain import TrialResult, Workload

    mine = ServingConfig(max_num_seqs=64)

    class CtrlCOnMine(FakeRunner):
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            if config == mine:
                raise KeyboardInterrupt
            return super().run(config, workload, **kw)

    url = f"sqlite:///{tmp_path / 'stops.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="stops", enqueue=[{"max_num_seqs": 64}])
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, CtrlCOnMine(), repo)
    for _ in range(3):
        with pytest.raises(KeyboardInterrupt):
            run_study(ctx, CtrlCOnMine(), repo, resume=True)
    runner = FakeRunner()
    run_study(ctx, runner, repo, resume=True)
    assert mine in runner.calls


def test_the_defaults_queued_again_run_before_the_enqueued_configurations(
    tmp_path: Path,
) -> None:
    """The defaults' launch was interrupted (Ctrl-C) in a study with two [[enqueue]] entries:
    queued again behind them, the defaults ran last and the two were measured without the
    study's reference. Now they run first."""
    from tuner.domain import TrialResult, Workload

    class CtrlCOnDefaults(FakeRunner):
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            if config == ServingConfig():
                raise KeyboardInterrupt
            return super().run(config, workload, **kw)

    url = f"sqlite:///{tmp_path / 'order.db'}"
    repo = make_repo(url)
    enqueue = ({"max_num_seqs": 1}, {"gpu_memory_utilization": 0.5})
    ctx = make_context(url, trials=3, name="order", enqueue=enqueue)
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, CtrlCOnDefaults(), repo)
    runner = FakeRunner()
    run_study(ctx, runner, repo, resume=True)
    first, *others = runner.calls
    assert first == ServingConfig()
    assert others == [ServingConfig(max_num_seqs=1), ServingConfig(gpu_memory_utilization=0.5)]
    rows = repo.list_trials("order", limit=None)
    measured = [r for r in rows if r.status is TrialStatus.COMPLETE]
    assert len(measured) == 3 and all(r.score is not None for r in measured)


def test_the_defaults_a_new_card_needs_run_before_the_enqueued_configurations(
    tmp_path: Path,
) -> None:
    """A study resumed on a card that has not run vLLM's defaults says they run next; the
    [[enqueue]] entries still waiting from its creation ran before them on that card."""
    url = f"sqlite:///{tmp_path / 'cards.db'}"
    repo = make_repo(url)
    enqueue = ({"max_num_seqs": 1}, {"max_num_seqs": 64}, {"gpu_memory_utilization": 0.5})
    first = make_context(url, trials=2, name="cards", enqueue=enqueue)
    run_study(first, FakeRunner(card="GPU-a"), repo)
    runner = FakeRunner(card="GPU-b")
    more = make_context(url, trials=5, name="cards", enqueue=enqueue)
    run_study(more, runner, repo, resume=True)
    # Card b: the first entry left shows it has no defaults there, then they, then the rest.
    assert runner.calls == [
        ServingConfig(max_num_seqs=64),
        ServingConfig(),
        ServingConfig(gpu_memory_utilization=0.5),
    ]


def test_a_resume_on_another_vllm_is_refused(tmp_path: Path) -> None:
    """The resume ran on vLLM 0.26.0 a study measured on 0.32.0, ranking both together."""
    import dataclasses

    url = f"sqlite:///{tmp_path / 'v.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="versions")
    run_study(ctx, FakeRunner(), repo)
    other = dataclasses.replace(ctx, vllm_version="0.26.0")
    assert ctx.vllm_version != "0.26.0"
    with pytest.raises(UsageError, match=r"this run has vLLM 0\.26\.0") as info:
        run_study(other, FakeRunner(), repo, resume=True)
    assert "--study NEW" in (info.value.hint or "")
    assert len(repo.list_trials("versions", limit=None)) == 2  # nothing launched or written


def test_a_resumed_study_does_not_replay_its_first_draws(tmp_path: Path) -> None:
    """The sampler was seeded as before on every resume, so its random start-up draws came
    again: #4 and #5 were #1's and #2's configurations, measured twice (a queued study taken
    over after a kill spent its whole budget on one configuration)."""
    from tuner.domain import TrialResult, Workload

    class CtrlCAtThird(FakeRunner):
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            self.seen = getattr(self, "seen", 0) + 1
            if self.seen == 3:
                raise KeyboardInterrupt
            return super().run(config, workload, **kw)

    url = f"sqlite:///{tmp_path / 'replay.db'}"
    repo = make_repo(url)
    choices = {
        "max_num_seqs": (2, 4, 8, 16, 32, 64, 128),
        "gpu_memory_utilization": (0.5, 0.6, 0.7, 0.8, 0.9),
        "max_num_batched_tokens": (512, 1024, 2048, 4096),
    }
    # 16 trials: the first five draws are TPE's random start-up, the ones a seed replays.
    ctx = make_context(url, trials=16, name="replay", params=tuple(choices), choices=choices)
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, CtrlCAtThird(), repo)
    run_study(ctx, FakeRunner(), repo, resume=True)
    rows = repo.list_trials("replay", limit=None)
    assert rows[3].config == rows[2].config  # the interrupted #2, queued again
    assert [r.config for r in rows[4:6]] != [r.config for r in rows[1:3]]


def test_a_study_seeded_at_the_top_of_the_range_resumes(tmp_path: Path) -> None:
    """A resume seeds its sampler with the seed plus the trials held; from the largest seed
    numpy takes, that overflowed and no resume, join or takeover of the study could run."""
    import dataclasses

    url = f"sqlite:///{tmp_path / 'top.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="top")
    ctx = dataclasses.replace(ctx, spec=ctx.spec.with_overrides(seed=2**32 - 1))
    run_study(ctx, FakeRunner(), repo)
    more = dataclasses.replace(ctx, spec=ctx.spec.with_overrides(trials=3))
    assert len(run_study(more, FakeRunner(), repo, resume=True)) == 3


def test_workers_that_join_at_once_draw_configurations_of_their_own(tmp_path: Path) -> None:
    """Workers that joined a study at the same moment (`tuner run --parallel` starts them so)
    held the same trials, so their samplers were seeded alike and drew the same configurations
    in lockstep: the twin check gave one of each pair back. Each trial of a joined worker is now
    drawn from the study's seed and its own number; a single worker draws as it did."""
    from tuner.study.loop import set_up_study
    from tuner.study.sampling import ask_trial, optuna_storage

    choices = {
        "max_num_seqs": (2, 4, 8, 16, 32, 64, 128),
        "gpu_memory_utilization": (0.5, 0.6, 0.7, 0.8, 0.9),
        "max_num_batched_tokens": (512, 1024, 2048, 4096),
    }

    def joined_draws(name: str) -> list[ServingConfig]:
        url = f"sqlite:///{tmp_path / name}.db"
        ctx = make_context(url, trials=16, name=name, params=tuple(choices), choices=choices)
        set_up_study(ctx, make_repo(url), resume=False)  # as `tuner run --parallel` does
        storage = optuna_storage(ctx)
        try:
            first = open_optuna_study(ctx, create=False, storage=storage)
            assert ask_trial(ctx, first, join=True).user_attrs["baseline"]  # the queued defaults
            # Two workers join at once: both hold the same trials when they open the study.
            both = [open_optuna_study(ctx, create=False, storage=storage) for _ in range(2)]
            asked = [(study, ask_trial(ctx, study, join=True)) for study in both]
            return [ctx.space.suggest(trial) for _study, trial in asked]
        finally:
            storage.engine.dispose()

    draws = joined_draws("at-once")
    assert draws[0] != draws[1]
    assert joined_draws("again") == draws  # reproducible: a trial's number, not a process

    # A single worker's sampler is seeded as before (the seed plus the trials held).
    url = f"sqlite:///{tmp_path / 'alone.db'}"
    ctx = make_context(url, trials=16, name="alone", params=tuple(choices), choices=choices)
    run_study(ctx, FakeRunner(), make_repo(url))
    storage = optuna_storage(ctx)
    try:
        study = open_optuna_study(ctx, create=False, storage=storage)
        sampler = study.sampler
        ask_trial(ctx, study, join=False)
        assert study.sampler is sampler
    finally:
        storage.engine.dispose()


class _Lost(BaseException):
    """The far host going down, as far as its worker's trial can tell."""


def _far_worker_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost_at: Callable[[int, Any], bool]
) -> tuple[StudyContext, Repository, str]:
    """A 3-trial study "lost" whose worker, posing as another host, is lost (no row written,
    no clean-up) as a trial for which ``lost_at(number, baseline)`` starts; then Optuna's
    heartbeat grace passes (beats of 1 s). Its context, repository and URL, for a worker here."""
    import time

    from tuner.study.loop import SilentReporter, set_up_study

    class LostThere(SilentReporter):
        def trial_started(self, number, index, total, config, baseline):  # type: ignore[no-untyped-def]
            if lost_at(number, baseline):
                raise _Lost

    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    url = f"sqlite:///{tmp_path / 'lost.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="lost")
    set_up_study(ctx, repo, resume=False)
    monkeypatch.setenv("TUNER_WORKER_HOST", "far-host")
    with pytest.raises(_Lost):
        run_study(ctx, FakeRunner(), repo, join=True, reporter=LostThere())
    monkeypatch.delenv("TUNER_WORKER_HOST")
    time.sleep(6)  # past the grace, counted in whole seconds by SQLite's clock
    return ctx, repo, url


def test_a_trial_whose_remote_worker_was_lost_before_measuring_goes_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on another host lost between drawing its trial and measuring it (the host gone,
    kill -9) left a trial that was never beaten, which Optuna's heartbeat never marks stale: it
    kept its place in the budget, and the workers left waited for it for good. A trial now beats
    from the ask, so it goes stale after four beats (here 1 s each) as any other."""
    from tuner.study.loop import SilentReporter

    class NeverWaits(SilentReporter):
        def phase(self, phase: str, detail: str) -> None:
            assert phase != "waiting", "the lost worker's trial kept its place in the budget"

    ctx, repo, url = _far_worker_lost(tmp_path, monkeypatch, lambda number, _: number == 1)
    run_study(ctx, FakeRunner(), repo, join=True, reporter=NeverWaits())
    rows = repo.list_trials("lost", limit=None)
    # The budget, with results: the lost trial #1 failed in Optuna, never a row of its own.
    assert [r.number for r in rows] == [0, 2, 3]
    assert all(r.status is not TrialStatus.RUNNING for r in rows)
    frozen = optuna.load_study(study_name="lost", storage=url).trials[1]
    assert frozen.state is optuna.trial.TrialState.FAIL
    assert repo.get_study("lost").status == "finished"


def test_the_baseline_of_a_remote_worker_lost_before_measuring_is_queued_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on another host lost after it drew the baseline and before its row was written:
    its stale trial was failed, but only trials with a row were queued again, so the study ran
    its budget without vLLM's defaults and no trial had a score. The worker that fails it now
    queues its configuration again (exactly one: Optuna calls the stale-trial callback in the
    process that failed the trial)."""
    ctx, repo, url = _far_worker_lost(tmp_path, monkeypatch, lambda _, baseline: bool(baseline))
    run_study(ctx, FakeRunner(), repo, join=True)
    rows = repo.list_trials("lost", limit=None)
    assert 0 not in [r.number for r in rows]  # lost before its row
    base = [r for r in rows if r.is_baseline]
    assert [r.status for r in base] == [TrialStatus.COMPLETE]
    assert base[0].config == ctx.space.baseline()
    assert all(r.score is not None for r in rows if r.status is TrialStatus.COMPLETE)
    trials = optuna.load_study(study_name="lost", storage=url).trials
    assert trials[0].state is optuna.trial.TrialState.FAIL
    assert [t.user_attrs.get("retry_of") for t in trials].count(0) == 1  # queued once


def test_a_trial_lost_between_the_ask_and_its_first_beat_gives_its_place_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker lost right after Optuna's ask, before it recorded itself on the trial and beat
    (kill -9 in that instant), left a running trial that Optuna never takes for stale and that
    no rule judged: it kept its place in the budget, and the workers left waited for it for
    good. It is taken for dead once a worker has seen it unowned for the heartbeat's grace
    (four beats of 1 s here; the worker waits for the trial meanwhile); the baseline it had
    popped from the queue is queued again."""
    from tuner.study.loop import SilentReporter, set_up_study

    class Waits(SilentReporter):
        waited = 0

        def phase(self, phase: str, detail: str) -> None:
            self.waited += phase == "waiting"
            assert self.waited < 10, "the unowned trial kept its place in the budget"

    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    url = f"sqlite:///{tmp_path / 'unowned.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="unowned")
    set_up_study(ctx, repo, resume=False)
    lost = optuna.load_study(study_name="unowned", storage=url).ask()  # then nothing: lost
    assert lost.number == 0
    run_study(ctx, FakeRunner(), repo, join=True, reporter=Waits())
    rows = repo.list_trials("unowned", limit=None)
    assert [r.number for r in rows] == [1, 2, 3]
    assert [r.config for r in rows if r.is_baseline] == [ctx.space.baseline()]
    trials = optuna.load_study(study_name="unowned", storage=url).trials
    assert trials[0].state is optuna.trial.TrialState.FAIL
    assert [t.user_attrs.get("retry_of") for t in trials].count(0) == 1  # queued once
    assert repo.get_study("unowned").status == "finished"


@contextlib.contextmanager
def _stopped_after_storing(
    monkeypatch: pytest.MonkeyPatch, number: int, stop: type[BaseException]
) -> Iterator[None]:
    """Within the block, the tuner stops (raises ``stop``) right after trial ``number``'s
    measured result is stored, before any word to Optuna; the repository as it was after."""
    finish = Repository.finish_trial

    def stored_then_stopped(self, trial_id, result, score, values):  # type: ignore[no-untyped-def]
        row = finish(self, trial_id, result, score, values)
        if row.number == number and result.status is TrialStatus.COMPLETE:
            raise stop
        return row

    monkeypatch.setattr(Repository, "finish_trial", stored_then_stopped)
    try:
        yield
    finally:
        monkeypatch.setattr(Repository, "finish_trial", finish)


def test_a_result_a_remote_worker_stored_before_it_was_lost_keeps_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on another host lost between storing a trial's result and telling Optuna:
    Optuna's heartbeat failed the trial, uncounted, so the workers left ran one trial more than
    the budget, beside a row Optuna never learned. The sweep marks such a trial a result before
    anything fails it."""
    import time

    from tuner.study.loop import set_up_study

    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    url = f"sqlite:///{tmp_path / 'told.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="told")
    set_up_study(ctx, repo, resume=False)
    monkeypatch.setenv("TUNER_WORKER_HOST", "far-host")
    with _stopped_after_storing(monkeypatch, 1, _Lost), pytest.raises(_Lost):
        run_study(ctx, FakeRunner(), repo, join=True)
    monkeypatch.delenv("TUNER_WORKER_HOST")
    time.sleep(6)  # past the grace: Optuna's heartbeat takes the trial for stale
    again = FakeRunner()
    run_study(ctx, again, repo, join=True)
    rows = repo.list_trials("told", limit=None)
    assert [r.number for r in rows] == [0, 1] and again.calls == []
    assert all(r.status is TrialStatus.COMPLETE for r in rows)
    trials = optuna.load_study(study_name="told", storage=url).trials
    assert trials[1].state is optuna.trial.TrialState.FAIL
    assert trials[1].user_attrs.get("counted") is True


def test_a_resume_is_refused_while_the_run_that_owns_the_study_lives(tmp_path: Path) -> None:
    """Between two trials, or in the confirmation, no Optuna trial runs: a resume then marked
    the live run's confirmation launch interrupted and ran a second confirmation beside it."""
    import subprocess
    import sys

    from tuner.study import sharing
    from tuner.telemetry import since_boot

    url = f"sqlite:///{tmp_path / 'owned.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="owned")
    run_study(ctx, FakeRunner(), repo)
    assert repo.get_study("owned").spec.get("run_owner") is None  # cleared when it ended
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = {**sharing.worker_identity(), "pid": other.pid, "start": since_boot(other.pid)}
        repo.set_study_runner("owned", alive)
        with pytest.raises(UsageError, match=rf"process {other.pid} on this host runs it"):
            run_study(ctx, FakeRunner(), repo, resume=True)
    finally:
        other.kill()
        other.wait()
    run_study(ctx, FakeRunner(), repo, resume=True)  # its owner gone: the resume goes on


def test_only_a_new_study_needs_vllm_s_defaults_to_run_here() -> None:
    """tuner compare, calibrate and verify-claims (whose arms fix what the defaults lack) and a
    resumed study were refused too, by a check meant for a study about to measure them."""
    from tuner.catalog import get_gpu, resolve_model
    from tuner.compose import build_space, resolve_workload
    from tuner.spec.study import StudySpec

    spec = StudySpec(model="ernie-0.3b", gpu="cpu", workload="chat")
    args = (resolve_model("ernie-0.3b"), get_gpu("cpu"), resolve_workload(spec))
    space = build_space(spec, *args)  # an A/B command's, or a resume's: no refusal
    assert space.violations(space.baseline())  # the defaults (131,072 positions) do not fit
    with pytest.raises(UsageError, match="vLLM's defaults with the study's fixed values"):
        build_space(spec, *args, new_study=True)


def test_the_runner_a_kill_left_recorded_is_forgotten_by_those_who_run_the_study_now(
    tmp_path: Path,
) -> None:
    """After `kill -9` of `tuner run`, its dead pid stayed recorded: a `--parallel` resume or a
    joining worker then ran the study while every surface said "tuner gone". A study killed
    in its confirmation is flagged too."""
    import dataclasses
    import subprocess
    import sys

    from tuner.db import RUN_OWNER, StudyStatus
    from tuner.study.loop import set_up_study
    from tuner.study.sharing import host_name, runner_gone
    from tuner.telemetry import since_boot

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=1, name="killed")
    run_study(ctx, FakeRunner(), repo)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {"host": host_name(), "pid": exited.pid, "start": since_boot(exited.pid)}
    exited.wait()

    def killed_in(status: StudyStatus) -> bool:
        repo.set_study_status("killed", status)
        repo.set_study_runner("killed", dead)
        study = repo.get_study("killed")
        assert study is not None
        return runner_gone(study)

    assert killed_in(StudyStatus.CONFIRMING) and killed_in(StudyStatus.RUNNING)
    more = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, trials=2))
    set_up_study(more, repo, resume=True)
    study = repo.get_study("killed")
    assert study is not None and study.status == "running" and not runner_gone(study)
    assert killed_in(StudyStatus.RUNNING)
    run_study(more, FakeRunner(), repo, join=True)
    study = repo.get_study("killed")
    assert study is not None and study.spec.get(RUN_OWNER) is None  # the joiner cleared it


def test_a_takeover_of_a_confirming_study_ends_the_dead_workers_launch(tmp_path: Path) -> None:
    """A takeover sweeps only the trials of dead workers (joined ones may still measure), and
    so left the confirmation launch its gone queue worker had running "running" for good."""
    from tuner.domain import TrialStatus
    from tuner.study.sharing import worker_identity

    url = f"sqlite:///{tmp_path / 'confirming.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="conf")
    run_study(ctx, FakeRunner(), repo)
    repo.set_study_status("conf", "confirming")  # its worker died mid-confirmation
    repo.start_trial("conf", 100_000, ctx.space.baseline(), "confirm", True)
    run_study(ctx, FakeRunner(), repo, resume=True, takeover=True, owner=worker_identity())
    (launch,) = repo.list_trials("conf", phase="confirm", limit=None)
    assert launch.status is TrialStatus.FAILED and launch.failure is not None
    assert launch.failure.value == "interrupted"
    assert repo.get_study("conf").status == "finished"


def test_a_worker_joining_a_study_whose_confirming_worker_died_keeps_it_said(
    tmp_path: Path,
) -> None:
    """A joined worker confirmed and was killed (kill -9) on this host; a worker that joined the
    study then (`tuner worker --study`, a restarted unit) said "nothing to do: the study is
    confirming" and erased the dead worker's record: `tuner studies` showed "confirming" for
    good, no longer "(tuner gone)" with its resume hint. The record is kept, and the worker
    says who confirmed it and what goes on with the confirmation."""
    import subprocess
    import sys

    from tuner.db import RUN_OWNER, StudyStatus
    from tuner.study.loop import SilentReporter
    from tuner.study.sharing import host_name, runner_gone
    from tuner.telemetry import since_boot

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="orphan", confirm_launches=2)
    run_study(ctx, FakeRunner(), repo)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {"host": host_name(), "pid": exited.pid, "start": since_boot(exited.pid)}
    exited.wait()
    # As if a joined worker had taken its confirmation and was killed while confirming.
    assert repo.claim_study_step("orphan", StudyStatus.CONFIRMING, unless=(), runner=dead)
    said: list[tuple[str, str]] = []

    class Phases(SilentReporter):
        def phase(self, phase: str, detail: str) -> None:
            said.append((phase, detail))

    run_study(ctx, FakeRunner(), repo, join=True, reporter=Phases())
    study = repo.get_study("orphan")
    assert study is not None and study.status == "confirming"
    assert study.spec[RUN_OWNER] == dead and runner_gone(study)
    assert said == [
        (
            "nothing to do",
            f"the study is confirming, and the worker that confirmed it (process {exited.pid} "
            "on this host) has exited: `tuner run --study orphan --resume` goes on with its "
            "confirmation",
        )
    ]


_RESUME_SHARED = """
import sys
from tests.studykit import make_context, make_repo
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

url = sys.argv[1]
ctx = make_context(url, trials=3, name="shared", confirm_launches=2)
run_study(ctx, FakeRunner(), make_repo(url), resume=True)
"""


def test_a_joined_worker_that_confirms_is_the_study_s_runner_until_it_ends(
    tmp_path: Path,
) -> None:
    """A worker that joined a study and took its confirmation recorded no runner: the study's
    queue worker (gone) stayed recorded, so a queue worker took the study over, and a resume
    on this host went on, each marking the live launch interrupted and confirming beside it.
    The joined worker is now the study's runner (and queue worker) while it confirms."""
    import os
    import subprocess
    import sys

    from tuner.db import RUN_OWNER
    from tuner.study import sharing
    from tuner.study.confirm import CONFIRM_NUMBER_BASE
    from tuner.study.loop import SilentReporter

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="shared", confirm_launches=2)
    ghost = {"host": sharing.host_name(), "pid": 2**22 + 12345, "start": 0.0}  # above pid_max
    # Its queue worker measured the defaults and was killed (a SIGKILL leaves it running).
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx, _InterruptingRunner(after=1), repo, owner=ghost)
    repo.set_study_status("shared", "running")
    seen: list[str] = []

    class Confirming(SilentReporter):
        def trial_started(self, number, index, total, config, baseline):  # type: ignore[no-untyped-def]
            if number != CONFIRM_NUMBER_BASE:
                return
            other = {"host": sharing.host_name(), "pid": 1, "start": 0.0}
            assert repo.take_over_study(sharing.owner_gone, other) is None  # it lives: kept
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
            resume = subprocess.run(
                [sys.executable, "-c", _RESUME_SHARED, url], env=env, capture_output=True,
                text=True, timeout=120, check=False,
            )  # fmt: skip
            seen.append(resume.stderr)
            row = repo.get_study("shared")
            assert row is not None and row.status == "confirming"
            assert row.spec[RUN_OWNER]["pid"] == row.spec["queue_worker"]["pid"] == os.getpid()

    run_study(ctx, FakeRunner(), repo, join=True, reporter=Confirming())
    assert len(seen) == 1
    assert f"process {os.getpid()} on this host confirms it" in seen[0], seen[0]
    row = repo.get_study("shared")
    assert row is not None and row.status == "finished" and row.spec[RUN_OWNER] is None
    confirm = repo.list_trials("shared", phase="confirm", limit=None)
    assert confirm and all(t.status is TrialStatus.COMPLETE for t in confirm)
    candidates = {t.config for t in confirm if not t.is_baseline}
    compared = [c.b_config for c in repo.list_comparisons("shared")]
    assert sorted(map(str, compared)) == sorted(map(str, candidates))  # one confirmation


def test_a_run_that_left_its_confirmation_to_a_joined_worker_keeps_that_worker_recorded(
    db_url: str,
) -> None:
    """The study's own run, its search done, finds a joined worker confirming: it cleared the
    record of the study's runner as it ended, the joined worker's too."""
    from tuner.db import RUN_OWNER, StudyStatus
    from tuner.study.loop import SilentReporter

    repo = make_repo(db_url)
    ctx = make_context(db_url, trials=2, confirm_launches=2)
    joined = {"host": "another-host", "pid": 7, "start": 1.0}

    class JoinedWorkerConfirmsFirst(SilentReporter):
        def trial_finished(self, number, result, best):  # type: ignore[no-untyped-def]
            if number == 1:
                confirming = (StudyStatus.CONFIRMING,)
                assert repo.claim_study_step(
                    ctx.name, StudyStatus.CONFIRMING, unless=confirming, runner=joined
                )

    run_study(ctx, FakeRunner(), repo, reporter=JoinedWorkerConfirmsFirst())
    row = repo.get_study(ctx.name)
    assert row is not None and row.status == "confirming"
    assert row.spec[RUN_OWNER] == joined


def test_a_sampled_trial_of_the_defaults_is_not_announced_as_the_baseline(db_url: str) -> None:
    """The baseline is the first measured trial of the defaults; a later one measures them
    again, and its progress line says so."""
    from tuner.study.loop import SilentReporter

    class Started(SilentReporter):
        def __init__(self) -> None:
            self.started: list[tuple[int, object]] = []

        def trial_started(self, number, index, total, config, baseline):  # type: ignore[no-untyped-def]
            self.started.append((number, baseline))

    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=3,
        enqueue=[{"max_num_seqs": 1}, {"max_num_seqs": "default"}],
        params=("max_num_seqs",),
        choices={"max_num_seqs": (1, 64)},
    )
    reporter = Started()
    run_study(ctx, FakeRunner(), repo, reporter=reporter)
    rows = repo.list_trials(ctx.name, limit=None)
    assert [r.config == ServingConfig() for r in rows] == [True, False, True]
    assert reporter.started == [(0, True), (1, False), (2, "again")]


def test_a_configuration_the_sampler_draws_again_is_not_launched_again(db_url: str) -> None:
    """A small space runs out before the budget (on an H100, 2026-12-06, the search launched
    attention_backend=TRITON_ATTN three times in a row): a configuration the study measured is
    recorded as a repeat of that trial, counted (FAIL to the sampler, as a fault), not launched."""
    repo = make_repo(db_url)
    ctx = make_context(
        db_url, trials=8, params=("max_num_seqs",), choices={"max_num_seqs": (1, 64)}
    )
    runner = FakeRunner()
    ranked = run_study(ctx, runner, repo)

    assert len(runner.calls) == len(set(runner.calls)), "each configuration launched once"
    rows = repo.list_trials(ctx.name, limit=None)
    assert len(rows) == 8 and repo.get_study(ctx.name).status == "finished"
    repeats = [r for r in rows if r.failure is FailureClass.REPEATED]
    assert repeats, "eight trials of at most three configurations repeat some"
    measured = {r.config: r for r in rows if r.status is TrialStatus.COMPLETE}
    assert len(measured) == len(runner.calls) == 8 - len(repeats)
    study = {t.number: t for t in open_optuna_study(ctx, create=False).get_trials()}
    for row in repeats:
        first = measured[row.config]
        assert row.status is TrialStatus.PRUNED and first.number < row.number
        assert f"trial #{first.number} measured this configuration" in row.failure_detail
        assert row.objective_values is None and row.score is None
        told = study[row.number]
        assert told.state is optuna.trial.TrialState.FAIL and told.user_attrs["counted"]
    assert sorted(r.number for r in ranked) == sorted(r.number for r in measured.values())


def test_a_study_resumed_on_another_card_measures_the_defaults_there_and_scores_by_them(
    db_url: str,
) -> None:
    """On the H100 (2026-12-06) a study resumed on a card that served x1.047 of the previous
    one scored Triton x1.025 against the previous card's defaults; confirmed on one card it was
    x0.980. The defaults now run on a card that never ran them, and its trials are scored
    against them."""
    from tuner.scoring import objectives as scoring
    from tuner.study.loop import SilentReporter
    from tuner.study.standings import baseline, score_reference, trial_score

    class Phases(SilentReporter):
        def __init__(self) -> None:
            self.said: list[tuple[str, str]] = []

        def phase(self, phase: str, detail: str) -> None:
            self.said.append((phase, detail))

    repo = make_repo(db_url)
    queued = [{"max_num_seqs": 64}, {"max_num_seqs": 1}]

    def context(trials: int) -> StudyContext:
        return make_context(
            db_url,
            trials=trials,
            params=("max_num_seqs",),
            choices={"max_num_seqs": (1, 64)},
            enqueue=queued,
        )

    run_study(context(2), FakeRunner(card="GPU-a"), repo)
    reporter = Phases()
    faster = FakeRunner(card="GPU-b", card_speed=1.05)
    run_study(context(4), faster, repo, resume=True, reporter=reporter)

    rows = repo.list_trials("s1", limit=None)
    assert [(r.number, r.gpu_uuid, r.is_baseline) for r in rows] == [
        (0, "GPU-a", True),
        (1, "GPU-a", False),
        (2, "GPU-b", False),  # the first trial on card b shows it has no defaults there
        (3, "GPU-b", True),  # so they run next
    ]
    assert faster.calls[1] == ServingConfig()
    assert any(
        p == "defaults" and "(GPU-b) has not run vLLM's defaults" in d for p, d in reporter.said
    )

    objective = context(4).spec.objective
    ranked = {r.number: r for r in rank(repo, "s1", objective)}
    on_b = scoring.score_values(rows[2].objective_values or (), objective, rows[3].objective_values)
    on_a = scoring.score_values(rows[2].objective_values or (), objective, rows[0].objective_values)
    assert ranked[2].score == pytest.approx(on_b) and on_a > on_b * 1.02
    assert ranked[1].score == pytest.approx(
        scoring.score_values(rows[1].objective_values or (), objective, rows[0].objective_values)
    )
    assert ranked[0].score == ranked[3].score == pytest.approx(1.0)
    # Every surface reads one reference: the trial table's score, and the defaults beside a pick.
    assert trial_score(rows[2], score_reference(rows), objective) == pytest.approx(on_b)
    assert (
        baseline(rows, "GPU-b") == rows[3] and baseline(rows) == baseline(rows, "GPU-a") == rows[0]
    )


def test_the_sampler_draws_an_untried_configuration_where_it_would_draw_one_again(
    db_url: str,
) -> None:
    """TPE, once it models a small categorical space, draws its best so far again (optuna
    issue 2021): the trial is given one of the untried configurations instead, so that five
    trials of a space of five configurations launch all five."""
    repo = make_repo(db_url)
    ctx = make_context(
        db_url, trials=5, params=("max_num_seqs",), choices={"max_num_seqs": (1, 16, 64, 256)}
    )
    runner = FakeRunner()
    run_study(ctx, runner, repo)
    assert len(runner.calls) == len(set(runner.calls)) == 5, runner.calls
    rows = repo.list_trials(ctx.name, limit=None)
    assert len(rows) == 5 and all(r.status is TrialStatus.COMPLETE for r in rows)


def test_the_joint_space_is_what_the_drawn_trials_share_not_a_queued_trial_lacking_a_lever() -> (
    None
):
    """A lever plan's search draws knobs (the levers) that the defaults' queued trial lacks:
    TPE's joint space, the knobs every finished trial holds, left them out, so the whole search
    drew them knob by knob, where no untried rule applies (a replay of the H200's heavy table,
    bench/plan_replay.py, took 15.5 GPU-minutes to the target that way, 13.8 jointly). The
    joint space is what the trials the sampler drew share, once there are some."""
    from tuner.study.sampling import Untried

    tpe = optuna.samplers.TPESampler(seed=0, multivariate=True, n_startup_trials=1)
    study = optuna.create_study(sampler=Untried(tpe, 0))
    knob = optuna.distributions.CategoricalDistribution(["default", 1, 64])
    lever = optuna.distributions.CategoricalDistribution(["default", 2, 4])
    study.add_trial(  # the defaults, queued: no lever
        optuna.trial.create_trial(
            params={"knob": "default"},
            distributions={"knob": knob},
            value=1.0,
            system_attrs={"fixed_params": {"knob": "default"}},
        )
    )
    assert set(study.sampler.infer_relative_search_space(study, study.trials[0])) == {"knob"}
    for value, (k, v) in enumerate([(1, 2), (64, 4)], 2):
        study.add_trial(
            optuna.trial.create_trial(
                params={"knob": k, "lever": v},
                distributions={"knob": knob, "lever": lever},
                value=float(value),
            )
        )
    frozen = study.trials[-1]
    assert set(tpe.infer_relative_search_space(study, frozen)) == {"knob"}
    assert set(study.sampler.infer_relative_search_space(study, frozen)) == {"knob", "lever"}
    assert set(study.ask().relative_params) == {"knob", "lever"}  # drawn jointly

    # As TPE does: a conditional knob (the FlashAttention version) that a finished trial lacks,
    # and a knob a finished trial drew from other choices, stay out of the joint space.
    fa = optuna.distributions.CategoricalDistribution(["default", 2, 3])
    other = optuna.distributions.CategoricalDistribution(["default", 2, 4, 8])
    study = optuna.create_study(sampler=Untried(tpe, 0))
    study.add_trial(
        optuna.trial.create_trial(
            params={"knob": "default", "lever": "default"},
            distributions={"knob": knob, "lever": other},
            value=1.0,
            system_attrs={"fixed_params": {"knob": "default", "lever": "default"}},
        )
    )
    for value, (k, v) in enumerate([(1, 2), (64, 4)], 2):
        study.add_trial(
            optuna.trial.create_trial(
                params={"knob": k, "lever": v, "flash_attn_version": 3},
                distributions={"knob": knob, "lever": lever, "flash_attn_version": fa},
                value=float(value),
            )
        )
    assert set(study.sampler.infer_relative_search_space(study, study.trials[-1])) == {"knob"}


def test_a_configuration_whose_kernel_vllm_chose_in_a_measured_trial_counts_as_tried(
    db_url: str,
) -> None:
    """On Hopper vLLM's own choice of attention kernel is FLASH_ATTN, so a space that searches
    attention_backend beside another knob names some FLASH_ATTN launches twice, as "default" and
    as FLASH_ATTN (an H100 search measured both). A configuration whose kernel a measured trial
    ran by vLLM's choice counts as tried: the sampler draws others, and the space runs out
    before all nine names are launched (its startup draws, at random, may still launch the
    explicit name before the default one, whose choice is known only once it ran)."""
    from tuner.study.loop import _repeated
    from tuner.study.standings import measured_before

    repo = make_repo(db_url)
    ctx = make_context(
        db_url,
        trials=9,
        params=("attention_backend", "max_num_seqs"),
        choices={"attention_backend": ("FLASH_ATTN", "FLASHINFER"), "max_num_seqs": (1, 64)},
    )
    runner = FakeRunner(backend="FLASH_ATTN")
    run_study(ctx, runner, repo)
    ran = [c.replace(attention_backend=c.attention_backend or "FLASH_ATTN") for c in runner.calls]
    assert len(set(ran)) == 6, "every kernel with every max_num_seqs measured"
    assert len(runner.calls) < 9, runner.calls
    rows = repo.list_trials(ctx.name, limit=None)
    assert len(rows) == 9 and repo.get_study(ctx.name).status == "finished"
    assert rows[0].config == ServingConfig() and rows[0].effective_backend == "FLASH_ATTN"
    named = ServingConfig(attention_backend="FLASH_ATTN")
    assert measured_before(rows[:1], named) == rows[0]
    assert measured_before(rows[:1], ServingConfig(attention_backend="FLASHINFER")) is None
    said = _repeated(named, rows[0]).failure_detail or ""
    assert said.startswith("trial #0 measured this configuration (defaults, the same kernel)")


def test_a_candidate_that_names_the_kernel_the_defaults_ran_is_not_confirmed(
    tmp_path: Path,
) -> None:
    """vLLM's defaults ran FLASH_ATTN (its own choice); a trial that names FLASH_ATTN runs the
    same launch. It took a confirmation slot, and the confirmation compared the defaults with
    themselves while the best distinct configuration went unconfirmed."""
    from tuner.study.confirm import confirmation_candidates
    from tuner.study.standings import standings

    url = f"sqlite:///{tmp_path / 'twins.db'}"
    repo = make_repo(url)
    twin, other = {"attention_backend": "FLASH_ATTN"}, {"max_num_seqs": 64}
    ctx = make_context(url, trials=3, name="twins", params=("attention_backend", "max_num_seqs"),
                       choices={"attention_backend": ("FLASH_ATTN", "TRITON_ATTN"),
                                "max_num_seqs": (1, 64)},
                       enqueue=[twin, other], confirm_top=1)  # fmt: skip
    run_study(ctx, FakeRunner(backend="FLASH_ATTN"), repo)
    rows = repo.list_trials("twins", limit=None)
    ranked = standings(rows, ctx.spec.objective, ctx.slo)
    named = next(r for r in ranked if r.config == ServingConfig(**twin))
    rest = [r for r in ranked if r is not named]
    # Whatever the fake measured, put the twin first among the candidates.
    ((number, config),) = confirmation_candidates(ctx, [named, *rest])
    assert config != named.config and config == ServingConfig(**other), (number, config)


def test_a_capacity_studys_confirmation_compares_the_capacity(tmp_path: Path) -> None:
    """Its launches' capacity is compared beside the fixed-load metrics (the confirmation
    decides on it: tests/unit/test_confirm_choose.py), and its looks ran to a verdict."""
    ctx, repo = _capacity_study(
        tmp_path / "cap.db", enqueue=[{"max_num_seqs": 64}], confirm_launches=2, confirm_top=1
    )
    (comparison,) = repo.list_comparisons(ctx.name)
    metrics = {m["metric"]: m for m in comparison.results["metrics"]}
    capacity = metrics["capacity_output_throughput"]
    assert capacity["label"] == "capacity out tok/s" and len(capacity["a"]["values"]) >= 2
    assert comparison.verdicts["capacity_output_throughput"]


def test_a_joining_worker_never_writes_running_over_a_confirmation(tmp_path: Path) -> None:
    """A worker that joined read the study "running", then its runner claimed the confirmation,
    then the joiner wrote "running" over it: its own claim then succeeded, and two
    confirmations ran side by side with colliding launch numbers."""
    url = f"sqlite:///{tmp_path / 'join.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=1, name="join", confirm_launches=2, confirm_top=1)
    run_study(ctx, FakeRunner(), repo)
    repo.set_study_status("join", "confirming")  # its runner claimed the confirmation

    class ReadBefore(Repository):  # what the joiner read just before that claim
        def get_study(self, name: str):  # type: ignore[no-untyped-def]
            row = super().get_study(name)
            return None if row is None else dataclasses.replace(row, status="running")

    joiner = FakeRunner()
    run_study(ctx, joiner, ReadBefore(repo._engine), join=True)
    assert repo.get_study("join").status == "confirming"
    assert joiner.calls == []  # no trial, no second confirmation


def test_a_result_stored_before_optuna_was_told_keeps_its_place_in_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped between storing a trial's result and telling Optuna (a SIGTERM, a second
    Ctrl-C): the resume failed its Optuna trial uncounted and not retried, so the study ran
    one trial more than its budget, beside a row Optuna never learned."""
    url = f"sqlite:///{tmp_path / 'tell.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="tell")
    with (
        _stopped_after_storing(monkeypatch, 1, KeyboardInterrupt),
        pytest.raises(KeyboardInterrupt),
    ):
        run_study(ctx, FakeRunner(), repo)
    states = [t.state for t in optuna.load_study(study_name="tell", storage=url).trials]
    assert states[1] is optuna.trial.TrialState.RUNNING  # the window this test is about
    again = FakeRunner()
    run_study(ctx, again, repo, resume=True)
    rows = repo.list_trials("tell", limit=None)
    assert [r.number for r in rows] == [0, 1] and again.calls == []
    assert all(r.status is TrialStatus.COMPLETE for r in rows)


def test_a_combination_the_rules_rule_out_uses_the_budget_only_when_drawn_again(
    db_url: str,
) -> None:
    """A rule-rejected draw gives its place in the budget to the next draw; drawn again, it
    takes one, or a sampler that keeps drawing it (every other combination tried) would hold
    the study open for good. The same ruled-out configuration queued twice: the first costs no
    trial, the second one."""
    repo = make_repo(db_url)
    bad = {"max_num_seqs": 64, "max_num_batched_tokens": 32}  # vLLM refuses: tokens < seqs
    ctx = make_context(
        db_url, trials=4, params=("max_num_seqs", "max_num_batched_tokens"),
        choices={"max_num_seqs": (1, 8, 64), "max_num_batched_tokens": (32, 2048)},
        enqueue=[bad, bad],
    )  # fmt: skip
    from tuner.study.loop import SilentReporter

    places: list[int | None] = []

    class Places(SilentReporter):
        def trial_started(self, number, index, total, config, baseline):  # type: ignore[no-untyped-def]
            places.append(index)

    runner = FakeRunner()
    run_study(ctx, runner, repo, reporter=Places())
    rows = repo.list_trials(ctx.name, limit=None)
    ruled_out = [r for r in rows if r.failure is FailureClass.INVALID_CONFIG]
    assert len(ruled_out) == 2
    assert "no trial of the budget" in ruled_out[0].failure_detail
    assert "drawn again, it uses a trial of the budget" in ruled_out[1].failure_detail
    assert len(runner.calls) == 3  # 4 trials: 3 launches and the second ruled-out draw
    # The progress line said "trial 2/4" for the free draw and again for the next one.
    assert places == [1, None, 2, 3, 4]


def test_a_ruled_out_draw_is_free_once_even_when_another_worker_ruled_it_out_meanwhile() -> None:
    """Whether a ruled-out draw was the first of its configuration was read from the rows of
    the loop's sweep: another worker's draw of it, ruled out after that read, left both free,
    and the study ran a trial over its budget ("4 of 3 search trials" on every surface). The
    trials as they are at the screening decide, in number order as the surfaces count."""
    from types import SimpleNamespace

    from tuner.domain import TrialResult
    from tuner.study import sharing
    from tuner.study.loop import _free_draw

    bad = ServingConfig(max_num_seqs=64, max_num_batched_tokens=32)
    ruled = TrialResult(bad, TrialStatus.PRUNED, failure=FailureClass.INVALID_CONFIG)
    other = SimpleNamespace(
        number=3,
        user_attrs={sharing.DRAWN: bad.to_dict(), "failure_class": "invalid_config"},
    )

    def study(*trials: Any) -> Any:
        return SimpleNamespace(get_trials=lambda deepcopy=True: list(trials))

    mine = SimpleNamespace(number=5)
    assert not _free_draw(study(other), mine, bad, ruled, [])  # stale rows: no ruled-out row
    assert _free_draw(study(other), SimpleNamespace(number=2), bad, ruled, [])  # mine first
    assert _free_draw(study(), mine, bad, ruled, [])
    found = TrialResult(bad, TrialStatus.PRUNED, failure=FailureClass.DOMINATED)
    assert not _free_draw(study(), mine, bad, found, [])  # only a rule's refusal is free


def test_an_enqueued_configuration_runs_as_written_in_a_planned_study(tmp_path: Path) -> None:
    """A study with no [space] of its own plans its levers after the defaults; its [[enqueue]]
    entry was then drawn from the plan's narrower space: the knobs the plan does not search
    dropped, the others drawn (`max_num_seqs=32, enable_prefix_caching` ran as
    `api_server_count=4, stream_interval=2`). The user's configuration never ran."""
    from tuner.catalog.gpus import get_gpu
    from tuner.catalog.models import resolve_model
    from tuner.domain import TrialResult, Workload
    from tuner.domain.workload import parse_slo
    from tuner.space import SearchSpace
    from tuner.spec.study import StudySpec
    from tuner.vllm.flags import shipped

    class FrontendBound(FakeRunner):  # what the diagnosis reads as an API server at its limit
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            busy = {"server_cpu_peak_process": 0.98, "gpu_utilization_mean": 0.4,
                    "requests_running_peak": 64.0}  # fmt: skip
            return dataclasses.replace(super().run(config, workload, **kw), server_metrics=busy)

    url = f"sqlite:///{tmp_path / 'planned.db'}"
    workload = TINY_WORKLOAD.replace(concurrency=64)
    wanted = {"max_num_seqs": 32, "enable_prefix_caching": True}
    spec = StudySpec(model="tiny-ernie", gpu="h100", workload=workload.name, trials=4,
                     enqueue=(wanted,), name="planned", confirm_launches=0,
                     ).with_overrides(objective="throughput")  # fmt: skip
    model, gpu = resolve_model("tiny-ernie"), get_gpu("h100")
    space = SearchSpace(model, gpu, workload, fixed=spec.fixed, flags=shipped("0.26.0"))
    ctx = StudyContext(name="planned", spec=spec, model=model, gpu=gpu, workload=workload,
                       slo=parse_slo(""), space=space, storage_url=url, vllm_version="0.26.0",
                       serve_model="tiny-ernie")  # fmt: skip
    repo = make_repo(url)
    runner = FrontendBound()
    run_study(ctx, runner, repo)
    row = repo.get_study("planned")
    assert row is not None and row.spec.get("plan_record")  # the plan was made
    assert space.config_from(wanted) in runner.calls


def test_defaults_that_served_nothing_on_a_second_card_run_there_once(tmp_path: Path) -> None:
    """A study resumed on a second card measures vLLM's defaults there once. Where they
    served nothing (a capacity of 0 under the SLO: no yardstick, so out of the score's
    reference), the card read as never having run them, and they were queued again after
    every trial: 7 of 8 launches."""
    from tuner.domain import TrialResult, Workload
    from tuner.domain.measurements import Estimate

    class ZeroDefaults(FakeRunner):
        def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
            result = super().run(config, workload, **kw)
            if config != ServingConfig() or result.status is not TrialStatus.COMPLETE:
                return result
            metrics = {**result.metrics, "output_throughput": Estimate(0.0, 0.0, 0.0, (0.0,))}
            return dataclasses.replace(result, metrics=metrics)

    url = f"sqlite:///{tmp_path / 'cards.db'}"
    repo = make_repo(url)
    run_study(make_context(url, trials=2, name="cards"), FakeRunner(card="GPU-a"), repo)
    runner = ZeroDefaults(card="GPU-b")
    run_study(make_context(url, trials=10, name="cards"), runner, repo, resume=True)
    assert sum(c == ServingConfig() for c in runner.calls) == 1  # the search had the rest
    assert len(runner.calls) >= 5
