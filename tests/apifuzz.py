"""Fuzzing the API in this process as ``schemathesis run --checks all --seed N`` does, for the
SQLite and the PostgreSQL fuzz tests.

Schemathesis reads the app's own /openapi.json and runs every phase (examples, coverage,
fuzzing, stateful) with every check: no server error, documented statuses, content types,
headers and bodies, schema-valid requests accepted, schema-violating ones rejected, missing
auth refused, unsupported methods answered 405, created resources available. :func:`fuzz`
returns what happened; :func:`summary` says it in one line for the test log.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import make_context, store_claim
from tuner.db.migrate import upgrade
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

KEY = "fuzz-key-0123456789"
# Each (seed, API key sent) pair is one full schemathesis run: one with the key (writes go
# through), one without (every write is refused), on seeds of their own.
RUNS: tuple[tuple[int, str | None], ...] = ((20, KEY), (21, None))
MAX_EXAMPLES = 30  # per operation and phase; a run is ~1,200 requests, ~25 s on 2 cores
PHASES = ("examples", "coverage", "fuzzing", "stateful")


@contextmanager
def app_over(db_url: str) -> Iterator[FastAPI]:
    """The API over a store with a finished FakeRunner study ("s1") and a stored comparison,
    so that generated requests can reach trials, the Pareto front and comparisons; writes
    need :data:`KEY`. Every engine is disposed at the end (PostgreSQL drops the database)."""
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        repo = Repository(engine)
        ctx = make_context(db_url, trials=6, name="s1")
        run_study(ctx, FakeRunner(max_utilization=0.9), repo)
        store_claim(repo)
    finally:
        engine.dispose()
    app = create_app(ApiSettings(storage=db_url, api_key=KEY))
    with TestClient(app):  # the app's lifespan, which disposes its engine on the way out
        yield app


@dataclass
class Outcome:
    """One schemathesis run: its cases by phase, the statuses answered and what failed."""

    seed: int
    with_key: bool
    cases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: set[str] = field(default_factory=set)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"seed {self.seed} {'with' if self.with_key else 'without'} the API key"


def fuzz(app: FastAPI, *, seed: int, key: str | None, max_examples: int = MAX_EXAMPLES) -> Outcome:
    """Run schemathesis with every check and phase against ``app`` (sending ``key`` as
    X-API-Key when given)."""
    config = SchemathesisConfig()
    config.update(seed=seed, max_failures=None)
    config.cache.enabled = False  # no replay of an earlier run's failures: the seed decides
    project = config.projects.override
    project.checks.update(included_check_names=["all"])
    project.generation.update(max_examples=max_examples, database="none")
    if key is not None:
        project.update(headers={"X-API-Key": key})
    outcome = Outcome(seed=seed, with_key=key is not None)
    started = time.monotonic()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    for event in from_schema(schema).execute():
        _record(outcome, event)
    outcome.seconds = time.monotonic() - started
    return outcome


def _record(outcome: Outcome, event: Any) -> None:
    if isinstance(event, events.ScenarioFinished):
        recorder = event.recorder
        outcome.cases[event.phase.value] += len(recorder.cases)
        for interaction in recorder.interactions.values():
            if interaction.response is not None:
                outcome.statuses[interaction.response.status_code] += 1
        for checks in recorder.checks.values():
            for check in checks:
                if check.failure_info is not None:
                    failure = check.failure_info.failure
                    outcome.failures.add(
                        f"{event.label}: {failure.code} {failure.title}: "
                        f"{failure.message.strip()[:500]}\n    {check.failure_info.code_sample}"
                    )
    elif isinstance(event, events.NonFatalError):  # e.g. a schema it cannot generate from
        outcome.failures.add(f"{event.label}: error {event.info.title}: {event.info}")
    elif isinstance(event, events.FatalError):
        outcome.failures.add(f"the run stopped: {event.exception!r}")


def summary(outcomes: list[Outcome], storage: str) -> str:
    """One line per run (cases by phase, failures, statuses, time), then the ``RELIABILITY``
    line that the reliability tests print (docs/reliability.md)."""
    lines = [f"schemathesis {version('schemathesis')} --checks all on {storage}:"]
    for o in outcomes:
        phases = ", ".join(f"{o.cases[p]} {p}" for p in PHASES)
        statuses = " ".join(f"{s}x{n}" for s, n in sorted(o.statuses.items()))
        lines.append(
            f"  {o.label}: {sum(o.cases.values())} cases ({phases}), {len(o.failures)} failures; "
            f"statuses {statuses}; {o.seconds:.0f} s"
        )
    record = {
        "test": "api_fuzz",
        "storage": storage,
        "schemathesis": version("schemathesis"),
        "runs": [
            {
                "seed": o.seed,
                "api_key": o.with_key,
                "cases": sum(o.cases.values()),
                "stateful_cases": o.cases["stateful"],
                "failures": len(o.failures),
                "5xx": sum(n for s, n in o.statuses.items() if s >= 500),
            }
            for o in outcomes
        ],
    }
    lines.append("RELIABILITY " + json.dumps(record))
    return "\n".join(lines)


def check(outcomes: list[Outcome], storage: str) -> str:
    """The summary, after asserting that every run found nothing and exercised the API."""
    text = summary(outcomes, storage)
    failures = [f for o in outcomes for f in sorted(o.failures)]
    assert failures == [], text + "\n" + "\n".join(failures[:20])
    for o in outcomes:
        assert all(o.cases[p] > 0 for p in ("coverage", "fuzzing", "stateful")), text
        assert o.statuses[200] > 0 and o.statuses[404] > 0 and o.statuses[422] > 0, text
        if o.with_key:
            assert o.statuses[201] > 0, "some generated spec was queued\n" + text
        else:
            assert o.statuses[401] > 0 and o.statuses[201] == 0, "writes refused\n" + text
    return text
