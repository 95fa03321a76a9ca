"""The decision design end to end on the in-process fake runner with known noise: a calibration
stores a noise profile, `tuner compare`'s pipeline adds launch pairs until B/A is decided, and
every launch lands in tuner_launches. A known x1.2 gain is found "better" within the launch
budget; with no gain the comparison never says "better", whatever the seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.abtest.calibrate import run_calibration
from tuner.abtest.decide import Design
from tuner.abtest.guard import FindingGuard
from tuner.abtest.pair import PairSetup, run_pair, setup_pair
from tuner.abtest.pipeline import Bench, Watch
from tuner.db import migrate
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import ServingConfig
from tuner.scoring.significance import BETTER
from tuner.testing.fake_runner import FakeRunner

QUICK = "concurrency=8,requests_per_window=8,warmup_requests=1,output_tokens=16,windows=3"
B_SPEC = "max_num_batched_tokens=4096"  # not in the fake's performance model
LAUNCH_SD, WINDOW_SD = 0.06, 0.06  # log scale: a launch's value SD about 0.07
BUDGET = 6


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repository:
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    migrate.upgrade(url)
    return Repository(make_engine(url))


def _setup() -> PairSetup:
    return setup_pair(
        model="tiny-ernie",
        gpu="cpu",
        a="defaults",
        b=B_SPEC,
        workload="smoke",
        workload_set=QUICK,
        confidence=0.95,
        vllm_python=None,
    )


def _bench(setup: PairSetup, repo: Repository, seed: int, gain: float, command: str) -> Bench:
    b_config = setup.arms[1].config
    runner = FakeRunner(
        seed=seed,
        launch_sd=LAUNCH_SD,
        window_sd=WINDOW_SD,
        speedup={b_config: gain} if gain != 1.0 else None,
    )
    design = Design.sequential(3, BUDGET, 0.95, 0.05) if command == "compare" else None
    return Bench(
        command=command,
        model=setup.model,
        gpu=setup.gpu,
        launches=5 if design is None else design.first,
        runner=FindingGuard(runner, setup.model),
        repo=repo,
        hardware="fake",
        vllm_version="0.0.0+fake",
        design=design,
    )


def _calibrate(setup: PairSetup, repo: Repository, seed: int) -> None:
    bench = _bench(setup, repo, seed, 1.0, "calibrate")
    calibration = run_calibration(bench, setup.workload, setup.arms[0], Watch())
    assert calibration.completed == 5 and calibration.profile is not None
    thr = calibration.profile.get("output_throughput")
    assert thr is not None and thr.df == 4 and thr.windows == 3


def test_a_known_gain_is_found_better_within_the_budget(repo: Repository) -> None:
    setup = _setup()
    _calibrate(setup, repo, seed=100)
    outcome = run_pair(_bench(setup, repo, 1, 1.2, "compare"), setup, Watch())
    look = outcome.look
    assert look is not None and outcome.verdicts["overall"] == BETTER
    assert look.step.n_a == look.step.n_b <= BUDGET
    assert look.step.interval is not None and look.step.interval.low > 1.0
    assert 1.0 < look.step.interval.low <= 1.2 <= look.step.interval.high
    # The profile of the calibration was used (its 4 df and the comparison's own).
    assert look.step.interval.method == "pooled" and look.profile is not None
    decision = outcome.results["decision"]
    assert decision["kind"] == "sequential" and decision["stopped"] == "significant"
    assert outcome.results["gpu_minutes"] > 0 and outcome.results["noise"]["launches"] == 5
    # Every launch of both commands is stored on the key: the calibration's and these.
    rows = repo.list_launches(look.profile.key.to_dict())
    assert len(rows) == 5 + look.step.n_a + look.step.n_b
    assert {r.source for r in rows} == {"calibrate", "compare"}
    assert sum(r.is_defaults for r in rows) == 5 + look.step.n_a


@pytest.mark.parametrize("seed", range(4))
def test_no_gain_is_never_better(repo: Repository, seed: int) -> None:
    setup = _setup()
    _calibrate(setup, repo, seed=200 + seed)
    outcome = run_pair(_bench(setup, repo, seed, 1.0, "compare"), setup, Watch())
    assert outcome.look is not None
    assert outcome.verdicts["overall"] != BETTER, outcome.look.step
    assert outcome.look.step.n_a <= BUDGET
    found = outcome.look.step.interval
    assert found is not None and found.low <= 1.0 <= found.high


def test_the_fake_runners_known_noise_is_what_the_profile_measures(repo: Repository) -> None:
    # 12 launches of one configuration: the nested ANOVA recovers the knobs within sampling
    # error (launch SD 0.06 and window SD 0.06 on the log scale; 11 and 24 df).
    setup = _setup()
    runner = FakeRunner(seed=7, launch_sd=LAUNCH_SD, window_sd=WINDOW_SD, launch_spread=0.0)
    from tuner.abtest.compare import launch_values

    results = [runner.run(ServingConfig(), setup.workload) for _ in range(12)]
    from tuner.abtest.profile import log_values
    from tuner.scoring.noise import Launch, components

    c = components([Launch("d", tuple(log_values(r)["output_throughput"])) for r in results])
    assert c is not None and c.df == 11 and c.window_df == 24
    assert 0.03 < c.window_var**0.5 < 0.09  # type: ignore[operator]
    assert 0.04 < c.sd < 0.11
    assert len(launch_values(results, "output_throughput")) == 12


def _claims_bench(repo: Repository, runner: FakeRunner, setup: PairSetup) -> Bench:
    design = Design.sequential(3, BUDGET, 0.95, 0.05)
    return Bench(
        command="verify-claims",
        model=setup.model,
        gpu=setup.gpu,
        launches=design.first,
        runner=FindingGuard(runner, setup.model),
        repo=repo,
        hardware="fake",
        vllm_version="0.0.0+fake",
        design=design,
    )


def _planned(setup: PairSetup, cid: str, b: dict[str, object], metric: str, claimed: str) -> Any:
    from tuner.abtest.claims import Claim, plan
    from tuner.abtest.claims.figures import parse_claimed

    parsed = parse_claimed(claimed, metric)
    claim = Claim(cid, "s", {}, b, setup.workload, metric, parsed, parsed.text)
    (planned,) = plan([claim], setup.model, setup.gpu)
    assert planned.reason == "" and planned.b is not None
    return planned


def test_verify_claims_decides_a_known_gain_by_the_same_design(repo: Repository) -> None:
    from tuner.abtest.claims.verdicts import CONSISTENT, claim_record, verify

    setup = _setup()
    _calibrate(setup, repo, seed=100)
    p = _planned(setup, "gain", {"max_num_batched_tokens": 4096}, "output_throughput", "1.2")
    runner = FakeRunner(seed=1, launch_sd=LAUNCH_SD, window_sd=WINDOW_SD, speedup={p.b: 1.2})
    (outcome,) = verify([p], _claims_bench(repo, runner, setup), 3, 0.95, watch=Watch())
    look = outcome.look
    assert look is not None and look.metric == "output_throughput"
    assert look.step.reason == "significant" and look.step.n_a == look.step.n_b <= BUDGET
    assert look.step.interval is not None and look.step.interval.method == "pooled"
    assert outcome.verdict == CONSISTENT, outcome.reason
    assert len(runner.calls) == look.step.n_a + look.step.n_b
    record = claim_record(outcome)
    assert record["gpu_minutes"] == look.gpu_minutes > 0
    assert record["decision"]["launches"] == {"a": look.step.n_a, "b": look.step.n_b}
    assert outcome.comparison_id is not None
    row = repo.get_comparison(outcome.comparison_id)
    assert row is not None and row.repeats == look.step.n_a
    assert row.results["kind"] == "claim" and row.results["gpu_minutes"] == look.gpu_minutes
    assert row.results["decision"]["metric"] == "output_throughput"
    assert row.results["decision"]["stopped"] == "significant" and row.results["noise"]
    sources = [r.source for r in repo.list_launches(look.profile.key.to_dict())]  # type: ignore[union-attr]
    assert sources.count("verify-claims") == look.step.n_a + look.step.n_b


def test_a_claims_own_metric_drives_the_stopping(repo: Repository) -> None:
    """A memory claim is decided at the first look (memory barely varies) although the output
    throughput of the same launches is far from decided; a no-gain throughput claim at the same
    noise goes on past the first look and never says the claimed gain is there."""
    from tuner.abtest.claims.verdicts import CONSISTENT, verify

    setup = _setup()
    memory = _planned(setup, "mem", {"gpu_memory_utilization": 0.5}, "memory_gib", "0.6")
    runner = FakeRunner(seed=3, launch_sd=LAUNCH_SD, window_sd=WINDOW_SD)
    (outcome,) = verify([memory], _claims_bench(repo, runner, setup), 3, 0.95, watch=Watch())
    assert outcome.look is not None and outcome.look.metric == "memory_gib"
    assert (outcome.look.step.n_a, outcome.look.step.reason) == (3, "significant")
    assert outcome.comparison is not None
    thr = outcome.comparison.metric("output_throughput")
    assert thr.low is not None and thr.high is not None and thr.low <= 1.0 <= thr.high
    assert len(runner.calls) == 6
    for seed in range(3):
        flat = _planned(setup, f"flat{seed}", {"max_num_batched_tokens": 4096},
                        "output_throughput", "1.2")  # fmt: skip
        runner = FakeRunner(seed=10 + seed, launch_sd=LAUNCH_SD, window_sd=WINDOW_SD)
        (no_gain,) = verify([flat], _claims_bench(repo, runner, setup), 3, 0.95, watch=Watch())
        assert no_gain.look is not None and no_gain.verdict != CONSISTENT, no_gain.reason
        assert 3 < no_gain.look.step.n_a <= BUDGET  # undecided at the first look: more pairs


def test_a_run_into_another_database_does_not_resume_and_calibrate_names_its_own_option(
    repo: Repository, tmp_path: Path
) -> None:
    """An interrupted calibration run again with another --storage resumed its launches,
    stored only in the first database: the second reported "3 of 3 launches complete" over a
    profile of 2. The database is part of a run's launch log now. The line that says a log of
    other options was kept named compare's options (--repeats, ...), which calibrate lacks."""
    from tuner.abtest.launchlog import describe_resumed

    setup = _setup()
    url = f"sqlite:///{tmp_path / 'other.db'}"
    migrate.upgrade(url)
    other = Repository(make_engine(url))
    arm = setup.arms[0]
    first = _bench(setup, repo, 1, 1.0, "calibrate").launch_log(setup.workload, [arm])
    second = _bench(setup, other, 1, 1.0, "calibrate").launch_log(setup.workload, [arm])
    assert first.path != second.path
    same = _bench(setup, Repository(make_engine(f"sqlite:///{tmp_path}/./tuner.db")), 1, 1.0,
                  "calibrate").launch_log(setup.workload, [arm])  # fmt: skip
    assert same.path == first.path  # one database, whatever the spelling of its URL
    spellings = ("postgresql://u:pw@db.example/t", "postgresql+psycopg://u@DB.example:5432/t?x=1")
    assert len({Repository(make_engine(u)).database for u in spellings}) == 1
    result = FakeRunner(seed=1).run(arm.config, setup.workload)
    first.record(arm, result)
    said = describe_resumed(second.load([arm]), [arm], second)
    assert said is not None and said.startswith("not resumed:"), said
    assert "the database, --launches)" in said and "--repeats" not in said
    compare = _bench(setup, other, 1, 1.0, "compare").launch_log(setup.workload, setup.arms)
    assert compare.options.startswith("--repeats/--max-launches")


def test_a_calibration_that_completes_one_launch_says_its_profile_is_the_earlier_one(
    repo: Repository,
) -> None:
    """One launch of a calibration completed and an earlier one had stored a profile: exit 0
    and the earlier profile printed as if this run had measured it."""
    import dataclasses

    from tuner.domain import FailureClass, TrialStatus

    setup = _setup()
    bench = _bench(setup, repo, 5, 1.0, "calibrate")
    calibration = run_calibration(bench, setup.workload, setup.arms[0], Watch())
    assert calibration.profile is not None and calibration.earlier_note() is None
    done = calibration.results[0]
    lost = dataclasses.replace(
        done, status=TrialStatus.FAILED, failure=FailureClass.CRASHED, metrics={}, windows=()
    )
    one = dataclasses.replace(calibration, results=(done, lost))
    note = one.earlier_note()
    assert note is not None and note.startswith("this run completed 1 launch: the profile")
    assert dataclasses.replace(one, profile=None).earlier_note() is None
