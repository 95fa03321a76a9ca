"""The tuner itself SIGKILLed in the middle of a trial, with real processes throughout.

``python -m tuner run`` drives the fake server (through compose's TUNER_SERVER_MODULE seam)
and is killed with SIGKILL while a trial is under load: nothing of the tuner gets to clean up.
The server's watchdog ends the server at once. Should the watchdog die too, the server is left
running as an orphan, and ``tuner run --resume`` must end it (the lease in $TUNER_HOME/leases)
before it launches anything. Either way the resume records the killed trial as
failed/interrupted, measures its configuration again (an interruption is not a result), keeps
every completed trial exactly as it was, finishes the study with the requested number of
measured trials, and leaves no process behind.

Every process of the scenario inherits a unique TUNER_TEST_TAG from the tuner's environment,
so "no process left" is checked by that tag rather than by guessing command lines (the fake
engine-core child's argv names nothing of the test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tuner.db.repository import Repository
from tuner.db.rows import TrialRow
from tuner.db.session import make_engine
from tuner.domain import FailureClass, TrialStatus
from tuner.errors import StorageError
from tuner.runner.interrupts import sigterm_as_interrupt
from tuner.runner.leases import Lease, read_lease
from tuner.runner.procgroup import group_members

REPO = Path(__file__).resolve().parents[2]
STUDY = "killed-mid-trial"
TRIALS = 4
SPEC = f"""
[study]
name = "{STUDY}"
model = "tiny-ernie"
gpu = "cpu"
workload = "smoke"
trials = {TRIALS}
seed = 3

[workload]
requests_per_window = 8
warmup_requests = 2
concurrency = 4
output_tokens = 8

[space]
params = ["max_num_seqs"]
choices = {{ max_num_seqs = [4, 16, 64] }}

[runner]
startup_timeout_s = 20

[confirm]
launches = 0

# Four trials, four launches: a configuration drawn again would not be launched again.
[[enqueue]]
max_num_seqs = 4

[[enqueue]]
max_num_seqs = 16

[[enqueue]]
max_num_seqs = 64
"""


@dataclass
class Scenario:
    workdir: Path
    db_url: str
    env: dict[str, str]
    tag: str

    @property
    def lease_dir(self) -> Path:
        return self.workdir / "home" / "leases"

    def tuner(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / "tuner.out", "ab")  # noqa: SIM115 - the child holds it
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "tuner", "run", "spec.toml", *args],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the tuner alone is killed, as `kill -9 PID` would
            )
        finally:
            log.close()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tuner ARGS`` to its end (a listing command), its output captured."""
        return subprocess.run(
            [sys.executable, "-m", "tuner", *args],
            cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=60,
            check=True,
        )  # fmt: skip

    def output(self) -> str:
        return (self.workdir / "tuner.out").read_text(errors="replace")

    def tagged_processes(self) -> list[psutil.Process]:
        """Live processes that inherited this scenario's tag (zombies excluded)."""
        found = []
        for proc in psutil.process_iter(["status"]):
            try:
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get("TUNER_TEST_TAG") == self.tag:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found


@pytest.fixture()
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    (tmp_path / "spec.toml").write_text(SPEC)
    db_url = f"sqlite:///{tmp_path / 'tuner.db'}"
    tag = uuid.uuid4().hex
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TUNER_DB_URL": db_url,
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.2",
        # 20 ms per decode step: a trial measures for about 1.5 s, long enough to aim at.
        "TUNER_FAKE_STEP_MS": "20",
        "TUNER_TEST_TAG": tag,
        "COLUMNS": "200",
    }
    s = Scenario(tmp_path, db_url, env, tag)
    yield s
    for proc in s.tagged_processes():  # a failed assertion must not leave processes behind
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _trials(repo: Repository) -> list[TrialRow]:
    """The study's trials, or [] while the tuner has not created its tables or study yet."""
    try:
        if repo.get_study(STUDY) is None:
            return []
        return repo.list_trials(STUDY, limit=None)
    except StorageError:
        return []


# Tokens the fake has generated once the trial is past its warm-up (2 requests of about 8
# tokens) and into the measurement windows (3 x 8 requests of about 8 tokens).
MEASURING_TOKENS = 48


def _generated_tokens(lease: Lease) -> float:
    """The server's generation_tokens counter, from its /metrics."""
    port = lease.argv[lease.argv.index("--port") + 1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("vllm:generation_tokens_total"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _wait_for_a_trial_under_load(
    s: Scenario, tuner: subprocess.Popen[bytes], repo: Repository, complete_before: int = 1
) -> Lease:
    """Block until ``complete_before`` trials are complete and the next one's server measures."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if tuner.poll() is not None:
            pytest.fail(f"the tuner exited ({tuner.returncode}) before the kill:\n{s.output()}")
        rows = _trials(repo)
        complete = [r for r in rows if r.status is TrialStatus.COMPLETE]
        running = [r for r in rows if r.status is TrialStatus.RUNNING]
        leases = [x for p in s.lease_dir.glob("server-*.json") if (x := read_lease(p))]
        if len(complete) == complete_before and running and len(leases) == 1:
            try:
                if _generated_tokens(leases[0]) >= MEASURING_TOKENS:
                    return leases[0]
            except OSError:
                pass  # not listening yet
        time.sleep(0.05)
    pytest.fail(f"no trial reached its measurement within 60 s:\n{s.output()}")


def _watchdogs(s: Scenario) -> list[psutil.Process]:
    return [p for p in s.tagged_processes() if "tuner.runner.watchdog" in " ".join(p.cmdline())]


def test_sigkill_in_the_baseline_takes_the_server_along_and_resume_measures_the_defaults(
    scenario: Scenario,
) -> None:
    """The issue's sequence: `kill -9` of `tuner run` during the defaults' first measurement."""
    s = scenario
    # Nothing queued before the defaults' retry: it goes first.
    (s.workdir / "spec.toml").write_text(SPEC.split("# Four trials, four launches")[0])
    repo = Repository(make_engine(s.db_url))
    tuner = s.tuner()
    lease = _wait_for_a_trial_under_load(s, tuner, repo, complete_before=0)
    assert len(_watchdogs(s)) == 1
    tuner.send_signal(signal.SIGKILL)
    assert tuner.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 20  # TERM, then KILL after the watchdog's 5 s grace
    while s.tagged_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(lease.pgid) == [], "the server outlived its tuner"
    assert s.tagged_processes() == [], "the watchdog ends its server, then itself"
    assert lease.sockets and not Path(lease.sockets).exists(), "and removes its socket files"
    [baseline] = _trials(repo)
    assert baseline.is_baseline and baseline.status is TrialStatus.RUNNING
    # Nobody cleaned up the study's status either: `tuner studies` says its tuner is gone.
    listed = s.run("studies")
    assert "running (tuner gone)" in listed.stdout, listed.stdout
    assert f"`tuner run --study {STUDY} --resume` continues it" in listed.stderr
    shown = s.run("trials", STUDY)
    assert "running (tuner gone)" in shown.stdout, shown.stdout

    resume = s.tuner("--resume")
    assert resume.wait(timeout=120) == 0, s.output()
    rows = repo.list_trials(STUDY, limit=None)
    assert rows[0].status is TrialStatus.FAILED and rows[0].failure is FailureClass.INTERRUPTED
    measured = [r for r in rows if r.status is TrialStatus.COMPLETE]
    # A configuration the sampler draws again is a trial that launches nothing.
    repeats = [r for r in rows if r.failure is FailureClass.REPEATED]
    assert len(measured) + len(repeats) == TRIALS, [(r.number, r.status) for r in rows]
    # The defaults are measured first on resume (the killed baseline, queued again); the
    # sampler may draw them again later, which is a trial like any other.
    assert measured[0].is_baseline and measured[0].config == baseline.config
    # No score against defaults that were not measured: the first score printed is the defaults'.
    scores = [line for line in s.output().splitlines() if "score" in line]
    assert scores and "score 1.000" in scores[0], scores
    assert not list(s.lease_dir.glob("*")), "the resume drops the dead tuner's lease"
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert s.tagged_processes() == []
    listed = s.run("studies", "--json")
    assert [x["runner_gone"] for x in json.loads(listed.stdout)] == [False]


def test_sigkilled_tuner_and_watchdog_resume_reaps_the_orphan_and_loses_nothing(
    scenario: Scenario,
) -> None:
    s = scenario
    repo = Repository(make_engine(s.db_url))
    tuner = s.tuner()
    lease = _wait_for_a_trial_under_load(s, tuner, repo)
    for watchdog in _watchdogs(s):  # a server that survives its tuner anyway
        watchdog.kill()
    tuner.send_signal(signal.SIGKILL)
    assert tuner.wait(timeout=10) == -signal.SIGKILL

    # Nothing cleaned up: the killed trial is still RUNNING and its server lives on, orphaned.
    before = {r.number: r for r in _trials(repo)}
    killed = [n for n, r in before.items() if r.status is TrialStatus.RUNNING]
    assert len(killed) == 1
    completed = {n: r for n, r in before.items() if r.status is TrialStatus.COMPLETE}
    assert completed and all(n < killed[0] for n in completed)
    orphan = group_members(lease.pgid)
    assert {p.pid for p in orphan} >= {lease.pid}, "the server should outlive the killed tuner"
    assert len(orphan) >= 2, "the fake's engine-core child belongs to the orphaned group too"

    # The resume ends the orphan before it starts a new trial.
    resume = s.tuner("--resume")
    orphan_gone_at = first_new_trial_at = None
    while resume.poll() is None:
        now = time.monotonic()
        if orphan_gone_at is None and not group_members(lease.pgid):
            orphan_gone_at = now
        if first_new_trial_at is None and any(r.number > killed[0] for r in _trials(repo)):
            first_new_trial_at = now
        time.sleep(0.05)
    assert resume.returncode == 0, s.output()
    assert orphan_gone_at is not None, "the resumed tuner left the orphan running\n" + s.output()
    assert first_new_trial_at is not None and orphan_gone_at <= first_new_trial_at
    assert f"(process group {lease.pgid}) that tuner pid {tuner.pid} left running" in s.output()
    assert not list(s.lease_dir.glob("*")), "the orphan's lease should be gone with it"

    after = {r.number: r for r in repo.list_trials(STUDY, limit=None)}
    for n, row in completed.items():
        assert after[n].status is TrialStatus.COMPLETE
        assert after[n].metrics == row.metrics, f"completed trial {n} changed on resume"
        assert after[n].objective_values == row.objective_values
        assert after[n].score == row.score
    victim = after[killed[0]]
    assert victim.status is TrialStatus.FAILED
    assert victim.failure is FailureClass.INTERRUPTED
    assert not victim.metrics and victim.objective_values is None
    assert all(r.status.is_finished() for r in after.values())
    # The interruption is not a trial: TRIALS measured ones, the killed configuration again.
    assert len(after) == TRIALS + 1
    new = [r for n, r in after.items() if n > killed[0]]
    assert new and all(r.status is TrialStatus.COMPLETE for r in new)
    assert victim.config in {r.config for r in new}
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert s.tagged_processes() == []
    print(
        "RELIABILITY "
        + json.dumps(
            {
                "test": "tuner_sigkill",
                "faults_injected": 1,
                "survived": 1,
                "completed_lost": sum(after[n].metrics != r.metrics for n, r in completed.items()),
                "orphans_left": len(s.tagged_processes()),
                "orphans_reaped": 1,
            }
        )
    )


def test_sigterm_mid_trial_stops_the_server_and_records_the_trial(scenario: Scenario) -> None:
    """`kill PID` (SIGTERM: systemd, docker stop, a CI timeout) is a stop like Ctrl-C: the
    tuner ends its server and records the trial as interrupted before it exits."""
    s = scenario
    repo = Repository(make_engine(s.db_url))
    tuner = s.tuner()
    lease = _wait_for_a_trial_under_load(s, tuner, repo)
    tuner.send_signal(signal.SIGTERM)
    code = tuner.wait(timeout=30)
    assert code == 130, f"exit code {code}:\n{s.output()}"
    assert "--resume continues" in s.output()
    assert group_members(lease.pgid) == [], "SIGTERM must not leave the server orphaned"
    assert not list(s.lease_dir.glob("*"))
    rows = _trials(repo)
    assert [r.status for r in rows if r.status is not TrialStatus.COMPLETE] == [TrialStatus.FAILED]
    assert rows[-1].failure is FailureClass.INTERRUPTED and not rows[-1].metrics
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "interrupted"
    assert s.tagged_processes() == []
    print(
        "RELIABILITY "
        + json.dumps(
            {
                "test": "tuner_sigterm",
                "faults_injected": 1,
                "survived": 1,
                "completed_lost": 0,
                "orphans_left": len(s.tagged_processes()),
            }
        )
    )


def test_sigterm_as_interrupt_raises_once_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned_up = []
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises while the signal is being delivered
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one must not cut the clean-up
            time.sleep(0.05)
            cleaned_up.append(True)
    assert cleaned_up == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_closed_terminal_mid_trial_is_a_stop_like_ctrl_c(scenario: Scenario) -> None:
    """SIGHUP (the terminal closed, an SSH session dropped) ended tuner at once: exit 129, the
    study left "running" with a running trial and its lease behind."""
    s = scenario
    repo = Repository(make_engine(s.db_url))
    tuner = s.tuner()
    lease = _wait_for_a_trial_under_load(s, tuner, repo)
    tuner.send_signal(signal.SIGHUP)
    code = tuner.wait(timeout=30)
    assert code == 130, f"exit code {code}:\n{s.output()}"
    assert group_members(lease.pgid) == [] and not list(s.lease_dir.glob("*"))
    rows = _trials(repo)
    assert rows[-1].failure is FailureClass.INTERRUPTED
    study = repo.get_study(STUDY)
    assert study is not None and study.status == "interrupted"


def test_sighup_is_taken_as_sigterm_is() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(1)
    assert signal.getsignal(signal.SIGHUP) == before


def test_a_resume_beside_a_live_tuner_is_refused_and_loses_nothing(scenario: Scenario) -> None:
    """`--resume` while another tuner on this host runs the study marked its trial
    interrupted; that tuner then lost its measurement ("trial 0 already finished") and exit 3."""
    s = scenario
    repo = Repository(make_engine(s.db_url))
    tuner = s.tuner()
    _wait_for_a_trial_under_load(s, tuner, repo)
    resume = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--study", STUDY, "--resume"],
        cwd=s.workdir,
        env={**s.env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = " ".join((resume.stdout + resume.stderr).split())
    assert resume.returncode == 2, said
    assert f"study '{STUDY}' is running: process {tuner.pid} on this host" in said
    assert "tuner worker --study" not in said  # SQLite takes one worker: no joining beside
    assert tuner.wait(timeout=120) == 0, s.output()
    rows = _trials(repo)
    assert all(r.failure is not FailureClass.INTERRUPTED for r in rows)
    assert len(rows) == TRIALS


def test_nohup_keeps_a_closed_terminal_from_stopping_the_study() -> None:
    # `nohup tuner run ...` ignores SIGHUP; taking it as Ctrl-C stopped the study at logout.
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)  # no KeyboardInterrupt
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
