"""Property-based fuzzing of the API from its own /openapi.json with schemathesis, on SQLite:
every check and every phase, stateful included, on two seeds, with and without the API key
(:mod:`tests.apifuzz`). Nothing may fail: no 5xx, no status the schema does not document, no
schema-valid request rejected and no schema-violating one accepted.

The app serves a database with a finished FakeRunner study, so that requests reach trials, the
Pareto front and comparisons; the stateful phase follows the links from a listing or a queued
study to them. The counts go to the terminal (and into the assertion message).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from schemathesis.core.result import Ok

from tests import apifuzz


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    db: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    with apifuzz.app_over(f"sqlite:///{db}") as app:
        yield app


def test_schemathesis_finds_nothing_on_sqlite(
    app: FastAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = [apifuzz.fuzz(app, seed=seed, key=key) for seed, key in apifuzz.RUNS]
    text = apifuzz.check(outcomes, "SQLite")
    with capsys.disabled():
        print("\n" + text)


def test_openapi_document_loads_as_a_valid_schema(app: FastAPI) -> None:
    results = list(schemathesis.openapi.from_asgi("/openapi.json", app).get_all_operations())
    assert [r for r in results if not isinstance(r, Ok)] == []
    labels = {r.ok().label for r in results if isinstance(r, Ok)}
    assert "POST /v1/studies" in labels and "GET /v1/recommendations" in labels
    assert len(labels) >= 10, "the schema should list every endpoint"


# The 500s of the issue, and the bounds on either side of them.
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/compare/-87996987280358224076734464", 422),
        ("/v1/compare/2147483648", 422),
        ("/v1/compare/2147483647", 404),
        ("/v1/studies/s1/trials?offset=188751057267633553408&limit=67", 422),
        ("/v1/studies/s1/trials?offset=2147483647", 200),
        ("/v1/studies/s1/trials/9999999999999999999", 422),
        ("/v1/studies/s1/trials/2147483647", 404),
        ("/v1/studies/" + "x" * 256, 422),
        ("/v1/studies?status=exploded", 422),
        ("/v1/recommendations?model=m&gpu=g&workload=w&vllm_version=%C3%9E", 422),
    ],
)
def test_numbers_and_names_beyond_the_storage_are_422(app: FastAPI, path: str, status: int) -> None:
    r = TestClient(app).get(path)
    assert r.status_code == status, r.text
    if status == 422:
        assert r.json()["error"] == "invalid" and r.json()["problems"], r.text


def _post(app: FastAPI, body: Any) -> Any:
    return TestClient(app).post("/v1/studies", json=body, headers={"X-API-Key": apifuzz.KEY})


def test_a_body_that_is_not_utf8_is_a_documented_400(app: FastAPI) -> None:
    headers = {"X-API-Key": apifuzz.KEY, "Content-Type": "application/json"}
    r = TestClient(app).post("/v1/studies", content=b'{"\xff"}', headers=headers)
    assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text


def _study(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke", **fields}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"study": _study("big", trials=2**31)}, "study.trials"),
        ({"study": _study("seed", seed=-1)}, "study.seed"),
        ({"study": _study("s p a c e")}, "study.name"),
        ({"study": {**_study("fit"), "model": "qwen2.5-14b", "gpu": "l4"}}, "does not fit"),
        ({"study": _study("cap", objective="capacity")}, "capacity objective"),
        ({"study": _study("py"), "runner": {"vllm_python": "/bin/sh"}}, "vllm_python"),
        ({"study": _study("nan"), "workload": {"rate_ladder": [1, 1.0]}}, "distinct"),
    ],
)
def test_what_the_schema_excludes_is_refused(app: FastAPI, body: Any, words: str) -> None:
    r = _post(app, body)
    assert r.status_code == 422 and r.json()["error"] == "invalid_spec", r.text
    assert words in r.json()["message"]


def test_a_model_that_fits_only_at_its_fixed_quantization_is_queued(app: FastAPI) -> None:
    """qwen2.5-14b's bf16 weights (29.5 GB) exceed an L4; held at fp8 they fit, and the worker
    runs it so. The API refused it (422, "does not fit"), in its schema and in its check."""
    study = {**_study("fp8-on-l4"), "model": "qwen2.5-14b", "gpu": "l4"}
    fixed = {"quantization": "fp8", "max_model_len": 8192}
    r = _post(app, {"study": study, "space": {"fixed": fixed}})
    assert r.status_code == 201, r.text
    unquantized = _post(app, {"study": {**study, "name": "bf16"}, "space": {"fixed": {}}})
    assert unquantized.status_code == 422 and "does not fit" in unquantized.json()["message"]


def test_the_space_is_fitted_to_the_hardware_and_the_changes_listed(app: FastAPI) -> None:
    space = {
        "params": ["attention_backend", "max_num_seqs", "enforce_eager"],
        "choices": {"max_num_batched_tokens": [512, 1024], "enforce_eager": [False]},
        "fixed": {"enforce_eager": True},
    }
    enqueue = [{"max_num_seqs": 8, "max_num_batched_tokens": 512}, {"max_num_seqs": 7}]
    r = _post(app, {"study": _study("fitted", trials=2.0), "space": space, "enqueue": enqueue})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["n_trials_requested"] == 2  # 2.0 is the JSON number 2
    assert body["spec"]["params"] == ["max_num_seqs", "max_num_batched_tokens"]
    assert body["spec"]["choices"] == {"max_num_batched_tokens": [512, 1024]}
    assert body["spec"]["enqueue"] == [enqueue[0]]
    said = "\n".join(body["adjustments"])
    for words in (
        "enforce_eager is fixed, so its choices are ignored",
        "enforce_eager is fixed, so it is not searched",
        "attention_backend is not searched: it has no candidate values on cpu",
        "max_num_batched_tokens is searched: it has choices",
        "{'max_num_seqs': 7} is dropped",
    ):
        assert words in said, said
    again = _post(app, {"study": _study("plain"), "space": {"params": ["max_num_seqs"]}})
    assert again.status_code == 201 and again.json()["adjustments"] == []


def test_a_knob_one_shipped_vllm_lacks_is_queued_with_a_warning(app: FastAPI) -> None:
    """max_num_partial_prefills is a flag of vLLM 0.26.0, not of 0.32.0: the API queued a study
    that searched it without a word, and a worker with 0.32.0 failed it at once."""
    space = {"choices": {"max_num_partial_prefills": [1, 4]}}
    r = _post(app, {"study": _study("partial"), "space": space, "confirm": {"launches": 0}})
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning.startswith("vLLM 0.32.0 has no flag for max_num_partial_prefills")
    assert "fails the study before any launch" in warning
    typed = {"choices": {"max_num_seqs": [8, 16]}, "params": ["flash_attn_version"]}
    plain = _post(app, {"study": _study("seqs"), "space": typed})
    assert plain.status_code == 201 and plain.json()["warnings"] == []  # spelt per version
