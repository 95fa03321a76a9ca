"""What the commands print for scripts and pipes: strict JSON from every ``--json`` (a NaN or
infinity is null, and the record says which under ``null_reasons``), exports that survive a
NaN metric, ``-h`` as ``--help``, and piped tables that are never wrapped mid-word."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.test_launch_cli import insert_measured_study
from tests.studykit import budget_free_study
from tuner.cli.app import app
from tuner.db.migrate import upgrade
from tuner.domain import Estimate, ServingConfig
from tuner.domain.jsonable import NULL_REASONS, dumps, finite

NAN, INF = float("nan"), float("inf")
LONG = ServingConfig(max_num_seqs=96, max_num_batched_tokens=6144, enable_prefix_caching=True)


def _strict(text: str) -> Any:
    """json.loads that refuses NaN / Infinity tokens, as other languages' parsers do."""

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'out.db'}"
    repo = insert_measured_study(url, [ServingConfig(), LONG], name="a-study-with-a-long-name")
    # A latency no request reached: stored as NaN / infinity, as a real trial can.
    trial = repo.get_trial("a-study-with-a-long-name", 1)
    assert trial is not None
    odd = dataclasses.replace(
        trial.to_result(),
        metrics={**trial.metrics, "ttft_p99_ms": Estimate(NAN, 1.0, INF, (NAN, 1.0, INF))},
    )
    trial_id = repo.start_trial("a-study-with-a-long-name", 2, LONG)
    repo.finish_trial(trial_id, odd, 1.0, trial.objective_values)
    return url


def _invoke(*args: str) -> str:
    run = CliRunner().invoke(app, list(args))
    assert run.exit_code == 0, run.output
    return run.stdout


def test_json_outputs_are_strict_and_say_why_a_value_is_null(url: str) -> None:
    trials = _strict(_invoke("trials", "a-study-with-a-long-name", "--json", "--storage", url))
    odd = trials[2]
    assert odd["metrics"]["ttft_p99_ms"]["median"] is None
    assert odd[NULL_REASONS]["metrics.ttft_p99_ms.median"] == "NaN"
    assert odd[NULL_REASONS]["metrics.ttft_p99_ms.high"] == "Infinity"
    assert NULL_REASONS not in trials[0]  # only where a value was replaced

    studies = _strict(_invoke("studies", "--json", "--storage", url))
    assert [s["name"] for s in studies] == ["a-study-with-a-long-name"]
    assert studies[0]["n_trials"] == 3 and studies[0]["trial_counts"]["complete"] == 3

    best = _strict(_invoke("best", "a-study-with-a-long-name", "--json", "--storage", url))
    rec = best["recommendation"]
    assert rec["trial_number"] in (0, 1, 2) and rec["serve_command"].startswith("vllm serve")
    assert _strict(_invoke("models", "--json"))[0]["alias"]
    assert {g["name"] for g in _strict(_invoke("gpus", "--json"))} >= {"h200", "cpu"}


def test_studies_counts_the_budget_as_the_study_loop_and_names_the_free_trials(
    tmp_path: Path,
) -> None:
    """A ruled-out first draw and an interrupted trial used no place in the budget."""
    url = f"sqlite:///{tmp_path / 'free.db'}"
    budget_free_study(url)
    table = " ".join(_invoke("studies", "--storage", url).split())
    assert "4 of 4 search trials + 1 ruled out before launch, 1 interrupted" in table
    [study] = _strict(_invoke("studies", "--json", "--storage", url))
    assert study["n_budget_trials"] == 4 and study["n_trials"] == 6
    assert study["free_counts"] == {"invalid_config": 1, "interrupted": 1}


def test_best_json_of_a_study_without_a_completed_trial_exits_1(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    repo = insert_measured_study(url, [], name="empty")
    assert repo.get_study("empty") is not None
    run = CliRunner().invoke(app, ["best", "empty", "--json", "--storage", url])
    assert run.exit_code == 1
    assert _strict(run.stdout) == {"study": "empty", "recommendation": None, "plan": None}


def test_export_writes_a_nan_metric_as_null(url: str, tmp_path: Path) -> None:
    out = tmp_path / "trials.jsonl"
    _invoke("export", "a-study-with-a-long-name", "--out", str(out), "--storage", url)
    records = [_strict(line) for line in out.read_text().splitlines()]
    odd = next(r for r in records if r.get(NULL_REASONS))
    assert odd[NULL_REASONS]  # the reasons travel with the dataset
    assert any(r.get(NULL_REASONS) is None for r in records)


def test_finite_replaces_every_non_finite_float_and_nothing_else() -> None:
    clean, reasons = finite({"a": [1.0, NAN, {"b": -INF}], "c": "NaN", "d": 0, "e": True})
    assert clean == {"a": [1.0, None, {"b": None}], "c": "NaN", "d": 0, "e": True}
    assert reasons == {"a[1]": "NaN", "a[2].b": "-Infinity"}
    assert math.isnan(NAN)  # the input is not touched
    assert _strict(dumps([{"x": INF}, {"y": 1}])) == [
        {"x": None, NULL_REASONS: {"x": "Infinity"}},
        {"y": 1},
    ]


def test_h_is_help_and_piped_tables_are_not_wrapped(url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    short = subprocess.run(
        [sys.executable, "-m", "tuner", "trials", "-h"], capture_output=True, text=True, env=env
    )
    assert short.returncode == 0 and "--state" in short.stdout
    piped = subprocess.run(
        [sys.executable, "-m", "tuner", "trials", "a-study-with-a-long-name", "--storage", url],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert piped.returncode == 0, piped.stderr
    label = LONG.label()
    assert len(label) > 40
    row = next(line for line in piped.stdout.splitlines() if line.lstrip("│ ").startswith("1 "))
    assert label in row and len(row) > 80  # one line per trial, as wide as it needs


def test_completion_can_be_shown() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tuner", "--show-completion", "bash"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and "complete" in run.stdout


def test_an_empty_store_lists_no_studies_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade(url)
    assert _strict(_invoke("studies", "--json", "--storage", url)) == []
    # As a table: nothing on stdout, and a line on stderr saying what stores studies.
    run = CliRunner().invoke(app, ["studies", "--storage", url])
    assert run.exit_code == 0 and run.stdout == ""
    assert "no studies in this database: `tuner run`" in run.stderr


def test_the_models_table_shows_a_small_count_and_a_model_without_weights() -> None:
    """tiny-ernie read "0.00 B" parameters, and only --json said it has random weights."""
    rows = {line.split()[1]: line for line in _invoke("models").splitlines() if "│" in line}
    assert "│ 0.43 M " in rows["tiny-ernie"] and "│ 0.36 B " in rows["ernie-0.3b"]
    assert "none published" in rows["tiny-ernie"] and "random weights" in rows["tiny-ernie"]
    assert "│ published" in rows["qwen2.5-7b"]


def test_trials_prints_a_log_lines_brackets_as_text(url: str) -> None:
    """A failure's detail was read as Rich markup: "[rank0]:" vanished, and a path in brackets
    ("[/models/llama]", a closing tag to Rich) crashed `tuner trials` with a MarkupError (a
    "[nan, nan]" range went the same way)."""
    from tuner.db import Repository, make_engine
    from tuner.domain import FailureClass, TrialResult, TrialStatus

    repo = Repository(make_engine(url))
    detail = "[rank0]: model dir [/models/llama] not found"
    failed = TrialResult(LONG, TrialStatus.FAILED, FailureClass.START_FAILED, detail)
    repo.finish_trial(repo.start_trial("a-study-with-a-long-name", 3, LONG), failed, None, None)
    shown = _invoke("trials", "a-study-with-a-long-name", "--storage", url)
    assert f"start_failed: {detail}" in " ".join(shown.split())


def test_hints_after_storage_name_that_storage(tmp_path: Path) -> None:
    """`tuner best S --storage URL` said "see `tuner trials S`", which read the default
    database and answered "no study named S"; `tuner studies` gave a resume line without it."""
    from tests.studykit import make_context, make_repo
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    run_study(make_context(url, trials=2, name="allfail"), FakeRunner(max_utilization=0.0),
              make_repo(url))  # fmt: skip  # every launch out of memory
    done = CliRunner().invoke(app, ["best", "allfail", "--storage", url])
    assert done.exit_code == 1
    said = " ".join(done.stdout.split())
    assert f"see `tuner trials allfail --storage {url}`" in said, said
