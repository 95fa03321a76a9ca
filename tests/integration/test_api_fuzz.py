"""Property-based fuzzing of the API from its own /openapi.json with schemathesis: no request,
valid or not, with or without the API key, gets a 5xx.

The app serves a database filled by a real (FakeRunner) study, so that requests naming that
study reach the deep code paths (trials, Pareto front, recommendations) instead of stopping at
a 404. Every operation gets schema-conforming ("positive") and schema-violating ("negative")
requests; the operations with a ``{name}`` are also fuzzed with the real study's name; POST
/v1/studies is fuzzed without a key, with a wrong one and with the right one. Generation is
derandomized, so a run is repeatable; every response is checked and all the 5xx are reported
together rather than stopping at the first.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from typing import Any, cast

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.python.asgi import ASGIClient, get_client

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import make_context, make_repo
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

KEY = "fuzz-key-0123456789"
STUDY = "s1"
EXAMPLES = 24  # per (operation, mode, variant); about 700 requests in all
MIN_REQUESTS = 500
SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # every response is checked; nothing to shrink
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Tally:
    requests: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    db_url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}"
    repo = make_repo(db_url)
    run_study(make_context(db_url, trials=6, name=STUDY), FakeRunner(max_utilization=0.9), repo)
    return create_app(ApiSettings(storage=db_url, api_key=KEY))


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[ASGIClient]:
    with get_client(cast(Any, app)) as c:
        yield c


def _operations(app: FastAPI) -> list[Any]:
    """The API operations of the app's /openapi.json; fails on any the schema gets wrong."""
    results = list(schemathesis.openapi.from_asgi("/openapi.json", app).get_all_operations())
    broken = [r for r in results if not isinstance(r, Ok)]
    assert broken == [], f"operations schemathesis cannot read: {broken}"
    return [r.ok() for r in results if isinstance(r, Ok)]


def _variants(operation: Any) -> list[tuple[str, dict[str, Any]]]:
    """(label, fixed parts) to fuzz the operation with, besides fully generated requests."""
    path, method = operation.path, operation.method.upper()
    out: list[tuple[str, dict[str, Any]]] = [("generated", {})]
    if "{name}" in path:
        out.append((f"name={STUDY}", {"path_parameters": {"name": STUDY}}))
    if method == "POST":
        out = [
            ("no key", {"headers": {}}),
            ("wrong key", {"headers": {"X-API-Key": "not-the-key"}}),
            ("key", {"headers": {"X-API-Key": KEY}}),
            ("bearer key", {"headers": {"Authorization": f"Bearer {KEY}"}}),
        ]
    return out


def _fuzz(
    operation: Any, mode: GenerationMode, fixed: dict[str, Any], send: Callable[[Any], None]
) -> bool:
    """Send up to EXAMPLES generated requests; False when ``mode`` has nothing to generate
    (a negative request for an operation without parameters or body cannot exist)."""
    strategy = operation.as_strategy(generation_mode=mode, **fixed)

    @SETTINGS
    @given(case=strategy)
    def run(case: Any) -> None:
        send(case)

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        return False
    return True


def test_no_generated_request_gets_a_5xx(app: FastAPI, client: ASGIClient) -> None:
    operations = _operations(app)
    assert len(operations) >= 10, "the schema should list every endpoint"
    tally = Tally()

    def send(case: Any, label: str) -> None:
        drop = {"X-API-Key", "Authorization"} if label == "no key" else set()
        headers = {k: v for k, v in (case.headers or {}).items() if k not in drop}
        case.headers = headers
        tally.requests += 1
        tally.by_operation[case.operation.label] += 1
        try:
            response = case.call(session=client)
        except Exception as exc:  # the app raising through is a 500
            tally.server_errors.append(f"{label}: {case.as_curl_command()} raised {exc!r}")
            tally.by_status[500] += 1
            return
        tally.by_status[response.status_code] += 1
        if response.status_code >= 500:
            tally.server_errors.append(
                f"{label}: {case.as_curl_command()} -> {response.status_code} {response.text[:300]}"
            )

    nothing_to_violate = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for label, fixed in _variants(operation):
                if not _fuzz(operation, mode, fixed, partial(send, label=label)):
                    nothing_to_violate.append(f"{operation.label} {label}")

    assert tally.server_errors == [], "\n".join(tally.server_errors[:20])
    assert tally.requests >= MIN_REQUESTS
    assert set(tally.by_operation) == {op.label for op in operations}
    assert tally.by_status[201] > 0, "some generated spec was valid and queued with the key"
    assert tally.by_status[401] > 0, "POST without or with a wrong key was refused"
    assert tally.by_status[200] > 0 and tally.by_status[422] > 0
    print(
        "RELIABILITY "
        + json.dumps(
            {
                "test": "api_fuzz",
                "schemathesis": version("schemathesis"),
                "api_requests": tally.requests,
                "5xx": len(tally.server_errors),
                "no_negative_cases": nothing_to_violate,
                "statuses": dict(sorted(tally.by_status.items())),
            }
        )
    )


def test_openapi_document_loads_as_a_valid_schema(app: FastAPI) -> None:
    labels = {operation.label for operation in _operations(app)}
    assert "POST /v1/studies" in labels and "GET /v1/recommendations" in labels
