"""`tuner export`: a study's trials and its comparisons as datasets, and the Markdown derived
from them, checked against what the database holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.studykit import make_context, make_repo, memory_confirmation_context, store_claim
from tuner.domain import Workload
from tuner.results.comparisons import (
    claims_table,
    comparison_records,
    comparison_table,
    comparisons_markdown,
)
from tuner.results.export import (
    from_jsonl,
    markdown_table,
    study_records,
    to_jsonl,
    trials_markdown,
)
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

REPO = Path(__file__).parents[2]
WORKLOAD = Workload(name="w", prompt_tokens=32, output_tokens=8, requests_per_window=8)


@pytest.fixture()
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    repo = make_repo(url)
    ctx = memory_confirmation_context(url)
    run_study(ctx, FakeRunner(), repo)
    store_claim(repo)  # a verified claim, as verify-claims stores it
    return url


def test_comparison_records_hold_the_confirmation_and_the_claim(db: str) -> None:
    repo = make_repo(db)
    records = json.loads(json.dumps(comparison_records(repo)))  # JSON-clean
    assert [r["kind"] for r in records] == ["confirmation", "claim"]
    confirmation, claim = records
    assert confirmation["study"] == "s1" and claim["study"] is None
    assert confirmation["a_config"] == {} and confirmation["b_label"].startswith("#")
    assert confirmation["launches"] == {"a": 3, "b": 3}
    assert confirmation["servers"]["b"][0]["effective_backend"] == "FAKE_ATTN"
    assert len(confirmation["servers"]["a"]) == 3
    memory = next(m for m in confirmation["metrics"] if m["metric"] == "memory_gib")
    assert memory["verdict"] == "better" and memory["high"] < 1.0
    assert confirmation["verdicts"]["overall"] == confirmation["metrics"][0]["verdict"]
    assert [r["id"] for r in comparison_records(repo, "s1")] == [confirmation["id"]]
    assert claim["claim"]["id"] == "c1" and claim["b_config"] == {"max_num_seqs": 8}

    # The search + confirmation trials: confirmation launches carry phase "confirm".
    trials = study_records(repo, "s1")
    assert sum(t["phase"] == "confirm" for t in trials) == 6


def test_markdown_is_derived_from_the_records(db: str) -> None:
    records = comparison_records(make_repo(db))
    table = comparison_table(records[0])
    memory = next(m for m in records[0]["metrics"] if m["metric"] == "memory_gib")
    low, high = ((memory[k] - 1) * 100 for k in ("low", "high"))
    assert f"[{low:+.1f}, {high:+.1f}] | better |" in table
    assert table.count("\n") == 2 + len(records[0]["metrics"])
    claims = claims_table(records)
    assert "| c1 | output_throughput | defaults | fa2 | w | 1.41 | 0.958 [0.752, 1.221] |" in claims
    assert claims.count("\n") == 3  # the confirmation is not a claim
    md = comparisons_markdown(records)
    assert md.index("| c1 |") < md.index("### Comparison 1 (confirmation, study s1")


def test_cli_exports_trials_and_comparisons(db: str, tmp_path: Path) -> None:
    def tuner(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", "export", *args, "--storage", db],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )

    out = tmp_path / "c.jsonl"
    done = tuner("--comparisons", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "2 comparisons written" in done.stdout + done.stderr
    assert [r["kind"] for r in from_jsonl(out.read_text())] == ["confirmation", "claim"]
    only = tuner("s1", "--comparisons")
    assert [r["kind"] for r in from_jsonl(only.stdout)] == ["confirmation"]
    assert len(from_jsonl(tuner("s1").stdout)) == 8  # 2 search + 6 confirmation launches
    missing = tuner()
    assert missing.returncode == 2 and "name the study to export" in missing.stderr


def test_an_existing_file_is_replaced_only_with_force_and_whole(db: str, tmp_path: Path) -> None:
    def tuner(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tuner", "export", *args, "--storage", db],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )  # fmt: skip

    out = tmp_path / "out" / "s1.md"
    out.parent.mkdir()
    out.write_text("notes of my own\n")
    refused = tuner("s1", "--format", "md", "--out", str(out))
    assert refused.returncode == 2 and "exists" in refused.stderr and "--force" in refused.stderr
    assert out.read_text() == "notes of my own\n"
    forced = tuner("s1", "--format", "md", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.read_text().startswith("Study s1: ") and "8 trials written" in forced.stdout
    assert "\n| 100005 | confirm |" in out.read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["s1.md"]  # no temporary file left


def test_nothing_to_export_is_said_on_stderr_and_the_output_stays_empty(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.errors import UsageError

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    make_repo(url)
    for fmt in ("jsonl", "md"):
        run = CliRunner().invoke(
            app, ["export", "--comparisons", "--format", fmt, "--storage", url]
        )
        assert run.exit_code == 0 and run.stdout == "", run.output
        assert "no comparisons stored: `tuner compare` or a study's confirmation" in run.stderr
    sized = CliRunner().invoke(app, ["size", "--model", "m", "--rate", "5", "--gpu", "h900"])
    assert isinstance(sized.exception, UsageError)
    assert "unknown GPU profile 'h900'" in str(sized.exception)


def _columns(line: str) -> int:
    """The cells of a Markdown table row: its unescaped pipes, less one."""
    return line.replace("\\|", "").count("|") - 1


def test_a_pipe_or_a_line_break_in_a_value_stays_inside_its_markdown_cell() -> None:
    odd = "p|q\nr"
    trial = {
        "number": 1,
        "phase": "search",
        "is_baseline": False,
        "status": "complete",
        "failure_class": None,
        "effective_backend": "FLASH_ATTN",
        "config": {"code_revision": odd},
        "metrics": {},
        "objective_values": [100.0, 1.0, 500.0],
        "score": 1.0,
    }
    side = {"median": 1.0, "values": [1.0]}
    metric = {"metric": "output_throughput", "label": "tok/s", "a": side, "b": side, "verdict": odd}
    comparison = {"a_label": "defaults", "b_label": f"code_revision={odd}", "metrics": [metric]}
    claim = {"id": "c", "metric": "m", "claimed_text": odd, "verdict": "v", "reason": odd}
    claims = {"a_label": "defaults", "b_label": odd, "workload": "w", "claim": claim}
    for table in (
        markdown_table([trial]),
        comparison_table(comparison),
        claims_table([claims]),
    ):
        head, _, *rows = table.splitlines()
        assert len(rows) == 1 and _columns(rows[0]) == _columns(head), table
        assert "p\\|q r" in table


def test_the_markdown_export_names_its_provenance_and_keeps_small_memory(db: str) -> None:
    """As the JSON Lines do, the Markdown says what the trials were measured with; 0.04 GiB is
    0.04 there (it was 0.0), as `tuner trials` shows it."""
    md = trials_markdown(study_records(make_repo(db), "s1"))
    assert md.startswith(
        "Study s1: model fake, GPU fake GPU, vLLM 0.0.0+fake, workload smoke, "
        "3 measurement windows a trial\n\n| # | phase |"
    )
    trial = {
        "number": 0,
        "phase": "search",
        "is_baseline": True,
        "status": "complete",
        "failure_class": None,
        "effective_backend": None,
        "config": {},
        "metrics": {},
        "objective_values": [100.0, 0.04, 500.0],
        "score": 1.0,
    }
    assert "| defaults |  |  |  |  | 0.04 |  | 1.000 |" in markdown_table([trial])
    side = {"median": 0.04, "values": [0.04, 0.041]}
    memory = {"metric": "memory_gib", "label": "memory GiB", "a": side, "b": side, "verdict": ""}
    table = comparison_table({"a_label": "A", "b_label": "B", "metrics": [memory]})
    assert "| memory GiB | 0.04 (0.04, 0.04) | 0.04 (0.04, 0.04) |" in table


def test_launches_shared_by_comparisons_count_their_gpu_minutes_once(tmp_path: Path) -> None:
    """A study confirming two candidates launches the defaults once for both comparisons (as
    verify-claims launches a configuration shared by claims once): the second comparison says
    it reused them instead of counting their minutes again, and the total counts each once."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    repo = make_repo(url)
    two = [{"gpu_memory_utilization": 0.5}, {"gpu_memory_utilization": 0.6}]
    ctx = make_context(
        url, trials=3, enqueue=two, params=("gpu_memory_utilization",),
        choices={"gpu_memory_utilization": (0.5, 0.6)}, confirm_launches=3, confirm_top=2,
        objective="memory",
    )  # fmt: skip
    run_study(ctx, FakeRunner(), repo)
    first, second = records = json.loads(json.dumps(comparison_records(repo)))
    launches = [{(x["started_at"], x["wall_s"]) for x in r["gpu_launches"]} for r in records]
    assert len(launches[0]) == len(launches[1]) == 6 and len(launches[0] & launches[1]) == 3
    walls = {name: name[1] / 60.0 for name in launches[0] | launches[1]}
    assert first["gpu_minutes"] == pytest.approx(sum(walls[n] for n in launches[0]))
    assert first["gpu_minutes_new"] == first["gpu_minutes"]
    assert first["launches_shared_with"] == [] and second["launches_shared_with"] == [first["id"]]
    assert second["gpu_minutes_new"] == pytest.approx(
        sum(walls[n] for n in launches[1] - launches[0])
    )
    assert sum(r["gpu_minutes_new"] for r in records) == pytest.approx(sum(walls.values()))
    md = comparisons_markdown(records)
    shared = f"new launches (its other launches are counted with comparison {first['id']})"
    assert f"GPU-minutes of {shared}" in md
    assert f"GPU time: {sum(walls.values()):.1f} GPU-minutes over 2 comparisons; 1 of them" in md


def test_out_through_a_link_replaces_the_file_it_names_and_keeps_the_link(
    db: str, tmp_path: Path
) -> None:
    """As `cp` and a shell redirection do: the link stays a link, its file gets the export
    (written beside it and renamed, so whole); a link to nothing or to a folder is refused."""
    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.errors import UsageError

    def export(out: Path, *more: str) -> Any:
        args = ["export", "s1", "--format", "md", "--out", str(out), "--storage", db, *more]
        return CliRunner().invoke(app, args)

    elsewhere = tmp_path / "kept"
    elsewhere.mkdir()
    target = elsewhere / "s1.md"
    target.write_text("old\n")
    link = tmp_path / "latest.md"
    link.symlink_to(target)
    refused = export(link)
    assert isinstance(refused.exception, UsageError) and "exists" in str(refused.exception)
    done = export(link, "--force")
    assert done.exit_code == 0, done.output
    assert link.is_symlink() and link.readlink() == target
    assert target.read_text().startswith("Study s1: ")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["s1.md"]  # no temporary file left

    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "gone" / "s1.md")
    to_folder = tmp_path / "folder-link"
    to_folder.symlink_to(elsewhere)
    for bad, said in ((dangling, "which does not exist"), (to_folder, "is a folder")):
        run = export(bad, "--force")
        assert isinstance(run.exception, UsageError), run.output
        assert f"--out {bad} " in str(run.exception) and said in str(run.exception)
    assert dangling.is_symlink() and to_folder.is_symlink() and not (tmp_path / "gone").exists()


def test_the_markdown_change_says_it_is_of_geometric_means_not_of_the_medians() -> None:
    """The table showed each side's median beside "change [95 % CI]", a change of geometric
    means: "11.0" against "10.9" and "+2.5 %" read as a contradiction."""
    side_a = {"median": 11.0, "values": [8.0, 11.0, 12.0]}
    side_b = {"median": 10.9, "values": [10.9, 10.9, 11.0]}
    thr = {
        "metric": "output_throughput",
        "label": "output tok/s",
        "a": side_a,
        "b": side_b,
        "ratio": 1.074,
        "low": 0.8,
        "high": 1.4,
        "verdict": "no significant difference",
    }
    table = comparison_table({"a_label": "A", "b_label": "B", "metrics": [thr]})
    head = table.splitlines()[0]
    assert "| A: median (launches) | B: median (launches) |" in head
    assert "| change [95 % CI] of geometric means |" in head
    assert "| 11 (8, 11, 12) | 11 (11, 11, 11) | +7.4 % [-20.0, +40.0] |" in table


def test_a_capacity_at_a_ladder_the_server_kept_up_with_is_exported_as_at_least(
    tmp_path: Path,
) -> None:
    """The Markdown showed the capacity read at the top rate of a rate ladder the server kept
    up with as the capacity, and the records had nothing to tell it from one."""
    from tests.integration.test_launch_cli import insert_ladder_study

    repo = insert_ladder_study(f"sqlite:///{tmp_path / 'ladder.db'}", objective="balanced")
    records = from_jsonl(to_jsonl(study_records(repo, "ladder")))
    assert [r["capacity_is_lower_bound"] for r in records] == [True, False]
    md = trials_markdown(records)
    base, other = (line for line in md.splitlines() if line.startswith(("| 0 ", "| 1 ")))
    assert "| at least " in base and " @ 2 |" in base
    assert "at least" not in other and " @ 1 |" in other
    assert "At least: the capacity of #0 is only a lower bound: the server kept up" in md
    older = [{k: v for k, v in r.items() if k != "capacity_is_lower_bound"} for r in records]
    assert "at least" not in markdown_table(older).lower()  # an older export cannot say
    # Windows counted as `tuner best` counts them, a load point's; the page says both.
    from tuner.results import study_report

    assert "3 measurement windows a load point" in md
    study = repo.get_study("ladder")
    assert study is not None
    page = study_report(study, repo.list_trials("ladder", limit=None))
    assert page.provenance["windows per trial"] == "6 (2 load points of 3)"


def test_the_export_shows_only_what_was_measured(tmp_path: Path) -> None:
    """A failed trial's objective_values were the penalty told to Optuna (80 GiB, 10^7 ms) as
    if measured; the Markdown printed "nan [1, inf]" where the JSONL says null, and a curve no
    load point of which met the SLO as "0 [0, 0] @ 0"."""
    from tests.integration.test_launch_cli import insert_measured_study
    from tuner.domain import FailureClass, ServingConfig, TrialResult, TrialStatus

    url = f"sqlite:///{tmp_path / 'measured.db'}"
    repo = insert_measured_study(url, [ServingConfig()], name="m")
    oom = TrialResult(ServingConfig(max_num_seqs=512), TrialStatus.FAILED,
                      FailureClass.MEMORY_EXCEEDED, "CUDA out of memory")  # fmt: skip
    repo.finish_trial(repo.start_trial("m", 1, oom.config), oom, None, [0.0, 80.0, 1e7])
    records = {r["number"]: r for r in study_records(repo, "m")}
    assert records[1]["objective_values"] is None and records[0]["objective_values"] is not None
    # `tuner trials --json` gave the penalty as measured: 80 GiB, a P99 of 10^7 ms
    from typer.testing import CliRunner

    from tuner.cli.app import app

    done = CliRunner().invoke(app, ["trials", "m", "--json", "--storage", url])
    listed = {r["number"]: r for r in json.loads(done.stdout)}
    assert listed[1]["objective_values"] is None
    assert listed[0]["objective_values"] == records[0]["objective_values"]
    nan, inf = float("nan"), float("inf")
    zero = {"median": 0.0, "low": 0.0, "high": 0.0, "values": [0.0]}
    trial = {**records[0], "metrics": {
        "output_throughput": {"median": 10.0, "low": 9.0, "high": 11.0, "values": [10.0]},
        "ttft_p99_ms": {"median": nan, "low": 1.0, "high": inf, "values": [nan]},
        "capacity_output_throughput": zero, "capacity_load": zero,
    }}  # fmt: skip
    row = markdown_table([trial]).splitlines()[2]
    assert "nan" not in row and "inf" not in row and "| 10 [9, 11] |" in row
    assert "| none met the SLO |" in row and "@ 0" not in row


def test_markdown_says_what_each_table_was_measured_with(db: str) -> None:
    """The claims table and each comparison named no GPU, vLLM or launch count, which their
    JSON records hold: a figure pasted from the Markdown lost where it was measured."""
    records = comparison_records(make_repo(db))
    md = comparisons_markdown(records)
    confirmation = next(r for r in records if not r.get("claim"))
    heading = md.index("### Comparison")
    line = md[heading:].split("\n\n")[1]
    provenance = confirmation["provenance"]
    assert line.startswith("Measured with model "), line
    assert f"GPU {provenance['gpu_name']}" in line and f"vLLM {provenance['vllm_version']}" in line
    assert "3 launches a side" in line
    assert md.index("Measured with") < md.index("| claim |")


def test_out_hints_paste_whole_and_a_dash_is_standard_output(db: str, tmp_path: Path) -> None:
    """`--out "/tmp/My Exports/trials.jsonl"` hinted `mkdir -p /tmp/My Exports` (two folders
    when pasted); `--out -` wrote a file named `-`."""
    import shlex

    from typer.testing import CliRunner

    from tuner.cli.app import app
    from tuner.errors import UsageError

    def export(*args: str) -> Any:
        return CliRunner().invoke(app, ["export", "s1", *args, "--storage", db])

    folder = tmp_path / "My Exports"
    run = export("--out", str(folder / "trials.jsonl"))
    assert isinstance(run.exception, UsageError), run.output
    assert f"mkdir -p {shlex.quote(str(folder))}" in (run.exception.hint or "")
    folder.mkdir()
    run = export("--out", str(folder))
    assert isinstance(run.exception, UsageError), run.output
    assert f"--out {shlex.quote(str(folder / 'trials.jsonl'))}" in (run.exception.hint or "")
    (folder / "b.json").write_text("{}")
    run = export("--format", "vllm-bench", "--out", str(folder / "b.json"))
    assert isinstance(run.exception, UsageError), run.output
    assert f"--out {shlex.quote(str(folder / 'b-bench'))}" in (run.exception.hint or "")

    done = subprocess.run(
        [sys.executable, "-m", "tuner", "export", "s1", "--out", "-", "--storage", db],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(from_jsonl(done.stdout)) == 8 and not (tmp_path / "-").exists()
    # ./- is the way to name a file "-": a Path compared equal to "-" took it for stdout.
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "export", "s1", "--out", "./-", "--storage", db],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("written to -"), done.stdout
    assert len(from_jsonl((tmp_path / "-").read_text())) == 8
    helped = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "200"})
    assert "File (default, or -: stdout)." in helped.output
