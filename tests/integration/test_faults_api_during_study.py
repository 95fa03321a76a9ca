"""The API reading a SQLite file while a study writes to it, as `tuner serve` beside `tuner run`.

The study runs in another process (the in-process FakeRunner, slowed a little so that its writes
spread over a few seconds; Optuna's tables and tuner's are written to the same file) while two
threads hammer the trials list, the study, the Pareto front and the recommendation. Every answer
must be a 200, or a 404 only until the study (or its first measured trial) exists; the trial
count a reader sees never goes backwards; and at the end the API lists every trial the study
wrote, and its cached recommendation is the one a freshly started app gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import make_repo

REPO = Path(__file__).resolve().parents[2]
TRIALS = 24
STUDY_SCRIPT = f"""
import sys, time
from tests.studykit import make_context, make_repo
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

class SlowFakeRunner(FakeRunner):
    def run(self, *args, **kwargs):
        time.sleep(0.08)  # a trial that takes a while, so that reads land between writes
        return super().run(*args, **kwargs)

url = sys.argv[1]
run_study(make_context(url, trials={TRIALS}), SlowFakeRunner(max_utilization=0.9), make_repo(url))
"""
RECOMMEND = "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=smoke"
READS = ("/v1/studies/s1/trials?limit=1000", "/v1/studies/s1", "/v1/studies/s1/pareto", RECOMMEND)


class Reader(threading.Thread):
    """Reads every endpoint in turn until told to stop; records what it saw."""

    def __init__(self, client: TestClient, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop = stop
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.problems: list[str] = []
        self.requests = 0

    def run(self) -> None:
        seen_ok: set[str] = set()
        last_total = 0
        while not self.stop.is_set():
            for path in READS:
                try:
                    r = self.client.get(path)
                except Exception as exc:  # any exception is a finding here
                    self.problems.append(f"{path}: {exc!r}")
                    continue
                self.requests += 1
                self.statuses[(path, r.status_code)] += 1
                if r.status_code == 200:
                    seen_ok.add(path)
                elif r.status_code != 404 or path in seen_ok:
                    self.problems.append(f"{path}: {r.status_code} {r.text[:300]}")
                if path == READS[0] and r.status_code == 200:
                    page = r.json()
                    if page["total"] < last_total:
                        self.problems.append(f"trials went from {last_total} to {page['total']}")
                    if len(page["items"]) != page["total"]:
                        n = len(page["items"])
                        self.problems.append(f"a page of {n} trials said total {page['total']}")
                    last_total = page["total"]


def test_api_reads_while_a_study_writes_lose_nothing_and_fail_never(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    repo = make_repo(db_url)  # up to date before either side opens it
    study = subprocess.Popen(
        [sys.executable, "-c", STUDY_SCRIPT, db_url],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()
    app = create_app(ApiSettings(storage=db_url))
    with TestClient(app) as one, TestClient(app) as two:
        readers = [Reader(one, stop), Reader(two, stop)]
        for reader in readers:
            reader.start()
        try:
            output, _ = study.communicate(timeout=90)
        finally:
            stop.set()
            for reader in readers:
                reader.join(timeout=30)
        assert study.returncode == 0, output.decode(errors="replace")

        problems = [p for reader in readers for p in reader.problems]
        assert problems == [], problems[:10]
        requests = sum(reader.requests for reader in readers)
        assert requests >= 100, "the readers should have overlapped the study's writes"
        during = sum(n for r in readers for (p, s), n in r.statuses.items() if s == 200)
        assert during > 0

        written = repo.list_trials("s1", limit=None)
        assert len(written) == TRIALS
        page = one.get("/v1/studies/s1/trials?limit=1000").json()
        assert page["total"] == TRIALS
        seen = [(t["number"], t["status"], t["score"]) for t in page["items"]]
        assert seen == [(t.number, t.status.value, t.score) for t in written]
        cached = one.get(RECOMMEND)
        assert cached.status_code == 200
    with TestClient(create_app(ApiSettings(storage=db_url))) as fresh:
        assert fresh.get(RECOMMEND).json() == cached.json(), "a stale cached recommendation"
    print(
        "RELIABILITY "
        + json.dumps(
            {
                "test": "api_reads_during_study",
                "api_requests": requests,
                "api_errors": len(problems),
                "trials_written": len(written),
                "trials_seen_by_api": page["total"],
            }
        )
    )
