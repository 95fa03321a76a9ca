"""The read endpoints over a database that real studies produced through the fake vLLM server:
recommendations (flags, serve line, intervals, provenance, respelling, SLO, not-found with
suggestions, emulated kept apart, confirmation verdicts), studies, trials, Pareto, catalog."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import (
    TINY_WORKLOAD,
    budget_free_study,
    fake_server_runner,
    make_context,
    make_repo,
)
from tuner.catalog.gpus import get_gpu
from tuner.compose import StudyContext
from tuner.db.repository import Repository
from tuner.domain import ServingConfig
from tuner.space import SearchSpace
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

CHAT = TINY_WORKLOAD.replace(name="chat")
REAL = "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat"


def _with_fixed_backend(ctx: StudyContext) -> StudyContext:
    """Every trial (the baseline too) holds FLASH_ATTN, so every recommendation has a flag
    whose spelling depends on the vLLM version."""
    fixed = {"attention_backend": "FLASH_ATTN"}
    spec = dataclasses.replace(ctx.spec, fixed=fixed)
    space = SearchSpace(
        ctx.model, ctx.gpu, ctx.workload, params=spec.params, choices=spec.choices, fixed=fixed
    )
    return dataclasses.replace(ctx, spec=spec, space=space)


@dataclasses.dataclass(frozen=True)
class Db:
    url: str
    repo: Repository
    comparison_id: int


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Db:
    tmp = tmp_path_factory.mktemp("api")
    url = f"sqlite:///{tmp / 'tuner.db'}"
    repo = make_repo(url)
    runner = fake_server_runner(tmp)
    # Two real studies of tiny-ernie on h100 through the fake server (about 8 s together).
    chat = _with_fixed_backend(make_context(url, trials=3, name="chat-a", workload=CHAT))
    run_study(chat, runner, repo)
    run_study(make_context(url, trials=2, name="smoke-b"), runner, repo)
    # Emulated studies (in-process fake runner): one on the same combination, which must never
    # leak into real answers, and one on h200 only, with a confirmation phase.
    emu = make_context(url, trials=4, name="emu-h100", workload=CHAT)
    run_study(dataclasses.replace(emu, emulated=True), FakeRunner(), repo)
    h200 = make_context(url, trials=4, name="emu-h200", workload=CHAT, confirm_launches=2)
    h200 = dataclasses.replace(h200, gpu=get_gpu("h200"), emulated=True)
    run_study(h200, FakeRunner(), repo)
    comparison = repo.add_comparison(
        model="tiny-ernie",
        gpu="h100",
        workload="chat",
        a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=64),
        repeats=3,
        results={"kind": "ab", "metrics": [{"metric": "output_throughput", "ratio": 1.1}]},
        verdicts={"overall": "better"},
        study_name="chat-a",
    )
    return Db(url=url, repo=repo, comparison_id=comparison.id)


@pytest.fixture(scope="module")
def client(db: Db) -> Iterator[TestClient]:
    with TestClient(create_app(ApiSettings(storage=db.url))) as c:
        yield c


def _get(client: TestClient, url: str, status: int = 200) -> Any:
    r = client.get(url)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


def test_recommendation_found_with_flags_serve_line_intervals_and_provenance(
    client: TestClient, db: Db
) -> None:
    rec = _get(client, REAL)
    assert (rec["model"], rec["gpu"], rec["workload"]) == ("tiny-ernie", "h100", "chat")
    assert rec["study"] == "chat-a" and rec["objective"] == "balanced"
    trial = db.repo.get_trial("chat-a", rec["trial"])
    assert trial is not None and trial.status.value == "complete"
    assert rec["config"] == trial.config.to_dict()
    assert rec["config"]["attention_backend"] == "FLASH_ATTN"
    assert rec["vllm_version"] == "0.32.0" and rec["env"] == {}
    assert rec["flags"][rec["flags"].index("--attention-backend") + 1] == "FLASH_ATTN"
    assert rec["serve_command"].startswith("vllm serve baidu/ERNIE-4.5-0.3B-PT")
    assert " ".join(rec["flags"]) in rec["serve_command"]
    # tiny-ernie has no published weights: the ready line keeps random weights.
    assert "--load-format dummy" in rec["serve_command"]
    for name in ("output_throughput", "e2e_p99_ms", "ttft_p99_ms"):
        e = rec["metrics"][name]
        assert e["low"] <= e["median"] <= e["high"]
        assert len(e["values"]) == TINY_WORKLOAD.windows
        assert e["median"] == pytest.approx(trial.metrics[name].median)
    assert rec["memory_gib"] == pytest.approx(trial.objective_values[1])
    assert rec["score"] > 0 and rec["feasible"] is True
    assert rec["baseline"]["trial"] == 0 and "output_throughput" in rec["baseline"]["metrics"]
    prov = rec["provenance"]
    assert prov["gpu_name"] == "test host" and prov["vllm_version"] == "0.32.0"
    assert prov["emulated"] is False and prov["model"] == "tiny-ernie"
    assert prov["workload"] == "chat" and prov["hostname"]
    assert rec["confirmed"] is None


def test_flags_are_respelled_for_an_older_vllm(client: TestClient) -> None:
    rec = _get(client, REAL + "&vllm_version=0.12.0")
    assert rec["vllm_version"] == "0.12.0"
    assert "--attention-backend" not in rec["flags"]
    assert rec["env"] == {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}
    assert rec["serve_command"].startswith("VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve ")
    assert rec["provenance"]["vllm_version"] == "0.32.0"  # still what it was measured with
    # Empty is no version given, as an empty slo= is (it was a 422 pattern error).
    assert _get(client, REAL + "&vllm_version=")["vllm_version"] == "0.32.0"


def test_slo_keeps_only_trials_that_meet_it(client: TestClient) -> None:
    page = _get(client, "/v1/studies/chat-a/trials?state=complete&phase=search")
    p99 = sorted((t["metrics"]["e2e_p99_ms"]["median"], t["number"]) for t in page["items"])
    assert len(p99) >= 2 and p99[0][0] < p99[1][0]
    limit = (p99[0][0] + p99[1][0]) / 2  # only the fastest trial meets it
    rec = _get(client, REAL + f"&slo=e2e_p99={limit}ms")
    assert rec["trial"] == p99[0][1]
    assert rec["metrics"]["e2e_p99_ms"]["median"] <= limit
    assert rec["slo"] == {"e2e_p99_ms": pytest.approx(limit)}

    err = _get(client, REAL + "&slo=e2e_p99=0.001ms", 404)
    assert "none meets the SLO" in err["message"] and err["closest"]["study"] == "chat-a"


def test_objective_rescores_and_bad_parameters_are_422(client: TestClient) -> None:
    rec = _get(client, REAL + "&objective=throughput")
    assert rec["objective"] == "throughput"
    page = _get(client, "/v1/studies/chat-a/trials?state=complete&phase=search")
    best = max(page["items"], key=lambda t: t["metrics"]["output_throughput"]["median"])
    assert rec["trial"] == best["number"]
    for bad in ("&objective=fastest", "&slo=ttft=fast", "&vllm_version=banana", "&emulated=2"):
        err = _get(client, REAL + bad, 422)
        assert err["error"] == "invalid" and err["message"]


def test_an_slo_reads_as_on_the_command_line_and_a_bad_one_says_why(client: TestClient) -> None:
    """Spaces after the commas pass, as `--slo` takes them; a malformed SLO gets the parser's
    words, not the kilobytes of the pattern that spells out its grammar."""
    spaced = _get(client, REAL + "&slo=" + quote(" ttft_p99 = 9s,  e2e_p99=60s "))
    assert spaced["slo"] == {"ttft_p99_ms": 9000.0, "e2e_p99_ms": 60000.0}
    for url in (REAL, "/v1/sizing?model=tiny-ernie&rate=5000"):
        err = _get(client, url + "&slo=bogus", 422)
        assert "bad SLO item 'bogus': expected NAME=VALUE" in err["message"]
        assert len(err["message"]) < 300 and "(?:" not in err["message"]
    odd = _get(client, REAL + "&slo=ttft_p99=1e3ms", 422)  # parse_slo's float(), not the API's
    assert "a plain decimal number with ms or s" in odd["message"]


def test_not_found_names_the_nearest_measured_combinations(client: TestClient) -> None:
    err = _get(client, "/v1/recommendations?model=tiny-ernie&gpu=a100-80g&workload=chat", 404)
    assert err["error"] == "not_found"
    assert "tiny-ernie" in err["message"] and "a100-80g" in err["message"]
    nearest = [(n["model"], n["gpu"], n["workload"]) for n in err["nearest"]]
    assert nearest[0] == ("tiny-ernie", "h100", "chat")  # same model and workload, other GPU
    assert ("tiny-ernie", "h100", "smoke") in nearest
    assert all(n["gpu"] != "h200" for n in err["nearest"])  # emulated ones only when asked
    assert _get(client, err["nearest"][0]["url"])["study"] == "chat-a"

    err = _get(client, "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=rag", 404)
    assert [n["workload"] for n in err["nearest"][:2]] == ["chat", "smoke"]  # same model+GPU


def test_emulated_results_never_mix_with_real_ones(client: TestClient) -> None:
    assert _get(client, REAL)["study"] == "chat-a"
    emu = _get(client, REAL + "&emulated=true")
    assert emu["study"] == "emu-h100" and emu["provenance"]["emulated"] is True

    only_emulated = "/v1/recommendations?model=tiny-ernie&gpu=h200&workload=chat"
    err = _get(client, only_emulated, 404)
    assert "emulated=true" in err["hint"]
    rec = _get(client, only_emulated + "&emulated=true")
    assert rec["study"] == "emu-h200"
    # That study ended with a confirmation: its verdict picks the trial.
    assert rec["confirmed"] is not None
    expected = 0 if rec["confirmed"]["label"] == "defaults" else int(rec["confirmed"]["label"][1:])
    assert rec["trial"] == expected
    evidence = _get(client, f"/v1/compare/{rec['confirmed']['comparison_id']}")
    assert evidence["results"]["kind"] == "confirmation"


def test_studies_list_and_detail(client: TestClient) -> None:
    listing = _get(client, "/v1/studies")
    names = [s["name"] for s in listing["items"]]
    assert listing["total"] == 4 and set(names) == {"chat-a", "smoke-b", "emu-h100", "emu-h200"}
    assert names[0] == "emu-h200"  # newest first
    assert _get(client, "/v1/studies?workload=smoke")["total"] == 1
    detail = _get(client, "/v1/studies/chat-a")
    assert detail["status"] == "finished" and detail["n_trials"] == 3
    assert detail["trial_counts"]["complete"] + detail["trial_counts"]["failed"] >= 1
    assert detail["spec"]["fixed"] == {"attention_backend": "FLASH_ATTN"}
    assert sum(detail["confirmation_counts"].values()) == 0
    # A confirmation's launches are counted apart: n_trials is the search, as requested.
    confirmed = _get(client, "/v1/studies/emu-h200")
    assert confirmed["n_trials"] == 4 == confirmed["n_trials_requested"]
    assert confirmed["confirmation_counts"]["complete"] >= 2
    err = _get(client, "/v1/studies/nope", 404)
    assert "nope" in err["message"]


def test_trials_are_paginated_with_a_total_and_filtered_by_state(client: TestClient) -> None:
    first = _get(client, "/v1/studies/chat-a/trials?limit=2&offset=0")
    assert first["total"] == 3 and first["limit"] == 2 and first["offset"] == 0
    assert [t["number"] for t in first["items"]] == [0, 1]
    rest = _get(client, "/v1/studies/chat-a/trials?limit=2&offset=2")
    assert [t["number"] for t in rest["items"]] == [2] and rest["total"] == 3
    assert _get(client, "/v1/studies/chat-a/trials?offset=10")["items"] == []
    complete = _get(client, "/v1/studies/chat-a/trials?state=complete")
    assert complete["total"] == len(complete["items"]) >= 1
    assert all(t["status"] == "complete" for t in complete["items"])
    baseline = complete["items"][0]
    assert baseline["is_baseline"] and baseline["score"] == pytest.approx(1.0)
    assert _get(client, "/v1/studies/chat-a/trials?state=running")["total"] == 0
    err = _get(client, "/v1/studies/chat-a/trials?state=exploded", 422)
    assert "state" in err["message"]
    err = _get(client, "/v1/studies/chat-a/trials?limit=0", 422)
    assert "limit" in err["message"]
    one = _get(client, "/v1/studies/chat-a/trials/0")
    assert one["number"] == 0 and len(one["windows"]) == TINY_WORKLOAD.windows
    _get(client, "/v1/studies/chat-a/trials/99", 404)


def test_a_query_parameter_a_route_does_not_take_is_refused_not_ignored(
    client: TestClient,
) -> None:
    """`?status=failed` on the trials route (its filter is `state`; the studies route's is
    `status`) answered every trial with a 200, as if it had filtered them."""
    err = _get(client, "/v1/studies/chat-a/trials?status=failed", 422)
    assert err["problems"][0]["where"] == "query parameter status"
    assert "it takes: limit, offset, phase, state" in err["message"]
    err = _get(client, "/v1/studies?state=failed&limit=5", 422)
    assert [p["where"] for p in err["problems"]] == [
        "query parameter state",
        "query parameter limit",
    ]
    assert _get(client, "/v1/studies?status=failed")["items"] == []
    assert client.get("/healthz?probe=1").status_code == 422


def test_a_page_past_the_end_keeps_the_true_total(client: TestClient) -> None:
    # It said total = offset: 10 trials where there are 3, 5 failed where none did.
    assert _get(client, "/v1/studies/chat-a/trials?offset=10")["total"] == 3
    assert _get(client, "/v1/studies/chat-a/trials?offset=5&state=failed")["total"] == 0
    assert _get(client, "/v1/studies/chat-a/trials?offset=2147483647")["total"] == 3


def _dominates(a: list[float], b: list[float]) -> bool:
    no_worse = a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2]
    return no_worse and (a[0] > b[0] or a[1] < b[1] or a[2] < b[2])


def test_pareto_front_is_exactly_the_non_dominated_complete_trials(client: TestClient) -> None:
    for study in ("chat-a", "emu-h100"):
        front = _get(client, f"/v1/studies/{study}/pareto")
        assert [o["direction"] for o in front["objectives"]] == ["maximize", "minimize", "minimize"]
        page = _get(client, f"/v1/studies/{study}/trials?state=complete&phase=search")
        values = {t["number"]: t["objective_values"] for t in page["items"]}
        on_front = {t["number"] for t in front["trials"]}
        assert on_front and on_front <= set(values)
        for n, v in values.items():
            dominated = any(_dominates(w, v) for m, w in values.items() if m != n)
            assert (n in on_front) is not dominated


def test_comparison_models_gpus_and_health(client: TestClient, db: Db) -> None:
    comparison = _get(client, f"/v1/compare/{db.comparison_id}")
    assert comparison["b_config"] == {"max_num_seqs": 64} and comparison["a_config"] == {}
    assert comparison["verdicts"] == {"overall": "better"}
    assert "no comparison" in _get(client, "/v1/compare/999", 404)["message"]
    models = {m["alias"]: m for m in _get(client, "/v1/models")}
    assert models["tiny-ernie"]["weights_available"] is False and models["ernie-0.3b"]["layers"]
    gpus = {g["name"]: g for g in _get(client, "/v1/gpus")}
    assert gpus["h100"]["compute_capability"] == "9.0" and gpus["cpu"]["compute_capability"] is None
    assert "FLASH_ATTN" in gpus["h200"]["attention_backends"]
    health = _get(client, "/healthz")
    assert health["status"] == "ok" and health["studies"] == 4


def test_cached_rankings_follow_new_trials(tmp_path: Path) -> None:
    """A study that grows after a first answer is re-read, not served from the cache."""
    url = f"sqlite:///{tmp_path / 'grow.db'}"
    repo = make_repo(url)
    run_study(make_context(url, trials=1, name="grow", workload=CHAT), FakeRunner(), repo)
    with TestClient(create_app(ApiSettings(storage=repo))) as c:
        assert _get(c, REAL)["trial"] == 0
        assert [t["number"] for t in _get(c, "/v1/studies/grow/pareto")["trials"]] == [0]
        # A new trial twice as fast on the same memory: it must win at once.
        base = repo.get_trial("grow", 0)
        assert base is not None and base.objective_values is not None
        better = dataclasses.replace(base.to_result(), config=ServingConfig(max_num_seqs=64))
        thr, mem, p99 = base.objective_values
        repo.finish_trial(
            repo.start_trial("grow", 1, better.config), better, None, [2 * thr, mem, p99 / 2]
        )
        assert _get(c, REAL)["trial"] == 1
        assert [t["number"] for t in _get(c, "/v1/studies/grow/pareto")["trials"]] == [1]


def test_an_emulated_peak_above_the_emulated_gpu_comes_with_a_warning(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'emu.db'}"
    repo = make_repo(url)
    # vLLM's processes overshoot their utilization budget (measured on the H200): a fake GPU of
    # 26 GiB at the default 0.9 peaks at 23.4 GiB, above an A10G's 22.5.
    ctx = make_context(url, trials=1, name="emu-a10g", gpu="a10g", workload=CHAT)
    run_study(dataclasses.replace(ctx, emulated=True), FakeRunner(memory_gib=26.0), repo)
    real = make_context(url, trials=1, name="real-a10g", gpu="a10g", workload=CHAT)
    run_study(real, FakeRunner(memory_gib=26.0), repo)
    query = "/v1/recommendations?model=tiny-ernie&gpu=a10g&workload=chat"
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        emulated = _get(c, query + "&emulated=true")
        measured = _get(c, query)
    assert emulated["memory_gib"] > get_gpu("a10g").memory_gib
    (warning,) = emulated["warnings"]
    assert "above the emulated GPU's 22.5 GiB" in warning
    assert measured["warnings"] == []  # a real A10G's own measurement needs no such warning


def test_a_combination_whose_every_trial_failed_is_named_as_such(tmp_path: Path) -> None:
    # It said "nothing real was measured ... run a study for it", with no study named.
    url = f"sqlite:///{tmp_path / 'failed.db'}"
    repo = make_repo(url)
    no_memory = FakeRunner(max_utilization=0.0)  # every launch: MEMORY_EXCEEDED
    run_study(make_context(url, trials=2, name="all-failed", workload=CHAT), no_memory, repo)
    assert {t.status.value for t in repo.list_trials("all-failed", limit=None)} == {"failed"}
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        err = _get(c, REAL, 404)
    assert "no trial of" in err["message"] and "1 study tried it (all-failed)" in err["message"]
    assert "tuner trials all-failed --state failed" in err["hint"]
    # A failure's objective values were the penalty the sampler was told (a P99 of 10,000 s),
    # read by API clients as measurements; `tuner export` gives null, and so does the API now.
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        trials = _get(c, "/v1/studies/all-failed/trials")["items"]
    assert trials and all(t["objective_values"] is None for t in trials), trials


def test_an_slo_nobody_meets_counts_every_measured_trial(client: TestClient, db: Db) -> None:
    complete = [
        t
        for t in db.repo.list_trials("chat-a", limit=None)
        if t.status.value == "complete" and t.phase.value == "search"
    ]
    err = _get(client, REAL + "&slo=e2e_p99=0.001ms", 404)
    assert err["message"].startswith(f"{len(complete)} real (not emulated) trials measured")


def test_scores_stay_ratios_when_the_canary_broke_the_defaults(tmp_path: Path) -> None:
    """The confirmation's full canary broke vLLM's defaults: the API then had no reference,
    showed no trial scores, and recommended with a raw value (7.24) that outranked every
    ratio of other studies."""
    from tuner.load.canary import FULL, QUICK
    from tuner.results.export import study_records

    shape = next(s for s in FULL if s not in QUICK)
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    repo = make_repo(url)
    ctx = make_context(url, name="s", trials=3, confirm_launches=2, confirm_top=1, workload=CHAT)
    run_study(ctx, FakeRunner(canary_breaks={ctx.space.baseline(): shape}), repo)
    exported = {r["number"]: r["score"] for r in study_records(repo, "s") if r["phase"] == "search"}
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        items = _get(c, "/v1/studies/s/trials")["items"]
        api = {t["number"]: t["score"] for t in items if t["phase"] == "search"}
        rec = _get(c, REAL)
    assert api == exported and api[0] == pytest.approx(1.0)
    assert rec["score"] == pytest.approx(api[rec["trial"]])


def test_a_study_whose_defaults_failed_recommends_with_no_score(tmp_path: Path) -> None:
    """No measured defaults, no ratio: the recommendation sent the raw composite (4.44) as a
    score described as "1.0 = vLLM's defaults", where the trials and `tuner best` say none."""
    from tuner.load.canary import QUICK

    url = f"sqlite:///{tmp_path / 'nobase.db'}"
    repo = make_repo(url)
    ctx = make_context(url, name="s", trials=3, workload=CHAT)
    run_study(ctx, FakeRunner(canary_breaks={ctx.space.baseline(): QUICK[0]}), repo)
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        items = _get(c, "/v1/studies/s/trials")["items"]
        rec = _get(c, REAL)
    assert [t["status"] for t in items if t["number"] == 0] == ["failed"]
    assert rec["trial"] != 0 and rec["baseline"] is None
    assert rec["score"] is None and all(t["score"] is None for t in items)
    # `tuner best --json` sent it (7.14, read as a 7x gain) where its text said none
    from tuner.results import recommendation

    best = recommendation(repo, "s")
    assert best is not None and best.score is None
    assert "score: none (vLLM's defaults have no measurement" in best.render()


def test_a_comparisons_non_finite_numbers_are_null_and_its_labels_stay(tmp_path: Path) -> None:
    """The store keeps a NaN as the string "nan" (PostgreSQL's JSON has no NaN): the answer
    sent "ratio": "nan" where the README promises null; a label that reads "nan" is a label."""
    nan, inf = float("nan"), float("inf")
    repo = make_repo(f"sqlite:///{tmp_path / 'nan.db'}")
    metric = {"metric": "itl_p50_ms", "label": "nan", "ratio": nan, "low": -inf, "high": inf,
              "a": {"median": nan, "values": [1.0, nan]}, "b": {"median": 2.0, "values": [2.0]},
              "verdict": "inconclusive"}  # fmt: skip
    row = repo.add_comparison(
        model="tiny-ernie", gpu="h100", workload="w", a_config=ServingConfig(),
        b_config=ServingConfig(max_num_seqs=8), repeats=2,
        results={"a_label": "nan", "b_label": "inf", "confidence": 0.95, "metrics": [metric]},
        verdicts={"itl_p50_ms": "inconclusive", "overall": "inconclusive"},
    )  # fmt: skip
    with TestClient(create_app(ApiSettings(storage=repo))) as c:
        results = _get(c, f"/v1/compare/{row.id}")["results"]
    (got,) = results["metrics"]
    assert got["ratio"] is None and got["low"] is None and got["high"] is None
    assert got["a"] == {"median": None, "values": [1.0, None]}
    assert got["label"] == "nan" and (results["a_label"], results["b_label"]) == ("nan", "inf")


def test_a_running_study_whose_tuner_exited_says_so_in_the_list_and_on_its_pages(
    tmp_path: Path,
) -> None:
    """`kill -9` of `tuner run` leaves its study "running" until resumed: the API marks it
    (``runner_gone``) and the pages badge it, while a live runner's study stays unmarked."""
    import subprocess
    import sys

    from tuner.db import StudyStatus
    from tuner.study.sharing import host_name, worker_identity
    from tuner.telemetry import since_boot

    url = f"sqlite:///{tmp_path / 'gone.db'}"
    repo = make_repo(url)
    for name in ("killed", "live"):
        run_study(make_context(url, trials=1, name=name, workload=CHAT), FakeRunner(), repo)
        repo.set_study_status(name, StudyStatus.RUNNING)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {"host": host_name(), "pid": exited.pid, "start": since_boot(exited.pid)}
    exited.wait()
    repo.set_study_runner("killed", dead)
    repo.set_study_runner("live", worker_identity())  # this test's process: alive
    with TestClient(create_app(ApiSettings(storage=repo))) as c:
        listed = {s["name"]: s for s in _get(c, "/v1/studies")["items"]}
        assert listed["killed"]["runner_gone"] is True
        assert listed["live"]["runner_gone"] is False
        assert _get(c, "/v1/studies/killed")["runner_gone"] is True
        overview = c.get("/ui/").text
        assert overview.count('class="badge fault runner-gone"') == 1
        page = c.get("/ui/studies/killed").text
        assert "tuner gone" in page and "tuner run --study killed --resume" in page
        assert "tuner gone" not in c.get("/ui/studies/live").text
    repo.set_study_status("killed", StudyStatus.FINISHED)  # finished: nothing to resume
    with TestClient(create_app(ApiSettings(storage=repo))) as c:
        assert _get(c, "/v1/studies/killed")["runner_gone"] is False


def test_a_recommendation_takes_a_gpu_price_and_names_its_source(tmp_path: Path) -> None:
    """GET /v1/recommendations had no $ at all and refused gpu_price (an unknown parameter),
    where `tuner best --gpu-price` and GET /v1/sizing price the same study."""
    from tests.integration.test_launch_cli import insert_measured_study
    from tuner.catalog.gpus import CATALOG_PRICES
    from tuner.scoring.cost import usd_per_million

    url = f"sqlite:///{tmp_path / 'priced.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    repo = insert_measured_study(url, configs, name="priced", gpu="h100", workload="chat")
    query = "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat"
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        given = _get(c, query + "&gpu_price=2.5")
        default = _get(c, query)
        for bad in ("-1", "1000.01", "nan", "inf", "cheap"):
            refused = c.get(query + f"&gpu_price={bad}")
            assert refused.status_code == 422, (bad, refused.text)
            assert "gpu_price" in refused.text
    trial = repo.get_trial("priced", given["trial"])
    assert trial is not None
    thr = trial.metrics["output_throughput"].median
    price = {"usd_per_hour": 2.5, "source": "given price", "catalog_default": False}
    assert given["price"] == price
    assert given["cost"]["median"] == pytest.approx(usd_per_million(thr, 2.5))
    assert given["cost_is_upper_bound"] is False
    base = repo.get_trial("priced", given["baseline"]["trial"])
    assert base is not None
    assert given["baseline"]["cost"]["median"] == pytest.approx(
        usd_per_million(base.metrics["output_throughput"].median, 2.5)
    )
    assert default["price"]["catalog_default"] and "list-price" in default["price"]["source"]
    assert default["cost"]["median"] == pytest.approx(usd_per_million(thr, CATALOG_PRICES["h100"]))


def test_an_open_loop_recommendation_says_its_cost_and_ranking_are_bounds(tmp_path: Path) -> None:
    """A rate ladder the server kept up with at its top rate: the capacity ranking rests on a
    lower bound, and the cost is at most what it says."""
    from tests.integration.test_launch_cli import insert_ladder_study

    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    insert_ladder_study(url)
    label = quote("chat-heavy[rate_ladder=[1.0, 2.0]]")  # the study's workload, as labelled
    query = f"/v1/recommendations?model=tiny-ernie&gpu=h200&workload={label}"
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        rec = _get(c, query)
        balanced = _get(c, query + "&objective=balanced")
    assert rec["cost_is_upper_bound"] is True
    (warning,) = rec["warnings"]
    assert warning.startswith("the capacity ranking rests on a lower bound")
    assert "add rates above 2 req/s to the rate_ladder" in warning
    assert balanced["warnings"] == [] and balanced["cost_is_upper_bound"] is True


def test_an_open_loop_capacity_is_labelled_a_lower_bound_beside_it(tmp_path: Path) -> None:
    """GET /v1/sizing says capacity_is_lower_bound of a capacity read at the top rate of a
    rate ladder the server kept up with; the recommendation and the trials gave the same
    capacity_* metrics with nothing to tell them from a capacity."""
    from tests.integration.test_launch_cli import insert_ladder_study, insert_measured_study

    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    insert_ladder_study(url)
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="closed", gpu="h200", workload="chat")
    label = quote("chat-heavy[rate_ladder=[1.0, 2.0]]")
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        rec = _get(c, f"/v1/recommendations?model=tiny-ernie&gpu=h200&workload={label}")
        trials = _get(c, "/v1/studies/ladder/trials")["items"]
        one = _get(c, "/v1/studies/ladder/trials/0")
        closed = _get(c, "/v1/recommendations?model=tiny-ernie&gpu=h200&workload=chat")
    # Trial #0 (the defaults) kept up with 2 req/s; #1 served less there: its capacity, at
    # 1 req/s, is bracketed.
    assert rec["trial"] == 0 and rec["metrics"]["capacity_load"]["median"] == 2.0
    assert rec["capacity_is_lower_bound"] is True
    assert rec["baseline"]["capacity_is_lower_bound"] is True
    assert [(t["number"], t["capacity_is_lower_bound"]) for t in trials] == [(0, True), (1, False)]
    assert one["capacity_is_lower_bound"] is True
    assert closed["capacity_is_lower_bound"] is False
    assert closed["baseline"]["capacity_is_lower_bound"] is False


def test_a_recommendation_of_a_study_with_an_unreadable_stored_price_still_answers(
    tmp_path: Path,
) -> None:
    """A stored gpu_price that is no price (a study of an older tuner) leaves the cost out and
    says why, with what to pass; the flags are still recommended, as before the $ figures."""
    from tests.integration.test_launch_cli import insert_measured_study

    url = f"sqlite:///{tmp_path / 'odd.db'}"
    repo = insert_measured_study(
        url,
        [ServingConfig(), ServingConfig(max_num_seqs=64)],
        name="odd",
        gpu="h100",
        workload="chat",
    )
    repo._update_study("odd", {"gpu_price": "cheap"})
    query = "/v1/recommendations?model=tiny-ernie&gpu=h100&workload=chat"
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        rec = _get(c, query)
        given = _get(c, query + "&gpu_price=2.5")
    assert rec["serve_command"] and rec["cost"] is None and rec["price"] is None
    assert rec["baseline"]["cost"] is None
    (warning,) = rec["warnings"]
    assert warning == (
        "no cost: the study's stored gpu_price 'cheap' is no price per GPU-hour; "
        "give one with gpu_price"
    )
    assert given["price"]["source"] == "given price" and given["warnings"] == []


def test_an_emulated_studys_cost_says_it_was_not_measured_on_that_gpu(tmp_path: Path) -> None:
    """`tuner run --emulate --gpu a100-80g` on an H200 priced the H200's throughput at the
    A100's rate, with nothing near the cost to say so: a third of any real cost. The price
    behind an emulated cost now says that its throughput was measured on another GPU, on the
    API, `tuner best` and the study page alike (one home: tuner.results.costs.study_price)."""
    from tuner.results import costs, recommendation
    from tuner.results.report.study import trial_lines

    url = f"sqlite:///{tmp_path / 'emu-cost.db'}"
    repo = make_repo(url)
    ctx = make_context(url, trials=1, name="emu", gpu="a10g", workload=CHAT)
    run_study(dataclasses.replace(ctx, emulated=True), FakeRunner(), repo)
    run_study(
        make_context(url, trials=1, name="real", gpu="a10g", workload=CHAT), FakeRunner(), repo
    )
    query = "/v1/recommendations?model=tiny-ernie&gpu=a10g&workload=chat&gpu_price=1.5"
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        emulated = _get(c, query + "&emulated=true")["price"]["source"]
        measured = _get(c, query)["price"]["source"]
    assert "measured in emulation on another GPU" in emulated and "not the cost on a10g" in emulated
    assert measured == "given price"
    best = recommendation(repo, "emu", gpu_price=1.5)
    assert best is not None and "measured in emulation" in best.price
    assert "measured in emulation" not in recommendation(repo, "real", gpu_price=1.5).price  # type: ignore[union-attr]
    study = repo.get_study("emu")
    assert study is not None and study.emulated
    price = costs.study_price(study.gpu, {"gpu_price": 2.0}, emulated=study.emulated)
    assert price is not None and price.usd_per_hour == 2.0 and "emulation" in price.source
    assert trial_lines(study, repo.list_trials("emu", limit=None))  # the page prices it too
    from tuner.results.sizing import REQ, Rate, size

    (fleet,) = size(
        repo, model="tiny-ernie", rate=Rate(1.0, REQ), gpus=("a10g",), emulated=True,
        gpu_price=1.5,
    )  # fmt: skip
    assert fleet.price is not None and "measured in emulation" in fleet.price.source


def test_a_study_says_which_of_its_search_trials_used_no_place_in_its_budget(
    tmp_path: Path,
) -> None:
    """A ruled-out first draw and an interrupted trial use no trial of the budget: their study
    ran its 4 trials, not 6 of 4 (n_trials, every search row, stays as it was)."""
    url = f"sqlite:///{tmp_path / 'free.db'}"
    budget_free_study(url)
    with TestClient(create_app(ApiSettings(storage=url))) as c:
        detail = _get(c, "/v1/studies/s1")
        [listed] = _get(c, "/v1/studies")["items"]
    for study in (detail, listed):
        assert study["n_budget_trials"] == 4 == study["n_trials_requested"]
        assert study["free_counts"] == {"invalid_config": 1, "interrupted": 1}
        assert study["n_trials"] == 6 == sum(study["trial_counts"].values())
