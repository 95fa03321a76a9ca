"""``tuner run --study NAME --resume`` continues the study that was stored, never the demo.

The sequence of issue 29, with real processes: a study of the chat workload (two trials, two
confirmation launches a side, an SLO of its own, a small workload override) runs on the fake
server (compose's TUNER_SERVER_MODULE seam) and is killed with SIGKILL in its confirmation,
after the first confirmation launch finished. It is then resumed with nothing but
``--study NAME --resume --storage URL``. Before, the resume took the embedded demo's settings
(workload smoke, 3 trials, enforce_eager held) for everything it measured from then on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

REPO = Path(__file__).resolve().parents[2]
STUDY = "stored-chat"
SPEC = f"""
[study]
name = "{STUDY}"
model = "tiny-ernie"
gpu = "cpu"
workload = "chat"
objective = "throughput"
slo = "e2e_p99=60s"
trials = 2
seed = 5

[workload]
prompt_tokens = 64
output_tokens = 8
shared_prefix_tokens = 16
requests_per_window = 8
warmup_requests = 2
concurrency = 4

[space]
params = ["max_num_seqs"]
choices = {{ max_num_seqs = [4, 16] }}

# Every trial a launch, however many a resume asks for: a configuration drawn again would not be
# launched again.
[[enqueue]]
max_num_seqs = 4

[[enqueue]]
max_num_seqs = 16

[confirm]
top = 1
launches = 2

[runner]
startup_timeout_s = 20
"""


@dataclass
class Scene:
    workdir: Path
    url: str
    env: dict[str, str]
    tag: str

    def tuner(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / "tuner.out", "ab")  # noqa: SIM115 - the child holds it
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "tuner", *args],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # `kill -9 PID` reaches the tuner alone
            )
        finally:
            log.close()

    def output(self) -> str:
        return (self.workdir / "tuner.out").read_text(errors="replace")

    def tagged(self) -> list[psutil.Process]:
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
def scene(tmp_path: Path) -> Iterator[Scene]:
    (tmp_path / "spec.toml").write_text(SPEC)
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("TUNER_DB_URL", "TUNER_VLLM_PYTHON")}
    env |= {
        "PYTHONPATH": str(REPO),
        "TUNER_HOME": str(tmp_path / "home"),
        "TUNER_SERVER_MODULE": "tuner.testing.fake_server",
        "TUNER_SERVER_VERSION": "0.32.0",
        "TUNER_FAKE_STARTUP_S": "0.2",
        "TUNER_FAKE_STEP_MS": "10",  # a launch measures for about a second: room to aim at
        "TUNER_TEST_TAG": tag,
        "COLUMNS": "200",
    }
    s = Scene(tmp_path, f"sqlite:///{tmp_path / 'tuner.db'}", env, tag)
    yield s
    for proc in s.tagged():  # a failed assertion must not leave processes behind
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _confirm_trials(repo: Repository) -> list[TrialRow]:
    try:
        if repo.get_study(STUDY) is None:
            return []
        return repo.list_trials(STUDY, phase="confirm", limit=None)
    except StorageError:
        return []  # the tuner has not created its tables yet


def _kill_in_the_confirmation(s: Scene, tuner: subprocess.Popen[bytes], repo: Repository) -> None:
    """SIGKILL the tuner once one confirmation launch is done and the next one runs."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if tuner.poll() is not None:
            pytest.fail(f"the tuner exited ({tuner.returncode}) before the kill:\n{s.output()}")
        rows = _confirm_trials(repo)
        states = [r.status for r in rows]
        if TrialStatus.COMPLETE in states and states[-1] is TrialStatus.RUNNING:
            tuner.send_signal(signal.SIGKILL)
            assert tuner.wait(timeout=10) == -signal.SIGKILL
            return
        time.sleep(0.05)
    pytest.fail(f"the confirmation did not start within 120 s:\n{s.output()}")


def _drained(s: Scene, grace_s: float = 30.0) -> None:
    """No process of the scenario is left, once the ones ending have had ``grace_s`` (generous:
    the suite runs on several workers beside CPU vLLM, and a starved watchdog polls late)."""
    deadline = time.monotonic() + grace_s
    while s.tagged() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p.cmdline() for p in s.tagged()] == []


def test_resume_with_the_name_alone_continues_the_stored_study(scene: Scene) -> None:
    s = scene
    repo = Repository(make_engine(s.url))
    _kill_in_the_confirmation(s, s.tuner("run", "spec.toml", "--storage", s.url), repo)
    _drained(s, 60.0)  # the watchdog ends the killed tuner's server
    before = {(r.phase, r.number): r for r in repo.list_trials(STUDY, limit=None)}
    finished = [r for r in before.values() if r.phase == "confirm" and r.status.is_finished()]
    assert finished and all(r.status is TrialStatus.COMPLETE for r in finished)
    created = repo.get_study(STUDY)
    assert created is not None and created.n_trials_requested == 2

    first_run = len(s.output())
    resume = s.tuner("run", "--study", STUDY, "--resume", "--storage", s.url)
    assert resume.wait(timeout=180) == 0, s.output()
    said = s.output()[first_run:]
    assert "workload chat" in said and "2 trials" in said, said
    assert "smoke" not in said and "enforce_eager" not in said
    assert "confirmation launch" in said and "trial 1/" not in said  # no search trial left

    study = repo.get_study(STUDY)
    assert study is not None and study.status == "finished"
    assert study.n_trials_requested == 2 and study.spec["trials"] == 2
    after = repo.list_trials(STUDY, limit=None)
    # Every trial, search and confirmation alike, measured the stored workload with its
    # override: never the demo's smoke, never its enforce_eager.
    assert {r.workload for r in after if r.failure is not FailureClass.INTERRUPTED} == {"chat"}
    assert all("enforce_eager" not in r.config.to_dict() for r in after)
    for r in after:  # the stored override: 8 requests a window at 4 streams, not chat's 96 at 16
        if r.status is TrialStatus.COMPLETE:
            assert {(w.requests_ok, w.concurrency) for w in r.windows} == {(8, 4)}
    search = [r for r in after if r.phase == "search"]
    assert [r.number for r in search] == [0, 1], "no search trial beyond the requested two"
    # The finished confirmation launch is reused as it was; the killed one is launched again.
    for r in finished:
        again = next(t for t in after if (t.phase, t.number) == (r.phase, r.number))
        assert again.status is TrialStatus.COMPLETE and again.metrics == r.metrics
    confirm = [r for r in after if r.phase == "confirm" and r.status is TrialStatus.COMPLETE]
    assert len(confirm) == 4, [(r.number, r.status) for r in after]  # 2 launches a side
    (comparison,) = repo.list_comparisons(STUDY)
    assert comparison.workload == "chat"
    assert comparison.results["launches"] == {"a": 2, "b": 2}

    best = subprocess.run(
        [sys.executable, "-m", "tuner", "best", STUDY, "--json", "--storage", s.url],
        cwd=s.workdir,
        env=s.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert best.returncode == 0, best.stderr
    rec = json.loads(best.stdout)["recommendation"]
    # The load it measured, as the API names it: the preset with the values the study changed.
    stored = repo.get_study(STUDY)
    assert stored is not None and stored.workload_label.startswith("chat[")
    assert rec["provenance"]["workload"] == stored.workload_label
    assert rec["confirmed"] is not None
    _drained(s)


def test_an_option_that_contradicts_the_stored_study_is_refused(scene: Scene) -> None:
    """Checked before anything starts, with the stored value named; more trials are taken."""
    s = scene
    repo = Repository(make_engine(s.url))
    _kill_in_the_confirmation(s, s.tuner("run", "spec.toml", "--storage", s.url), repo)
    refused = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--study", STUDY, "--resume", "--workload",
         "smoke", "--storage", s.url],
        cwd=s.workdir, env=s.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "was created with --workload chat" in refused.stderr
    assert "asks for smoke" in refused.stderr and "Traceback" not in refused.stderr
    fewer = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--study", STUDY, "--resume", "--trials", "1",
         "--storage", s.url],
        cwd=s.workdir, env=s.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert fewer.returncode == 2 and "was created with --trials 2" in fewer.stderr
    study = repo.get_study(STUDY)
    assert study is not None and study.n_trials_requested == 2

    more = s.tuner("run", "--study", STUDY, "--resume", "--trials", "3", "--storage", s.url)
    assert more.wait(timeout=180) == 0, s.output()
    study = repo.get_study(STUDY)
    assert study is not None and study.n_trials_requested == 3 and study.spec["trials"] == 3
    rows = repo.list_trials(STUDY, limit=None)
    assert {r.workload for r in rows if r.failure is not FailureClass.INTERRUPTED} == {"chat"}
    assert len([r for r in rows if r.phase == "search" and r.status.is_finished()]) == 3
    _drained(s)
