"""A trial keeps its per-request records, and a study exports them as vllm bench serve JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.integration.test_launch_cli import insert_measured_study
from tests.studykit import fake_server_runner, make_repo
from tuner.cli.app import app
from tuner.db import codec
from tuner.domain import RequestRecord, ServingConfig, TrialStatus, Workload
from tuner.errors import UsageError
from tuner.results.report.bench_export import bench_files

LADDER = Workload(
    name="smoke",
    prompt_tokens=16,
    output_tokens=6,
    concurrency=2,
    concurrency_ladder=(1, 2),
    requests_per_window=4,
    windows=1,
    warmup_requests=2,
    length_jitter=0.0,
)


def test_records_round_trip_to_microseconds() -> None:
    windows = (
        (
            RequestRecord(True, 10, 3, 0.5, 0.0123456789, 0.2, (0.001, 0.0021)),
            RequestRecord(False, 10, 0, 0.6, None, None, error="HTTP 500: boom"),
        ),
    )
    back = codec.decode_requests(json.loads(json.dumps(codec.encode_requests(windows))))
    ok, failed = back[0]
    assert ok.ok and ok.itl_s == pytest.approx((0.001, 0.0021), abs=1e-6)
    assert ok.ttft_s == pytest.approx(0.0123457, abs=1e-6) and ok.output_tokens == 3
    assert not failed.ok and failed.error == "HTTP 500: boom" and failed.ttft_s is None


def test_a_trial_on_the_fake_server_keeps_and_exports_its_requests(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    repo = make_repo(url)
    repo.create_study(
        name="req",
        optuna_study_name="req",
        model="tiny-ernie",
        model_source=None,
        gpu="cpu",
        workload="smoke",
        objective="capacity",
        slo={"ttft_p99_ms": 10_000.0},
        spec={},
        emulated=False,
        vllm_version="0.32.0",
        n_trials_requested=1,
    )
    result = fake_server_runner(tmp_path).run(ServingConfig(), LADDER)
    assert result.status is TrialStatus.COMPLETE, result.failure_detail
    trial_id = repo.start_trial("req", 0, ServingConfig(), "search", True)
    repo.finish_trial(trial_id, result, 1.0, [1.0, 1.0, 1.0])

    stored = repo.trial_requests(trial_id)
    assert [len(w) for w in stored] == [4, 8]  # four requests per stream at least
    assert all(r.ok and len(r.itl_s) == r.output_tokens - 1 for w in stored for r in w)
    files = bench_files(repo, "req")
    assert len(files) == 2
    c2 = next(v for k, v in files.items() if "concurrency2" in k)
    assert c2["completed"] == 8 and c2["max_concurrency"] == 2 and c2["failed"] == 0
    assert c2["output_throughput"] == pytest.approx(result.windows[1].output_throughput)
    assert len(c2["itls"]) == 8 and c2["request_goodput"] is not None
    assert c2["tuner_trial"] == 0 and c2["tuner_config"] == "defaults"

    out = tmp_path / "bench"
    cli = CliRunner().invoke(
        app, ["export", "req", "--format", "vllm-bench", "--out", str(out), "--storage", url]
    )
    assert cli.exit_code == 0, cli.output
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    again = ["export", "req", "--format", "vllm-bench", "--out", str(out), "--storage", url]
    kept = CliRunner().invoke(app, again)  # the files are there: replaced only with --force
    assert kept.exit_code != 0 and "--force" in (getattr(kept.exception, "hint", "") or "")
    assert CliRunner().invoke(app, [*again, "--force"]).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    refused = CliRunner().invoke(app, ["export", "req", "--format", "vllm-bench", "--storage", url])
    assert refused.exit_code != 0
    assert "--out DIR" in (getattr(refused.exception, "hint", "") or "")


def test_an_export_with_nothing_to_write_makes_no_folder_and_an_unwritable_out_is_refused_first(
    tmp_path: Path,
) -> None:
    """A study without per-request records made an empty folder and exited 0; --out in a
    folder that takes no file failed only after the database was read."""
    url = f"sqlite:///{tmp_path / 'none.db'}"
    insert_measured_study(url, [ServingConfig()], name="old")  # windows, no request records
    out = tmp_path / "bench"
    empty = CliRunner().invoke(
        app, ["export", "old", "--format", "vllm-bench", "--out", str(out), "--storage", url]
    )
    assert empty.exit_code == 1 and not out.exists()
    assert "nothing written: no complete trial of study old has per-request records" in empty.stderr
    # /proc is a folder that takes no file, for root too; the database is never opened.
    missing = f"sqlite:///{tmp_path / 'absent.db'}"
    run = CliRunner().invoke(app, ["export", "old", "--out", "/proc/t.jsonl", "--storage", missing])
    assert isinstance(run.exception, UsageError)
    assert run.exception.message.startswith("cannot write --out /proc/t.jsonl")
    assert not (tmp_path / "absent.db").exists()


def test_an_export_of_a_study_without_a_complete_trial_says_so(tmp_path: Path) -> None:
    """It blamed databases before revision 0002 for a study that had measured nothing."""
    from api.queue import parse, queue
    from tests.studykit import make_repo

    url = f"sqlite:///{tmp_path / 'q.db'}"
    body = {"study": {"name": "q", "model": "tiny-ernie", "gpu": "cpu", "workload": "smoke"}}
    queue(make_repo(url), parse(body))
    args = ["export", "q", "--format", "vllm-bench", "--out", str(tmp_path / "b"), "--storage", url]
    empty = CliRunner().invoke(app, args)
    assert empty.exit_code == 1 and not (tmp_path / "b").exists()
    assert "no complete trial of study q exists yet" in empty.stderr
    assert "revision 0002" not in empty.stderr


def test_an_export_of_a_finished_study_whose_every_trial_failed_says_none_completed(
    tmp_path: Path,
) -> None:
    """It said "no complete trial of study allfailed exists yet" of a study that had ended."""
    from tests.studykit import make_context
    from tuner.study.loop import run_study
    from tuner.testing.fake_runner import FakeRunner

    url = f"sqlite:///{tmp_path / 'f.db'}"
    ctx = make_context(url, trials=2, name="allfailed")
    run_study(ctx, FakeRunner(max_utilization=0.0), make_repo(url))  # every launch: OOM
    args = ["export", "allfailed", "--format", "vllm-bench", "--out", str(tmp_path / "b")]
    empty = CliRunner().invoke(app, [*args, "--storage", url])
    assert empty.exit_code == 1 and not (tmp_path / "b").exists()
    said = " ".join(empty.stderr.split())
    assert "study allfailed is finished and none of its 2 trials completed" in said, said
    assert "yet" not in said
