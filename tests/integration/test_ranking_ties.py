"""One ranking rule everywhere: given the same ties, ``tuner best`` (CLI), ``tuner launch``'s
choice, ``GET /v1/recommendations`` and the dashboard's overview name the same winner.

Two studies of the same model, GPU and workload measured the same configurations with the
same in-process fake, so every score ties twice: between the two trials of one configuration
inside a study (the earlier trial wins) and between the studies (the more recently updated
study wins). Touching the older study flips the second tie, everywhere at once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import ApiSettings
from tests.integration.test_launch_cli import E2E_CONFIG, insert_measured_study
from tuner.cli.app import app
from tuner.db.repository import Repository
from tuner.deploy.local import best_local
from tuner.domain import Objective, ServingConfig
from tuner.scoring.ranking import Standing, best_first
from tuner.study.standings import rank

# The defaults, then one configuration twice: trials 1 and 2 get identical measurements, and
# E2E_CONFIG beats the defaults on the balanced score with the fake's model.
CONFIGS = [ServingConfig(), E2E_CONFIG, E2E_CONFIG]


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Repository]:
    url = f"sqlite:///{tmp_path / 'ties.db'}"
    insert_measured_study(url, CONFIGS, name="older", fresh_runner=True)
    time.sleep(0.01)  # updated_at is a float of seconds: keep the two studies apart
    repo = insert_measured_study(url, CONFIGS, name="newer", fresh_runner=True)
    return url, repo


@pytest.fixture
def client(store: tuple[str, Repository]) -> Iterator[TestClient]:
    with TestClient(create_app(ApiSettings(storage=store[0]))) as c:
        yield c


def winners(url: str, repo: Repository, client: TestClient) -> dict[str, tuple[str, int]]:
    """(study, trial) each surface names for tiny-ernie on cpu, smoke workload."""
    return winners_of(url, repo, client, ("older", "newer"))


def winners_of(
    url: str, repo: Repository, client: TestClient, studies: tuple[str, ...]
) -> dict[str, tuple[str, int]]:
    found: dict[str, tuple[str, int]] = {}
    for study in studies:  # tuner best: per study, so the study is given
        run = CliRunner().invoke(app, ["best", study, "--json", "--storage", url])
        assert run.exit_code == 0, run.output
        found[f"cli:{study}"] = (study, json.loads(run.stdout)["recommendation"]["trial_number"])
    launch = best_local(repo, "tiny-ernie", "cpu", workload="smoke")
    found["launch"] = (launch.study, launch.trial)
    answer = client.get(
        "/v1/recommendations", params={"model": "tiny-ernie", "gpu": "cpu", "workload": "smoke"}
    )
    assert answer.status_code == 200, answer.text
    found["api"] = (answer.json()["study"], answer.json()["trial"])
    page = client.get("/ui/")
    assert page.status_code == 200
    best_table = page.text.split("</table>")[0]
    link = re.search(r'href="[^"]*/studies/([\w-]+)"[^>]*>[^<]*</a>\s*#(\d+)', best_table)
    assert link is not None, best_table
    found["dashboard"] = (link.group(1), int(link.group(2)))
    return found


def test_every_surface_names_the_same_winner_on_ties(
    store: tuple[str, Repository], client: TestClient
) -> None:
    url, repo = store
    ranked = rank(repo, "newer", Objective.BALANCED)  # the studies' own
    assert ranked[0].score == ranked[1].score and {ranked[0].number, ranked[1].number} == {1, 2}
    assert ranked[0].number == 1  # the earlier of two equal trials

    found = winners(url, repo, client)
    assert found["cli:older"] == ("older", 1) and found["cli:newer"] == ("newer", 1)
    assert found["launch"] == found["api"] == found["dashboard"] == ("newer", 1), found

    repo.set_study_status("older", "finished")  # a write: "older" is now the recent one
    found = winners(url, repo, client)
    assert found["launch"] == found["api"] == found["dashboard"] == ("older", 1), found


def test_the_rule_orders_feasibility_score_recency_then_trial() -> None:
    items = [
        ("infeasible, best score", Standing(False, 9.0, 5.0, 0)),
        ("nan score", Standing(True, float("nan"), 9.0, 0)),
        ("old study", Standing(True, 2.0, 1.0, 0)),
        ("new study, later trial", Standing(True, 2.0, 3.0, 7)),
        ("new study, earlier trial", Standing(True, 2.0, 3.0, 4)),
        ("no score", Standing(True, None, 9.0, 0)),
    ]
    order = [name for name, _ in best_first(items, lambda item: item[1])]
    assert order == [
        "new study, earlier trial",
        "new study, later trial",
        "old study",
        "nan score",  # a non-finite score ranks as the lowest, with a missing one
        "no score",
        "infeasible, best score",
    ]


def test_a_tie_goes_to_the_pick_a_confirmation_decided_everywhere(
    store: tuple[str, Repository], client: TestClient
) -> None:
    """The older study's confirmation chose its #1; the newer study's #1 ties with it on a
    single search launch. The confirmed pick wins the tie on every surface (the API ordered
    these by recency alone)."""
    from dataclasses import replace

    from tests.unit.test_confirm_choose import _row

    url, repo = store
    row = _row()
    results = {**row.results, "b_label": "#1"}
    repo.add_comparison(
        model="tiny-ernie",
        gpu="cpu",
        workload="smoke",
        a_config=ServingConfig(),
        b_config=E2E_CONFIG,
        repeats=3,
        results=results,
        verdicts=replace(row, results=results).verdicts,
        study_name="older",
    )
    found = winners(url, repo, client)
    assert found["launch"] == found["api"] == found["dashboard"] == ("older", 1), found


def test_a_study_that_never_measured_the_defaults_does_not_outrank_scores_against_them(
    tmp_path: Path,
) -> None:
    """A study without a trial of vLLM's defaults scores raw values (a balanced score in the
    hundreds, not x defaults). Across studies it outranked every study whose scores are against
    its defaults, on every surface; now a score against the defaults goes first."""
    url = f"sqlite:///{tmp_path / 'raw.db'}"
    insert_measured_study(url, CONFIGS, name="scored", fresh_runner=True)
    time.sleep(0.01)  # the raw study is the newer one: recency would favour it on a tie
    repo = insert_measured_study(url, [E2E_CONFIG], name="raw", fresh_runner=True)
    (raw,) = rank(repo, "raw", Objective.BALANCED)
    assert not raw.relative and raw.score > rank(repo, "scored", Objective.BALANCED)[0].score
    with TestClient(create_app(ApiSettings(storage=url))) as client:
        found = winners_of(url, repo, client, ("scored", "raw"))
    assert found["launch"] == found["api"] == found["dashboard"] == ("scored", 1), found
    assert found["cli:raw"] == ("raw", 0)  # within its own study it still has a best


def test_a_study_that_changed_its_workload_never_stands_for_the_preset(tmp_path: Path) -> None:
    """A study of `smoke` with `[workload]` values of its own measured another load. It stood
    for `smoke` on every surface (it was the newer study, so it won the tie); now it competes
    only under its own name, smoke[...], as its noise profiles and launch logs are keyed."""
    from tuner.results import overview
    from tuner.results.sizing import Rate, size

    url = f"sqlite:///{tmp_path / 'changed.db'}"
    insert_measured_study(url, CONFIGS, name="plain", fresh_runner=True)
    time.sleep(0.01)
    changed = {"concurrency": 2}
    repo = insert_measured_study(
        url, CONFIGS, name="changed", fresh_runner=True, workload_overrides=changed
    )
    label = "smoke[concurrency=2]"
    study = repo.get_study("changed")
    assert study is not None and study.workload_label == label
    with TestClient(create_app(ApiSettings(storage=url))) as client:
        found = winners_of(url, repo, client, ("plain", "changed"))
        assert found["launch"] == found["api"] == ("plain", 1), found
        own = client.get(
            "/v1/recommendations", params={"model": "tiny-ernie", "gpu": "cpu", "workload": label}
        )
        assert own.status_code == 200 and own.json()["study"] == "changed"
        assert own.json()["workload"] == label
    assert best_local(repo, "tiny-ernie", "cpu", workload=label).study == "changed"
    studies = repo.list_studies()
    trials = {s.name: repo.list_trials(s.name, limit=None) for s in studies}
    rows = {(e.workload, e.study) for e in overview(studies, trials, {})}
    assert rows == {("smoke", "plain"), (label, "changed")}
    sized = size(repo, model="tiny-ernie", rate=Rate(5.0, "req/s"), workload="smoke")
    assert [s.study for s in sized] == ["plain"]
    # The CLI names it as the matching does (it said "smoke", and `tuner size --workload smoke`
    # then answered with the other study's numbers, or with none).
    listed = CliRunner().invoke(app, ["studies", "--storage", url])
    assert label in " ".join(listed.stdout.split())
    best = CliRunner().invoke(app, ["best", "changed", "--json", "--storage", url])
    assert json.loads(best.stdout)["recommendation"]["provenance"]["workload"] == label


def test_every_surface_shows_the_same_score_for_every_trial(
    store: tuple[str, Repository], client: TestClient
) -> None:
    """`tuner trials --json`, the API's trials, `tuner export` and the study page's lines show
    one score per trial, against the study's defaults (the CLI showed the column stored at the
    trial's end, which for the defaults' own trial was against nothing)."""
    from tuner.results.export import study_records
    from tuner.results.report.study import trial_lines

    url, repo = store
    run = CliRunner().invoke(app, ["trials", "newer", "--json", "--storage", url])
    assert run.exit_code == 0, run.output
    cli = {t["number"]: t["score"] for t in json.loads(run.stdout)}
    api = client.get("/v1/studies/newer/trials").json()["items"]
    exported = {r["number"]: r["score"] for r in study_records(repo, "newer")}
    study = repo.get_study("newer")
    assert study is not None
    page = {t.number: t.score for t in trial_lines(study, repo.list_trials("newer", limit=None))}
    assert cli == {t["number"]: t["score"] for t in api}
    assert cli == exported == page
    assert cli[0] == 1.0 and cli[1] is not None and cli[1] > 1.0
    # The study page's best is the study's standings' top, as `tuner best` names it.
    from tuner.results.report import study_report

    report = study_report(study, repo.list_trials("newer", limit=None))
    assert report.best is not None and report.best.number == rank(repo, "newer", Objective(
        study.objective))[0].number == 1  # fmt: skip


def test_two_hub_models_with_one_name_are_never_mixed(tmp_path: Path) -> None:
    """orgA/foo and orgB/foo were both stored as model "foo": the overview showed one row
    mixing them, and a recommendation for "foo" could hand out the other fork's flags."""
    import sqlite3

    from tuner.results import overview

    db = tmp_path / "forks.db"
    url = f"sqlite:///{db}"
    insert_measured_study(url, [ServingConfig(), E2E_CONFIG], name="fork-a", model="foo")
    repo = insert_measured_study(url, [ServingConfig(), E2E_CONFIG], name="fork-b", model="foo")
    with sqlite3.connect(db) as c:  # as tuner stores an uncatalogued hub id
        for name, org in (("fork-a", "orgA"), ("fork-b", "orgB")):
            c.execute(
                "UPDATE tuner_studies SET model_source = ? WHERE name = ?", (f"{org}/foo", name)
            )
    studies = repo.list_studies()
    trials = {s.name: repo.list_trials(s.name, limit=None) for s in studies}
    assert sorted(e.model for e in overview(studies, trials, {})) == ["orgA/foo", "orgB/foo"]
    with TestClient(create_app(ApiSettings(storage=url))) as client:
        params = {"gpu": "cpu", "workload": "smoke"}
        vague = client.get("/v1/recommendations", params={"model": "foo", **params})
        assert vague.status_code == 409 and "orgA/foo, orgB/foo" in vague.json()["message"]
        sized = client.get("/v1/sizing", params={"model": "foo", "rate": "2"})
        assert sized.status_code == 409 and sized.json()["error"] == "ambiguous_model"
        exact = client.get("/v1/recommendations", params={"model": "orgB/foo", **params})
        assert exact.status_code == 200 and exact.json()["study"] == "fork-b"
    assert best_local(repo, "orgA/foo", "cpu").study == "fork-a"  # tuner launch's choice
    from tuner.errors import UsageError
    from tuner.results.sizing import Rate, size

    with pytest.raises(UsageError, match="names 2 models"):  # tuner size and GET /v1/sizing
        size(repo, model="foo", rate=Rate(100.0, "tok/s"), gpus=(), workload=None)


def test_a_fine_tune_named_as_a_catalog_model_is_another_model() -> None:
    from tuner.catalog import MODELS, model_key

    qwen = MODELS["qwen2.5-7b"]
    assert model_key("qwen2.5-7b", qwen.hub_id) == "qwen2.5-7b"  # the catalog's own
    assert model_key("qwen2.5-7b", "/root/.cache/tuner/models/qwen2.5-7b-0123") == "qwen2.5-7b"
    assert model_key("qwen2.5-7b", None) == "qwen2.5-7b"
    assert model_key("qwen2.5-7b", "myorg/qwen2.5-7b") == "myorg/qwen2.5-7b"
    assert model_key("foo", "orgA/foo") == "orgA/foo"


def test_a_capacity_study_names_one_winner_everywhere(tmp_path: Path) -> None:
    """A capacity study judges its SLO on the load curve (the most a load point that met it
    served). #0 served the most within the SLO on its curve, but its fixed-load P99 E2E misses
    the SLO: `tuner best`, `tuner size` and `tuner launch` named #0, while the overview, the
    study page's best card and the API judged the fixed load alone and named #1."""
    import sqlite3

    from tests.integration.test_launch_cli import insert_ladder_study
    from tuner.results import overview, study_report

    path = tmp_path / "cap.db"
    url = f"sqlite:///{path}"
    repo = insert_ladder_study(url, name="cap", gpu="cpu")
    with sqlite3.connect(path) as db:  # an SLO #1's fixed load meets and #0's misses
        db.execute("UPDATE tuner_studies SET slo = ? WHERE name = 'cap'", ('{"e2e_p99_ms": 5000}',))
        db.execute(
            "UPDATE tuner_trials SET metrics = json_set(metrics, '$.e2e_p99_ms.median', 6000.0) "
            "WHERE number = 0"
        )
    db.close()
    study = repo.get_study("cap")
    assert study is not None
    label = study.workload_label
    found: dict[str, int] = {}
    run = CliRunner().invoke(app, ["best", "cap", "--json", "--storage", url])
    assert run.exit_code == 0, run.output
    found["cli"] = json.loads(run.stdout)["recommendation"]["trial_number"]
    found["launch"] = best_local(repo, "tiny-ernie", "cpu", workload=label).trial
    with TestClient(create_app(ApiSettings(storage=url))) as client:
        query = {"model": "tiny-ernie", "gpu": "cpu", "workload": label}
        found["api"] = client.get("/v1/recommendations", params=query).json()["trial"]
        # The study's own SLO, asked for, is the study's SLO: judged the same way.
        same = client.get("/v1/recommendations", params={**query, "slo": "e2e_p99=5s"})
        found["api, its own SLO"] = same.json()["trial"]
        # Another preset (no capacity curve of its own to judge): on the stored metrics.
        other = client.get("/v1/recommendations", params={**query, "objective": "throughput"})
        assert other.status_code == 200 and other.json()["trial"] == 1, other.json()
    trials = repo.list_trials("cap", limit=None)
    (entry,) = overview([study], {"cap": trials}, {})
    found["overview"] = entry.trial.number
    report = study_report(study, trials)
    assert report.best is not None
    found["page best"], found["page star"] = report.best.number, report.recommended
    assert set(found.values()) == {0}, found
    # The page's lines say #0 met the SLO, as the ranking judged it.
    assert [line.feasible for line in report.trials] == [True, True]
