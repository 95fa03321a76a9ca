"""Queued studies: taken once by one worker, then run as a fresh study."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from api.queue import parse, queue
from tests.studykit import make_context, make_repo
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import TrialStatus
from tuner.spec.resume import FINGERPRINT
from tuner.spec.study import StudySpec
from tuner.study.loop import run_study
from tuner.study.worker import run_worker
from tuner.testing.fake_runner import FakeRunner


def _queue(repo: Repository, name: str, spec: StudySpec) -> None:
    repo.create_study(
        name=name,
        optuna_study_name=name,
        model=spec.model,
        model_source=spec.model,
        gpu=spec.gpu,
        workload=spec.workload,
        objective=spec.objective.value,
        slo={},
        spec=spec.to_dict(),
        emulated=False,
        vllm_version="",
        n_trials_requested=spec.trials,
        status="queued",
    )


def test_a_queued_study_is_claimed_once_and_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=3, name="queued-1")
    _queue(repo, "queued-1", ctx.spec)
    other = Repository(make_engine(url))  # a second worker on the same database

    first = repo.claim_queued_study()
    assert first is not None and first.name == "queued-1" and first.status == "running"
    assert other.claim_queued_study() is None, "a study must be taken by one worker only"

    # The stored spec round-trips, and the claimed row runs as a fresh study.
    assert StudySpec.from_dict(first.spec) == ctx.spec
    ranked = run_study(ctx, FakeRunner(), repo, claimed=True)
    assert ranked
    rows = repo.list_trials("queued-1", limit=None)
    assert len(rows) == 3 and rows[0].is_baseline
    assert rows[0].status is TrialStatus.COMPLETE
    assert all(r.status is not TrialStatus.RUNNING for r in rows)
    assert repo.get_study("queued-1").status == "finished"


def test_a_queued_study_stopped_before_its_set_up_is_resumed(tmp_path: Path) -> None:
    """A worker stopped (Ctrl-C) or failed while it set a queued study up, before the Optuna
    study existed: the worker said `tuner run --study NAME --resume` continues it, and that
    resume died with a KeyError traceback; no worker takes such a study again."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="q4")
    _queue(repo, "q4", ctx.spec)
    assert repo.claim_queued_study() is not None  # taken; the worker stops in its set-up
    repo.set_study_status("q4", "interrupted")
    more = dataclasses.replace(ctx, spec=ctx.spec.with_overrides(trials=3))
    ranked = run_study(more, FakeRunner(), repo, resume=True)
    row = repo.get_study("q4")
    assert ranked and row is not None and row.status == "finished"
    rows = repo.list_trials("q4", limit=None)
    assert len(rows) == 3 and rows[0].is_baseline
    # Set up as its worker would have: the budget asked for, the vLLM it measured with and
    # the fingerprint of its requests, which a later resume is checked against.
    assert row.n_trials_requested == 3 and row.vllm_version == ctx.vllm_version
    assert FINGERPRINT in row.spec


def test_a_study_tuner_run_sets_up_is_never_queued_for_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tuner run` created its study "queued" and wrote "running" only once it was set up: a
    worker polling the same database in between claimed it, and failed it or itself."""
    from tuner.study import planning

    url = f"sqlite:///{tmp_path / 'race.db'}"
    repo = make_repo(url)
    worker = Repository(make_engine(url))
    seen: list[tuple[str, object]] = []
    enqueue = planning.enqueue_predicted

    def meanwhile(ctx, study):  # type: ignore[no-untyped-def]
        row = repo.get_study("mine")
        seen.append((row.status if row else "", worker.claim_queued_study()))
        return enqueue(ctx, study)

    monkeypatch.setattr(planning, "enqueue_predicted", meanwhile)
    run_study(make_context(url, trials=1, name="mine"), FakeRunner(), repo)
    assert seen == [("running", None)]
    assert repo.get_study("mine").status == "finished"


def test_claims_follow_queue_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    for name in ("a", "b"):
        _queue(repo, name, make_context(url, name=name).spec)
    assert [repo.claim_queued_study().name, repo.claim_queued_study().name] == ["a", "b"]  # type: ignore[union-attr]
    assert repo.claim_queued_study() is None


def _queue_smoke(repo: Repository, name: str, **study: object) -> None:
    """Queue, as POST /v1/studies does, a tiny-ernie smoke study on the CPU, no confirmation."""
    body = {
        "study": {"name": name, "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke", **study},
        "confirm": {"launches": 0},
    }
    queue(repo, parse(body))


@pytest.fixture()
def fake_server_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Repository, str]:
    """A fresh database for a worker whose servers are the fake server (reported as vLLM
    0.32.0), run from ``tmp_path``: its repository and URL."""
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TUNER_SERVER_MODULE", "tuner.testing.fake_server")
    monkeypatch.setenv("TUNER_SERVER_VERSION", "0.32.0")
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    return repo, url


def test_a_worker_that_dies_leaves_its_study_resumable_not_running(
    fake_server_db: tuple[Repository, str],
) -> None:
    repo, url = fake_server_db
    _queue_smoke(repo, "doomed")

    def broken_reporter() -> object:
        raise RuntimeError("a bug in the worker")

    with pytest.raises(RuntimeError, match="a bug in the worker"):
        run_worker(
            repo,
            url,
            once=True,
            poll_s=0.0,
            vllm_python=None,
            say=lambda _line: None,
            reporter_factory=broken_reporter,
        )
    study = repo.get_study("doomed")
    assert study is not None and study.status == "interrupted"


def test_a_study_of_levers_queued_through_the_api_runs_with_their_flags(
    fake_server_db: tuple[Repository, str],
) -> None:
    """The API's knobs beyond the typed nine (tuner's levers) travel from the body to the stored
    spec, to the worker's space and to each server's argv, once each."""
    repo, url = fake_server_db
    body = {
        "study": {"name": "levers", "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke",
                  "trials": 3},
        "space": {"params": ["stream_interval"], "choices": {"block_size": [16, 32]},
                  "fixed": {"long_prefill_token_threshold": 256}},
        "enqueue": [{"stream_interval": 8, "block_size": 32}],
        "confirm": {"launches": 0},
    }  # fmt: skip
    queue(repo, parse(body))
    assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=lambda _: None) == 1

    rows = repo.list_trials("levers", limit=None)
    assert len(rows) == 3 and all(r.status is TrialStatus.COMPLETE for r in rows)
    assert rows[0].is_baseline and rows[0].config.extra == {"long_prefill_token_threshold": 256}
    assert rows[1].config.extra == {
        "stream_interval": 8, "block_size": 32, "long_prefill_token_threshold": 256,
    }  # fmt: skip
    for row in rows:
        argv = row.to_result().server.argv  # type: ignore[union-attr]
        assert argv.count("--long-prefill-token-threshold") == 1
        for knob, flag in (
            ("stream_interval", "--stream-interval"),
            ("block_size", "--block-size"),
        ):
            value = row.config.extra.get(knob)
            assert argv.count(flag) == (value is not None)
            if value is not None:
                assert argv[argv.index(flag) + 1] == str(value)


def test_an_interrupted_worker_says_which_study_and_how_to_continue_it(
    fake_server_db: tuple[Repository, str],
) -> None:
    repo, url = fake_server_db
    _queue_smoke(repo, "stopped")
    said: list[str] = []

    def ctrl_c() -> object:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_worker(
            repo,
            url,
            once=True,
            poll_s=0.0,
            vllm_python=None,
            say=said.append,
            reporter_factory=ctrl_c,
        )
    study = repo.get_study("stopped")
    assert study is not None and study.status == "interrupted"
    # Stopped before any trial (here: as its reporter is made): it said "its running trial
    # is recorded as interrupted", of a trial that never was.
    assert said[-1] == (
        "worker: study stopped interrupted (stopped while it was set up, before any trial); "
        "`tuner run --study stopped --resume` continues it"
    )


# A queue worker that dies as SIGKILL leaves it (no clean-up at all) while its second trial
# measures: the study stays running in the database, its trial too.
_DIES_MID_TRIAL = """
import os, sys
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.study.worker import run_worker

class DiesMeasuring:
    def trial_started(self, number, index, total, config, baseline):
        self.index = index
    def phase(self, phase, detail):
        if phase == "measuring" and self.index == 2:
            os._exit(9)
    def trial_finished(self, number, result, best):
        pass

url = sys.argv[1]
run_worker(Repository(make_engine(url)), url, once=True, poll_s=0.0, vllm_python=None,
           say=print, reporter_factory=DiesMeasuring)
"""


def _run_a_worker_that_dies_mid_trial(url: str) -> None:
    """A queue worker, in a process of its own, that takes the study queued in ``url`` and
    exits (code 9) while measuring its second trial: SIGKILL, as far as the study can tell."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    died = subprocess.run(
        [sys.executable, "-c", _DIES_MID_TRIAL, url], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert died.returncode == 9, died.stdout + died.stderr


def test_a_study_whose_worker_died_is_taken_over_by_the_next_worker(
    fake_server_db: tuple[Repository, str], tmp_path: Path
) -> None:
    """SIGKILL (or a crash) ends a worker with no chance to mark its study: the next worker on
    the host finds the study's worker gone, takes the study over and resumes it; a study whose
    worker lives, or ran on another host, is left alone."""

    from tests.studykit import processes_mentioning
    from tuner.study.sharing import host_name, worker_identity

    repo, url = fake_server_db
    _queue_smoke(repo, "orphan", trials=3)
    _run_a_worker_that_dies_mid_trial(url)
    study = repo.get_study("orphan")
    assert study is not None and study.status == "running"
    assert study.trial_counts[TrialStatus.RUNNING] == 1

    # Another host's worker, or this process (alive), is not taken for gone.
    elsewhere = {"host": host_name() + "-other", "pid": 1, "start": 0.0}
    _queue_smoke(repo, "elsewhere", trials=3)
    _queue_smoke(repo, "alive", trials=3)
    assert repo.claim_queued_study(worker=elsewhere) is not None
    assert repo.claim_queued_study(worker=worker_identity()) is not None

    said: list[str] = []
    assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append) == 1
    assert said[0].startswith("worker: took over study orphan (tiny-ernie on cpu, smoke)")
    assert said[-1] == "worker: study orphan finished"
    study = repo.get_study("orphan")
    assert study is not None and study.status == "finished"
    trials = repo.list_trials("orphan", limit=None)
    interrupted = [t for t in trials if t.status is TrialStatus.FAILED]
    assert len(interrupted) == 1 and interrupted[0].failure is not None
    assert interrupted[0].failure.value == "interrupted"
    assert sum(t.status is TrialStatus.COMPLETE for t in trials) == 3  # the budget, exactly
    for name in ("elsewhere", "alive"):
        left = repo.get_study(name)
        assert left is not None and left.status == "running"

    # A worker that died between taking a study and setting it up: set up from the start.
    _queue_smoke(repo, "early", trials=3)
    ghost = {"host": host_name(), "pid": 2**22 + 12345, "start": 0.0}  # above pid_max
    assert repo.claim_queued_study(worker=ghost) is not None
    assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append) == 1
    early = repo.get_study("early")
    assert early is not None and early.status == "finished"
    assert early.trial_counts[TrialStatus.COMPLETE] == 3
    assert processes_mentioning(str(tmp_path)) == []


def test_a_study_of_another_hosts_worker_is_taken_over_once_its_heartbeat_stops(
    fake_server_db: tuple[Repository, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on another host cannot be asked whether its process lives: while it runs a
    study it moves the study's updated_at every beat, and a study without a write for four
    beats is taken over (here a beat is 1 s, so four seconds without one)."""
    import time

    from tuner.study import sharing
    from tuner.study.sharing import host_name, worker_identity

    monkeypatch.setenv("TUNER_HEARTBEAT_S", "1")
    repo, url = fake_server_db
    _queue_smoke(repo, "remote", trials=2)
    elsewhere = {"host": host_name() + "-other", "pid": 1, "start": 0.0}
    assert repo.claim_queued_study(worker=elsewhere) is not None
    me = worker_identity()
    assert repo.take_over_study(sharing.owner_gone, me) is None  # written just now

    remote = Repository(make_engine(url))  # the other host's worker, beating
    with sharing.study_heartbeat(remote, "remote", elsewhere):
        time.sleep(5.5)  # past four beats of silence, had it not beaten
        assert repo.take_over_study(sharing.owner_gone, me) is None
    time.sleep(4.5)  # silence: the worker is gone

    said: list[str] = []
    assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append) == 1
    assert said[0].startswith("worker: took over study remote (tiny-ernie on cpu, smoke)")
    study = repo.get_study("remote")
    assert study is not None and study.status == "finished"
    assert study.trial_counts[TrialStatus.COMPLETE] == 2
    assert study.spec["queue_worker"] == me
    before = study.updated_at
    assert remote.touch_study("remote", elsewhere) is False  # taken over: no beat of it counts
    after = repo.get_study("remote")
    assert after is not None and after.updated_at == before


def test_resuming_a_queued_study_takes_it_and_runs_it(tmp_path: Path) -> None:
    """`tuner run --study NAME --resume` on a study queued through the API (what `tuner run
    --study NAME` itself suggests): a traceback from Optuna ("Record does not exist"), since
    nothing had set the study up yet. It now takes the study as the first worker would."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="queued-r")
    _queue(repo, "queued-r", ctx.spec)
    ranked = run_study(ctx, FakeRunner(), repo, resume=True)
    assert ranked and ranked[0].relative
    assert [r.is_baseline for r in repo.list_trials("queued-r", limit=None)] == [True, False]
    assert repo.claim_queued_study() is None  # no worker can take it after this run did


def test_a_queued_study_records_the_vllm_it_ran_with(tmp_path: Path) -> None:
    """Queued studies kept vllm_version empty, so a resume on another vLLM went unrefused."""
    import dataclasses

    from tuner.errors import UsageError

    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=2, name="queued-v")
    _queue(repo, "queued-v", ctx.spec)
    assert repo.claim_queued_study() is not None
    run_study(ctx, FakeRunner(), repo, claimed=True)
    assert repo.get_study("queued-v").vllm_version == ctx.vllm_version
    other = dataclasses.replace(ctx, vllm_version="0.99.0")
    with pytest.raises(UsageError, match=r"this run has vLLM 0\.99\.0"):
        run_study(other, FakeRunner(), repo, resume=True)


def test_a_takeover_beside_a_live_joined_worker_runs_with_it_not_fails_the_study(
    fake_server_db: tuple[Repository, str], tmp_path: Path
) -> None:
    """A queue worker died mid-trial while a `tuner worker --study` process on this host was
    measuring another trial of the same study. The next queue worker takes the study over: it
    marked the whole study failed (its resume refused to run beside the live trial). It now
    runs beside that worker, sweeps only the dead worker's trial, and leaves the live one to
    its process until that process is gone."""
    import subprocess
    import sys
    import threading

    import optuna

    from tests.studykit import processes_mentioning
    from tuner.study.sharing import WORKER, host_name
    from tuner.telemetry import since_boot

    repo, url = fake_server_db
    _queue_smoke(repo, "shared", trials=3)
    _run_a_worker_that_dies_mid_trial(url)
    # The joined worker: a live process of this host measuring a trial of the study.
    joined = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        study = optuna.load_study(study_name="shared", storage=url)
        trial = study.ask()
        trial.set_user_attr(
            WORKER, {"host": host_name(), "pid": joined.pid, "start": since_boot(joined.pid)}
        )
        live = trial.number
        threading.Timer(6.0, joined.kill).start()  # the joined worker dies mid-measurement
        said: list[str] = []
        assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append)
        assert said[0].startswith("worker: took over study shared")
        assert not any("failed to run" in line for line in said), said
        assert said[-1] == "worker: study shared finished"
    finally:
        joined.kill()
        joined.wait()
    row = repo.get_study("shared")
    assert row is not None and row.status == "finished"
    assert row.trial_counts[TrialStatus.COMPLETE] == 3  # the budget, exactly
    frozen = optuna.load_study(study_name="shared", storage=url).trials[live]
    assert frozen.state is optuna.trial.TrialState.FAIL  # swept once its process was gone
    assert processes_mentioning(str(tmp_path)) == []


def test_a_study_run_by_a_worker_recommends_a_runnable_serve_line(
    fake_server_db: tuple[Repository, str],
) -> None:
    """A study queued through the API stored no model source, and its worker never recorded
    the one it served: `tuner best` and the API said `vllm serve tiny-ernie ...`, a model with
    no published weights. The worker now records what `tuner run` records."""
    from tuner.results.recommend import recommendation

    repo, url = fake_server_db
    _queue_smoke(repo, "served", trials=1)
    assert run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=lambda _: None)
    row = repo.get_study("served")
    assert row is not None and row.model_source and Path(row.model_source).is_dir()
    assert row.vllm_version == "0.32.0" and row.emulated is False
    assert row.spec["workload_fingerprint"]["workload"] == "smoke"  # what a resume checks
    best = recommendation(repo, "served")
    assert best is not None
    assert best.serve_command.startswith(f"vllm serve {row.model_source} --load-format dummy")


def test_a_worker_that_left_the_confirmation_to_a_joined_worker_does_not_say_finished(
    fake_server_db: tuple[Repository, str],
) -> None:
    """A worker that joined the study (`tuner worker --study`, on another host) took its
    confirmation first: the queue worker said "worker: study X finished" while the study was
    still confirming there. It now says it left the confirmation to that worker, and names it;
    the study stays confirming, that worker its runner."""
    from tuner.db import RUN_OWNER, StudyStatus
    from tuner.study.loop import SilentReporter

    repo, url = fake_server_db
    body = {
        "study": {"name": "left", "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke",
                  "trials": 1},
        "confirm": {"launches": 2},
    }  # fmt: skip
    queue(repo, parse(body))
    joined = {"host": "gpu-host-2", "pid": 4242, "start": 1.0}

    class JoinedWorkerConfirmsFirst(SilentReporter):
        def trial_finished(self, number, result, best):  # type: ignore[no-untyped-def]
            confirming = (StudyStatus.CONFIRMING,)
            assert repo.claim_study_step("left", StudyStatus.CONFIRMING, unless=confirming,
                                         runner=joined)  # fmt: skip

    said: list[str] = []
    taken = run_worker(
        repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append,
        reporter_factory=JoinedWorkerConfirmsFirst,
    )  # fmt: skip
    assert taken == 1
    assert "worker: study left finished" not in said, said
    assert said[-1] == (
        "worker: study left is not finished: its confirmation was left to the worker that "
        "runs it, process 4242 on host gpu-host-2"
    ), said
    row = repo.get_study("left")
    assert row is not None and row.status == "confirming"
    assert row.spec[RUN_OWNER] == row.spec["queue_worker"] == joined


def test_a_worker_run_once_exits_1_when_a_study_it_took_failed_to_run(
    fake_server_db: tuple[Repository, str],
) -> None:
    """`tuner worker --once` said "2 studies taken" and exited 0 when one of them had failed
    to run (here: queued for an H100, on a host without one), so a script could not tell."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    repo, url = fake_server_db
    _queue_smoke(repo, "fine", trials=1)
    queue(repo, parse({"study": {"name": "elsewhere", "model": "tiny-ernie", "gpu": "h100",
                                 "workload": "smoke"}}))  # fmt: skip
    run = CliRunner().invoke(app, ["worker", "--once", "--storage", url])
    assert run.exit_code == 1, run.output
    assert "worker: 2 studies taken, 1 failed to run (elsewhere)" in " ".join(run.output.split())
    assert repo.get_study("fine").status == "finished"
    assert repo.get_study("elsewhere").status == "failed"


def test_a_worker_on_a_sqlite_file_not_made_yet_creates_nothing_and_waits_for_it(
    tmp_path: Path,
) -> None:
    """It created the file (and its folders, for a typo) and polled an empty queue there; now
    `--once` says nothing can be queued in it, and a polling worker waits for `tuner serve`
    to make it (started first, or beside it, by a service manager)."""
    import subprocess
    import sys
    import time

    from typer.testing import CliRunner

    from tuner.cli.app import app

    path = tmp_path / "typo" / "x.db"
    url = f"sqlite:///{path}"
    once = CliRunner().invoke(app, ["worker", "--once", "--storage", url])
    assert once.exit_code == 0, once.output
    assert f"worker: 0 studies taken (database {path} does not exist)" in once.output
    assert not (tmp_path / "typo").exists()
    waiting = subprocess.Popen(
        [sys.executable, "-m", "tuner", "worker", "--storage", url, "--poll", "0.2"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert waiting.stdout is not None
        said = waiting.stdout.readline()
        assert "worker: waiting for database" in said
        # It named `tuner serve --storage URL`, which refuses a database that does not exist.
        assert f"`tuner db upgrade --storage {url}` creates it" in said
        time.sleep(1.0)
        assert waiting.poll() is None and not (tmp_path / "typo").exists()
        make_repo(url)  # what `tuner serve` does at its start
        deadline = time.monotonic() + 30
        while not (tmp_path / "typo").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert waiting.poll() is None  # it polls the queue now
    finally:
        waiting.terminate()
        waiting.communicate(timeout=30)  # reaped, and its pipe closed


def test_a_study_that_failed_to_run_says_why_in_the_api_the_page_and_tuner_studies(
    fake_server_db: tuple[Repository, str],
) -> None:
    """A queued study that failed on its worker (its GPU not on that host, say) showed only
    "failed" and 0 trials in GET /v1/studies/NAME, on its page and in `tuner studies`: the
    reason went to the worker's terminal only. The message and hint are now stored with it."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from api.app import create_app
    from api.settings import ApiSettings
    from tuner.cli.app import app
    from tuner.db import StudyStatus
    from tuner.errors import HardwareMismatch

    repo, url = fake_server_db
    _queue_smoke(repo, "nowhere")
    message = "--gpu h200 asks for an NVIDIA H200, but this machine has <b>no</b> NVIDIA GPU"
    hint = "run tuner on a machine with an NVIDIA H200, or use --gpu cpu"

    def mismatch() -> object:
        raise HardwareMismatch(message, hint=hint)

    said: list[str] = []
    run_worker(
        repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append,
        reporter_factory=mismatch, failed=[],
    )  # fmt: skip
    assert said[-1] == f"worker: study nowhere failed to run: {message}\n  hint: {hint}"
    row = repo.get_study("nowhere")
    assert row is not None and row.status == "failed"
    assert row.failure == {"message": message, "hint": hint}
    with TestClient(create_app(ApiSettings(storage=repo))) as c:
        detail = c.get("/v1/studies/nowhere").json()
        assert detail["failure"] == {"message": message, "hint": hint}
        listed = c.get("/v1/studies").json()["items"]
        assert listed[0]["failure"] == {"message": message, "hint": hint}
        page = c.get("/ui/studies/nowhere").text
        listing = c.get("/ui/").text  # the overview's list of studies says why too
    assert 'class="muted failure-reason">--gpu h200 asks for' in listing
    assert "<b>no</b>" not in listing and "&lt;b&gt;no&lt;/b&gt;" in listing
    assert "<b>no</b>" not in page and "&lt;b&gt;no&lt;/b&gt;" in page
    assert 'id="study-failure"' in page and f"hint: {hint}" in page
    run = CliRunner().invoke(app, ["studies", "--storage", url])
    assert run.exit_code == 0, run.output
    said_by_cli = " ".join(run.output.split())
    assert f"study 'nowhere' failed to run: {message} hint: {hint}" in said_by_cli
    # Resumed elsewhere, it is no longer failed: the old reason is not shown any more.
    repo.set_study_status("nowhere", StudyStatus.RUNNING)
    assert repo.get_study("nowhere").failure is None  # type: ignore[union-attr]


def test_a_queued_study_that_searches_nothing_says_what_to_change_in_the_api_s_terms(
    fake_server_db: tuple[Repository, str],
) -> None:
    """Its worker refused it with the spec file's words: "name knobs in [space] params or
    search (or --search FLAG=V1,V2), request body", none of which a body that was queued
    can use."""
    repo, url = fake_server_db
    body = {
        "study": {"name": "idle", "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke"},
        "space": {"params": []},
        "confirm": {"launches": 0},
    }
    queue(repo, parse(body))
    said: list[str] = []
    run_worker(repo, url, once=True, poll_s=0.0, vllm_python=None, say=said.append, failed=[])
    row = repo.get_study("idle")
    assert row is not None and row.status == "failed" and row.failure is not None
    message, hint = row.failure["message"], row.failure["hint"]
    assert message.startswith(
        "nothing to search: the space names no knob to search (no space.params or "
        "space.choices) and no enqueue configuration beyond vLLM's defaults"
    )
    assert hint.startswith(
        "queue it again (POST /v1/studies, another study.name) with knobs to search in "
        "space.params or space.choices"
    )
    for words in ("[space]", "[[enqueue]]", "--search", "request body"):
        assert words not in message + hint, words
    assert said[-1] == f"worker: study idle failed to run: {message}\n  hint: {hint}"


def test_a_worker_prints_a_failure_with_brackets_as_it_is(
    fake_server_db: tuple[Repository, str],
) -> None:
    """`tuner worker` printed its lines as rich markup: "drop that [[enqueue]] entry" came out
    as "drop that [] entry", and "[space] params" as " params"."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    repo, url = fake_server_db
    spec = StudySpec(
        model="tiny-ernie", gpu="cpu", workload="smoke", params=("max_num_seqs",),
        enqueue=({"enable_prefix_caching": True},), source="study.toml",
    )  # fmt: skip
    _queue(repo, "brackets", spec)
    run = CliRunner().invoke(app, ["worker", "--once", "--storage", url])
    assert run.exit_code == 1, run.output
    hint = repo.get_study("brackets").failure["hint"]  # type: ignore[union-attr,index]
    assert "drop that [[enqueue]] entry from study.toml" in hint
    assert f"  hint: {hint}\n" in run.output


def test_a_queued_spec_this_tuner_cannot_read_fails_its_study_not_the_worker(
    tmp_path: Path,
) -> None:
    """A study queued with an objective this tuner does not know (a newer API's) ended the
    worker in a ValueError traceback and stayed "running"; each next worker took it over and
    stopped on it again. It now fails, saying why, and the worker goes on to the next."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=1, name="fine")
    newer = {**ctx.spec.to_dict(), "objective": "goodput"}  # as a newer tuner stores it
    repo.create_study(
        name="skew", optuna_study_name="skew", model=ctx.spec.model, model_source=None,
        gpu=ctx.spec.gpu, workload=ctx.spec.workload, objective="goodput", slo={}, spec=newer,
        emulated=False, vllm_version="", n_trials_requested=1, status="queued",
    )  # fmt: skip
    said: list[str] = []
    failed: list[str] = []
    taken = run_worker(repo, url, once=True, poll_s=0.1, vllm_python=None, say=said.append,
                       failed=failed)  # fmt: skip
    assert taken == 1 and failed == ["skew"]
    row = repo.get_study("skew")
    assert row is not None and row.status == "failed" and row.failure is not None
    assert "'goodput' is not a valid Objective" in row.failure["message"]
    assert "another version" in row.failure["hint"]
    assert any("study skew failed to run" in line for line in said)
