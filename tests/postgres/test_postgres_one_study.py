"""Many workers, one study, on a real PostgreSQL: `tuner run --parallel 3` and `tuner worker
--study` processes with the fake server behind the real runner (compose's TUNER_SERVER_MODULE
seam), so that processes, servers, watchdogs and the heartbeat are all real.

What is checked: every Optuna trial is accounted for (a result, an interruption, or a trial
given back before it started), the budget is exactly the measured trials asked for, no
configuration is measured by two workers at once, the baseline is measured, a worker
SIGKILLed mid-trial (on a "host" of its own, so that only the heartbeat can tell it died) has
its trial retried by the others, and no process is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest

from tuner.db.repository import Repository
from tuner.db.rows import TrialRow
from tuner.db.session import make_engine
from tuner.domain import FailureClass, TrialStatus
from tuner.study import sharing

REPO = Path(__file__).resolve().parents[2]
STUDY = "one-study"
TRIALS = 8


def spec_text(trials: int = TRIALS, fixed: str = "", startup_s: int = 30) -> str:
    """The study's spec; ``fixed``: a line of the [space] table, e.g. "fixed = {...}"."""
    return f"""
[study]
name = "{STUDY}"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
trials = {trials}
seed = 5

[workload]
requests_per_window = 8
warmup_requests = 2
concurrency = 4
output_tokens = 8

[space]
params = ["max_num_seqs", "enable_prefix_caching"]
choices = {{ max_num_seqs = [4, 16, 64], enable_prefix_caching = [true, false] }}
{fixed}

[runner]
startup_timeout_s = {startup_s}

[confirm]
launches = 0
"""


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex
    (tmp_path / "spec.toml").write_text(spec_text())
    values = {
        **{k: v for k, v in os.environ.items() if k != "TUNER_DB_URL"},
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.3",
        "TUNER_FAKE_STEP_MS": "15",  # a trial measures for about a second
        "TUNER_HEARTBEAT_S": "1",
        "TUNER_TEST_TAG": tag,
        "COLUMNS": "200",
    }
    yield values
    for proc in tagged(tag):  # a failed assertion must not leave processes behind
        with contextlib.suppress(psutil.Error):
            proc.kill()


def tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if (
                proc.info["status"] != psutil.STATUS_ZOMBIE
                and proc.environ().get("TUNER_TEST_TAG") == tag
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture()
def repo(pg_url: str) -> Iterator[Repository]:
    engine = make_engine(pg_url)
    yield Repository(engine)
    engine.dispose()


def tuner(env: dict[str, str], cwd: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        env={**env, **extra},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def optuna_trials(url: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=STUDY, storage=storage).get_trials(deepcopy=True)
    finally:
        storage.engine.dispose()


def check_accounting(url: str, rows: list[TrialRow], trials: int = TRIALS) -> None:
    """Every Optuna trial is a result, an interruption or given back; exactly TRIALS results;
    never one configuration measured twice at once; the baseline measured."""
    frozen = optuna_trials(url)
    assert all(t.state.is_finished() for t in frozen)
    results = [t for t in frozen if sharing.counts(t)]
    assert len(results) == trials
    by_number = {r.number: r for r in rows}
    for t in frozen:
        if sharing.WITHDRAWN in t.user_attrs:
            assert t.number not in by_number, "a withdrawn trial never reached tuner's tables"
        elif not sharing.counts(t):
            assert by_number[t.number].failure is FailureClass.INTERRUPTED
        else:
            assert by_number[t.number].status.is_finished()
    measured = [r for r in rows if r.status is TrialStatus.COMPLETE]
    # A configuration drawn again after it was measured is a result that launched nothing.
    repeats = [r for r in rows if r.failure is FailureClass.REPEATED]
    others = [
        (r.number, r.status, r.failure, r.failure_detail[:300]) for r in rows if r not in measured
    ]
    assert len(measured) + len(repeats) == trials, others
    assert any(r.is_baseline for r in measured), "the defaults were measured"
    spans = [(r.config, r.started_at, r.finished_at) for r in rows if r.finished_at]
    for i, (config, start, end) in enumerate(spans):
        for other, o_start, o_end in spans[i + 1 :]:
            if other == config:
                assert end <= o_start or o_end <= start, f"{config.label()} measured twice at once"


def test_run_parallel_three_workers_share_one_study(
    pg_url: str, env: dict[str, str], tmp_path: Path, repo: Repository
) -> None:
    run = tuner(env, tmp_path, "run", "spec.toml", "--parallel", "3", "--storage", pg_url)
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output
    for i in range(3):
        assert f"[worker {i}]" in output
    assert "best of study one-study" in output
    rows = repo.list_trials(STUDY, limit=None)
    check_accounting(pg_url, rows)
    owners = {t.user_attrs[sharing.WORKER]["pid"] for t in optuna_trials(pg_url) if t.user_attrs}
    assert len(owners) >= 2, "the trials should be spread over the workers"
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert tagged(env["TUNER_TEST_TAG"]) == []


def _shown(url: str) -> str:
    """``url`` as a hint names it: the password masked, quoted for a shell."""
    import shlex

    from tuner.db import safe_url

    return shlex.quote(safe_url(url))


def _until_a_trial_runs(repo: Repository, timeout_s: float = 120.0) -> None:
    """Wait until a worker measures (a trial RUNNING), or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    measuring = False
    while time.monotonic() < deadline and not measuring:
        time.sleep(0.1)
        with contextlib.suppress(Exception):  # no tables before the set-up has made them
            measuring = any(r.status is TrialStatus.RUNNING for r in repo.list_trials(STUDY))


def test_run_parallel_interrupted_says_how_to_go_on_with_its_workers(
    pg_url: str, env: dict[str, str], tmp_path: Path, repo: Repository
) -> None:
    """A Ctrl-C to `tuner run --parallel 2` ended with its workers' "tuner worker --study NAME
    continues it" and its own bare "interrupted": not the command that continues the study as
    it ran, with its workers. It now says that command."""
    run = tuner(env, tmp_path, "run", "spec.toml", "--parallel", "2", "--storage", pg_url)
    _until_a_trial_runs(repo)
    run.send_signal(signal.SIGINT)
    output = run.communicate(timeout=120)[0]
    assert run.returncode == 130, output
    assert output.splitlines()[-1] == (
        "interrupted: the workers' running trials are recorded as interrupted; "
        f"tuner run --study {STUDY} --resume --parallel 2 --storage {_shown(pg_url)} continues it"
    ), output
    # the workers' own lines name the database too (they said `tuner worker --study NAME`,
    # which read the default SQLite file)
    said = [line for line in output.splitlines() if "tuner worker --study" in line]
    assert said and all(f"--storage {_shown(pg_url)}" in line for line in said), output
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "interrupted"
    assert tagged(env["TUNER_TEST_TAG"]) == []


def test_run_parallel_whose_workers_all_died_records_the_study_interrupted(
    pg_url: str, env: dict[str, str], tmp_path: Path, repo: Repository
) -> None:
    """Every worker of `tuner run --parallel 2` SIGKILLed mid-trial (the OOM killer, say): no
    process runs the study any more, and no worker could record it. The command records it
    interrupted, says how to go on, and the resume finishes it."""
    run = tuner(env, tmp_path, "run", "spec.toml", "--parallel", "2", "--storage", pg_url)
    _until_a_trial_runs(repo)
    workers = [p for p in psutil.Process(run.pid).children() if "worker" in " ".join(p.cmdline())]
    assert len(workers) == 2
    for worker in workers:
        worker.kill()
    output = run.communicate(timeout=120)[0]
    assert run.returncode == 1, output
    assert (
        "the study is recorded interrupted: "
        f"tuner run --study {STUDY} --resume --parallel 2 --storage {_shown(pg_url)} continues it"
    ) in output, output
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "interrupted"
    again = tuner(env, tmp_path, "run", "--study", STUDY, "--resume", "--storage", pg_url)
    output = again.communicate(timeout=300)[0]
    assert again.returncode == 0, output
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert tagged(env["TUNER_TEST_TAG"]) == []


def test_parallel_workers_on_sqlite_are_refused_before_anything_runs(
    env: dict[str, str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    run = tuner(env, tmp_path, "run", "spec.toml", "--parallel", "2", "--storage", url)
    output = run.communicate(timeout=60)[0]
    assert run.returncode == 2, output
    assert "SQLite" in output and "postgresql" in output
    assert not (tmp_path / "home" / "leases").exists() or not list(
        (tmp_path / "home" / "leases").iterdir()
    )


def set_up(pg_url: str, env: dict[str, str], tmp_path: Path) -> None:
    """The study created and its baseline queued, with no trial run: `tuner run --parallel`'s
    first step, through the library."""
    script = (
        "import sys; from tuner.compose import prepare; from tuner.spec.study import load_spec; "
        "from tuner.study.loop import set_up_study; "
        "p = prepare(load_spec(sys.argv[1]), sys.argv[2]); "
        "set_up_study(p.ctx, p.repo, resume=False)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "spec.toml", pg_url],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_worker_sigkilled_mid_trial_has_its_trial_retried_by_the_others(
    pg_url: str, env: dict[str, str], tmp_path: Path, repo: Repository
) -> None:
    set_up(pg_url, env, tmp_path)
    # Three "hosts": the killed worker's pid means nothing to the others, only its heartbeat.
    workers = [
        tuner(env, tmp_path, "worker", "--study", STUDY, "--storage", pg_url,
               TUNER_WORKER_HOST=f"host-{i}")
        for i in range(3)
    ]  # fmt: skip
    victim = workers[0]
    deadline = time.monotonic() + 120
    killed_number = None
    while time.monotonic() < deadline and killed_number is None:
        for t in optuna_trials(pg_url):
            owner = t.user_attrs.get(sharing.WORKER) or {}
            row = repo.get_trial(STUDY, t.number)
            if (
                owner.get("pid") == victim.pid
                and row is not None
                and row.status is TrialStatus.RUNNING
                and t.number > 0
            ):
                time.sleep(0.3)  # into the trial's load
                victim.send_signal(signal.SIGKILL)
                killed_number = t.number
                break
        time.sleep(0.1)
    assert killed_number is not None, "the victim never ran a trial"
    victim.communicate(timeout=10)
    outputs = [w.communicate(timeout=300)[0] for w in workers[1:]]
    assert [w.returncode for w in workers[1:]] == [0, 0], outputs
    rows = repo.list_trials(STUDY, limit=None)
    killed = repo.get_trial(STUDY, killed_number)
    assert killed is not None and killed.failure is FailureClass.INTERRUPTED
    check_accounting(pg_url, rows)
    retried = [t for t in optuna_trials(pg_url) if t.user_attrs.get("retry_of") == killed_number]
    assert len(retried) == 1 and retried[0].state is optuna.trial.TrialState.COMPLETE
    assert repo.get_trial(STUDY, retried[0].number).config == killed.config  # type: ignore[union-attr]
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    deadline = time.monotonic() + 20  # the victim's watchdog ends its server
    while tagged(env["TUNER_TEST_TAG"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tagged(env["TUNER_TEST_TAG"]) == []
