"""Interrupted A/B runs resume: launches already made are reused, in the interleaving they had,
for `tuner compare` / `verify-claims` (the launch log on disk) and for a study's confirmation
phase (its confirm trials in the database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.studykit import make_repo, memory_confirmation_context
from tuner.abtest.claims import Claim, plan
from tuner.abtest.claims.figures import parse_claimed
from tuner.abtest.claims.verdicts import evaluate
from tuner.abtest.compare import Arm, run_interleaved
from tuner.abtest.launchlog import LaunchLog, describe_resumed, run_key
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus, Workload
from tuner.load.workloads import WORKLOADS
from tuner.study.confirm import CONFIRM_NUMBER_BASE
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

LOAD = Workload(name="w", prompt_tokens=32, output_tokens=8, requests_per_window=8)
A, B = Arm("defaults", ServingConfig()), Arm("b", ServingConfig(max_num_seqs=8))


class StopAfter(FakeRunner):
    """Raises KeyboardInterrupt (the tuner being stopped) at launch number ``after`` + 1."""

    def __init__(self, after: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.after = after

    def run(self, config, workload, *, slo=None, on_phase=None, **kw):  # type: ignore[no-untyped-def]
        if len(self.calls) >= self.after:
            raise KeyboardInterrupt
        return super().run(config, workload, slo=slo, on_phase=on_phase, **kw)


def test_run_interleaved_skips_the_rounds_earlier_launches_filled() -> None:
    earlier = FakeRunner(seed=9)
    done = [
        [earlier.run(A.config, LOAD), earlier.run(A.config, LOAD)],
        [earlier.run(B.config, LOAD)],
    ]
    runner = FakeRunner()
    results = run_interleaved([A, B], runner, LOAD, 3, done=done)
    # Round 0: both done; round 1: only B; round 2: both.
    assert runner.calls == [B.config, A.config, B.config]
    assert [len(r) for r in results] == [3, 3]
    assert results[0][:2] == done[0] and results[1][0] == done[1][0]
    with pytest.raises(ValueError, match="one list"):
        run_interleaved([A, B], runner, LOAD, 3, done=[[]])


def test_the_launch_log_keeps_what_can_be_reused(tmp_path: Path) -> None:
    log = LaunchLog.for_run(tmp_path, "compare", run_key(a=1))
    assert log.load([A, B]) == [[], []] and describe_resumed([[], []], [A, B]) is None
    fake = FakeRunner()
    complete = fake.run(A.config, LOAD)
    interrupted = TrialResult(B.config, TrialStatus.FAILED, FailureClass.INTERRUPTED, "stopped")
    finding = TrialResult(B.config, TrialStatus.FAILED, FailureClass.MEMORY_EXCEEDED, "OOM")
    other = fake.run(ServingConfig(max_num_seqs=64), LOAD)  # no arm of this run
    for arm, result in ((A, complete), (B, interrupted), (B, finding), (B, other)):
        log.record(arm, result)
    with log.path.open("a") as f:
        f.write('{"arm": "b", "result": {"status": "compl')  # a write cut short
    done = log.load([A, B])
    assert done == [[complete], [finding]]
    assert describe_resumed(done, [A, B]) == (
        "resuming: 1 of defaults, 1 of b already measured by an interrupted run of this command"
    )
    log.clear()
    assert not log.path.exists()
    assert run_key(a=1, b=[1, 2]) == run_key(b=[1, 2], a=1) != run_key(a=2, b=[1, 2])
    # A configuration against itself: its sides' counts were one ("3 of x" for 3 + 4).
    same = Arm("b", B.config)
    assert describe_resumed([[complete] * 3, [complete] * 4], [B, same]) == (
        "resuming: 3 of b (A), 4 of b (B) already measured by an interrupted run of this command"
    )


def test_an_a_a_comparison_resumes_each_launch_to_its_own_side(tmp_path: Path) -> None:
    """A and B the same configuration (an A/A run measures the noise): a resumed run gave
    every logged launch to B, then launched A three times out of the interleaved order."""
    same_a, same_b = Arm("defaults", ServingConfig()), Arm("again", ServingConfig())
    log = LaunchLog.for_run(tmp_path, "compare", run_key(a=2))
    fake = FakeRunner()
    for arm in (same_a, same_b, same_a):
        log.record(arm, fake.run(arm.config, LOAD))
    assert [len(d) for d in log.load([same_a, same_b])] == [2, 1]
    # Logged under labels the run no longer has (or one label twice): shared out evenly.
    twins = [Arm("x", ServingConfig()), Arm("x", ServingConfig())]
    assert [len(d) for d in log.load(twins)] == [2, 1]


def test_verify_claims_resumes_from_its_launch_log(tmp_path: Path) -> None:
    small = WORKLOADS["smoke"].replace(requests_per_window=8, warmup_requests=0, windows=2)
    at_least = parse_claimed(">= 1.5", "e2e_p99_ms")
    claim = Claim("c", "s", {}, {"max_num_seqs": 1}, small, "e2e_p99_ms", at_least, ">= 1.5")
    planned = plan([claim], resolve_model("tiny-ernie"), get_gpu("h100"))
    log = LaunchLog(tmp_path / "launches.jsonl")
    first = StopAfter(after=3)
    with pytest.raises(KeyboardInterrupt):
        evaluate(planned, first, 3, 0.95, launch_log=lambda _w, _arms: log)
    said: list[str] = []
    second = FakeRunner()
    (outcome,) = evaluate(
        planned, second, 3, 0.95, launch_log=lambda _w, _arms: log, on_resumed=said.append
    )
    assert len(second.calls) == 3  # 6 launches in all, 3 made before the stop
    # A B, B A: the third launch was B's second.
    assert said and said[0].startswith("resuming: 1 of defaults, 2 of max_num_seqs=1")
    assert outcome.verdict == "consistent"
    assert outcome.comparison is not None
    assert [len(outcome.comparison.metric("e2e_p99_ms").a_values)] == [3]


def test_an_interrupted_confirmation_resumes_without_relaunching(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    repo = make_repo(url)

    def ctx() -> Any:
        return memory_confirmation_context(url)

    # 2 search launches, then 3 of the 6 confirmation launches, then the tuner is stopped.
    with pytest.raises(KeyboardInterrupt):
        run_study(ctx(), StopAfter(after=5), repo)
    confirm = repo.list_trials("s1", phase="confirm", limit=None)
    assert [t.status for t in confirm] == [TrialStatus.COMPLETE] * 3 + [TrialStatus.FAILED]
    assert repo.list_comparisons("s1") == []

    resumed = FakeRunner()
    run_study(ctx(), resumed, repo, resume=True)
    assert len(resumed.calls) == 3  # the interrupted launch and the two never made
    confirm = repo.list_trials("s1", phase="confirm", limit=None)
    numbers = [t.number for t in confirm]
    assert numbers == list(range(CONFIRM_NUMBER_BASE, CONFIRM_NUMBER_BASE + 7))
    (comparison,) = repo.list_comparisons("s1")
    assert comparison.results["launches"] == {"a": 3, "b": 3}


def test_a_run_under_other_options_is_not_resumed_but_said(tmp_path: Path) -> None:
    """Any option in the log's key (the design's --trend included) starts afresh: the launches
    an interrupted run kept under other options are named, with how to use or drop them."""
    kept = LaunchLog.for_run(tmp_path, "compare", run_key(trend=False))
    fake = FakeRunner()
    kept.record(A, fake.run(A.config, LOAD))
    kept.record(B, fake.run(B.config, LOAD))
    LaunchLog.for_run(tmp_path, "verify-claims", run_key(x=1)).record(A, fake.run(A.config, LOAD))
    strange = LaunchLog.for_run(tmp_path, "compare", run_key(other=1))  # other configurations
    strange.record(A, fake.run(ServingConfig(max_num_seqs=64), LOAD))
    # The defaults against something else: one arm in common is another run, not this one.
    shares_a = LaunchLog.for_run(tmp_path, "compare", run_key(other=2))
    shares_a.record(A, fake.run(A.config, LOAD))
    shares_a.record(
        Arm("c", ServingConfig(max_num_seqs=2)), fake.run(ServingConfig(max_num_seqs=2), LOAD)
    )
    log = LaunchLog.for_run(tmp_path, "compare", run_key(trend=True))
    done = log.load([A, B])
    assert done == [[], []]
    said = describe_resumed(done, [A, B], log)
    assert said is not None and said.startswith("not resumed: ")
    assert f"kept 2 launches in {kept.path};" in said and "--trend/--no-trend" in said
    # The design's level and smallest effect key the log too: a rerun with another one
    # kept nothing, and the line did not name them.
    assert "--confidence" in said and "--min-effect" in said
    assert describe_resumed(done, [A, B], log, besides={kept.path}) is None
    assert describe_resumed(done, [A, B]) is None


def test_a_groups_own_run_is_not_elsewhere_to_the_next_group(tmp_path: Path) -> None:
    """verify-claims measures one group a workload, each in a log of its own, all kept until the
    run is stored: the second group's fresh start is not an "other run" of the first's."""
    small = WORKLOADS["smoke"].replace(requests_per_window=8, warmup_requests=0, windows=2)
    other = small.replace(name="smoke-2", output_tokens=small.output_tokens + 1)
    at_least = parse_claimed(">= 1.5", "e2e_p99_ms")
    claims = [
        Claim(name, "s", {}, {"max_num_seqs": 1}, load, "e2e_p99_ms", at_least, ">= 1.5")
        for name, load in (("c1", small), ("c2", other))
    ]
    planned = plan(claims, resolve_model("tiny-ernie"), get_gpu("h100"))

    def log_of(workload: Workload, arms: list[Arm]) -> LaunchLog:
        return LaunchLog.for_run(tmp_path, "verify-claims", run_key(workload=workload.name))

    said: list[str] = []
    outcomes = evaluate(planned, FakeRunner(), 3, 0.95, launch_log=log_of, on_resumed=said.append)
    assert len(outcomes) == 2 and said == []


def test_a_crashed_launch_counts_on_resume_as_it_did_in_the_run(tmp_path: Path) -> None:
    """A launch that crashed (or timed out) counted in the run that made it, but a resumed run
    launched it again: the same command ended with other launches than when run through. One
    the tuner's stop cut short is still launched again."""
    log = LaunchLog.for_run(tmp_path, "compare", run_key(a=3))
    fake = FakeRunner()
    crashed = TrialResult(B.config, TrialStatus.FAILED, FailureClass.CRASHED, "exit 1")
    timed_out = TrialResult(B.config, TrialStatus.FAILED, FailureClass.TIMEOUT, "600 s")
    interrupted = TrialResult(A.config, TrialStatus.FAILED, FailureClass.INTERRUPTED, "stopped")
    complete = fake.run(A.config, LOAD)
    for arm, result in ((A, complete), (B, crashed), (A, interrupted), (B, timed_out)):
        log.record(arm, result)
    assert log.load([A, B]) == [[complete], [crashed, timed_out]]
    runner = FakeRunner()
    results = run_interleaved([A, B], runner, LOAD, 2, done=log.load([A, B]))
    assert runner.calls == [A.config]  # A's second; B's two ended on their own
    assert [len(r) for r in results] == [2, 2]


def test_two_runs_at_once_never_share_a_launch_log(tmp_path: Path) -> None:
    """A second `tuner compare` with the same arguments, started while the first ran, took
    the first one's finished launches for an interrupted run's: both stored comparisons stood
    on the same launches. The second is refused while the first holds the log; once it ends,
    the log is free again."""
    from tuner.errors import UsageError

    log = LaunchLog.for_run(tmp_path, "compare", run_key(a=1))
    with log.exclusive():
        again = LaunchLog.for_run(tmp_path, "compare", run_key(a=1))
        with pytest.raises(UsageError) as refused, again.exclusive():
            pass
        assert str(log.path) in refused.value.message
        with LaunchLog.for_run(tmp_path, "compare", run_key(a=2)).exclusive():  # another run
            pass
    with log.exclusive():
        pass
    assert not [p for p in tmp_path.rglob("*.jsonl")]  # the lock is no log of launches


def test_two_models_of_one_alias_never_share_a_launch_log(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two directories named `m` (or a catalog model's dummy and its real weights) share an
    alias: an interrupted compare of one was resumed with the other's launches."""
    from dataclasses import replace

    from tuner.abtest.pipeline import Bench

    monkeypatch.setenv("TUNER_HOME", str(tmp_path))
    repo = make_repo(f"sqlite:///{tmp_path / 't.db'}")
    dummy = resolve_model("tiny-ernie")
    models = [dummy, *(replace(dummy, source=str(tmp_path / d / "m")) for d in ("A", "C"))]
    benches = [
        Bench("compare", m, get_gpu("cpu"), 3, FakeRunner(), repo, "fake", "0.0.0+fake")
        for m in models
    ]
    assert len({b.launch_log(LOAD, [A, B]).path for b in benches}) == 3
