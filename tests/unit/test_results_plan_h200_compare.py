"""The decode-bound study decided on the H200 and resumed there (docs/results/plan-h200.md §9),
and decided on the H100 (§10), both 2026-12-05, against their committed databases and server
logs: each comparison of the planned recipe with vLLM's defaults, the H200 study's resumed
trials, and vLLM 0.26.0 turning async scheduling on by itself, each table re-derived here."""

from __future__ import annotations

import ast
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import TrialStatus

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h200" / "2026-12-05-compare"
DATA_H100 = ROOT / "studies" / "results" / "plan-h100" / "2026-12-05-compare"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "decode-qwen7b-chat"


def _repo(data: Path) -> Repository:
    return Repository(make_engine(f"sqlite:///{data / 'tuner-decode.db'}"))


@pytest.fixture(scope="module")
def repo() -> Repository:
    return _repo(DATA)


@pytest.fixture(scope="module")
def repo_h100() -> Repository:
    return _repo(DATA_H100)


def _comparison(repo: Repository) -> Any:
    (row,) = repo.list_comparisons()
    return row


def comparison_table(repo: Repository) -> str:
    r = _comparison(repo).results
    thr = next(m for m in r["metrics"] if m["metric"] == "output_throughput")
    e2e = next(m for m in r["metrics"] if m["metric"] == "e2e_p99_ms")
    out = [
        "| side | configuration | backend | out tok/s per launch (geometric mean of 3 windows) "
        "| P99 E2E ms per launch | start-up s per launch |",
        "|---|---|---|---|---|---|",
    ]
    for side, label in (("a", r["a_label"]), ("b", r["b_label"])):
        servers = r["servers"][side]
        (backend,) = {s["effective_backend"] for s in servers}
        out.append(
            f"| {side.upper()} | {label} | {backend} | "
            + ", ".join(f"{v:,.0f}" for v in thr[side]["values"])
            + " | "
            + ", ".join(f"{v:,.0f}" for v in e2e[side]["values"])
            + " | "
            + ", ".join(f"{s['startup_s']:.0f}" for s in servers)
            + " |"
        )
    d = r["decision"]
    out.append(
        f"\nB/A output tok/s {thr['ratio']:.3f} [{thr['low']:.3f}, {thr['high']:.3f}] (a "
        f"{d['confidence']:.0%} repeated confidence interval, {d['per_look_confidence']:.2%} at "
        f"each look; Welch's, {d['df']:.1f} df): **{thr['verdict']}**, stopped "
        f"({d['stopped']}) at the first look after {d['launches']['a']} + {d['launches']['b']} "
        f"launches, {r['gpu_minutes']:.1f} GPU-minutes. P99 E2E B/A {e2e['ratio']:.3f} "
        f"[{e2e['low']:.3f}, {e2e['high']:.3f}]: {e2e['verdict']}.\n"
    )
    return "\n".join(out)


def trials_table(repo: Repository, study: str = STUDY) -> str:
    """The study's trials, the resumed ones included, each against the (first) defaults'."""
    trials = repo.list_trials(study, limit=None)
    base = next(t for t in trials if t.is_baseline and t.status is TrialStatus.COMPLETE)
    ref = base.metrics["output_throughput"].median
    out = [
        "| trial | configuration | backend | out tok/s, median [range of 3 windows] | x defaults "
        "| P99 E2E ms | start-up s |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        if t.status is not TrialStatus.COMPLETE:
            why = t.failure.value if t.failure else t.status.value
            out.append(f"| #{t.number} | {t.config_label} | | {why} | | | |")
            continue
        thr, s = t.metrics["output_throughput"], t.server
        assert s is not None and s.startup_s is not None
        out.append(
            f"| #{t.number} | {t.config_label} | {t.effective_backend} | {thr.median:,.0f} "
            f"[{thr.low:,.0f}-{thr.high:,.0f}] | x{thr.median / ref:.2f} | "
            f"{t.metrics['e2e_p99_ms'].median:,.0f} | {s.startup_s:.0f} |"
        )
    return "\n".join(out) + "\n"


def async_by_launch(data: Path = DATA) -> list[tuple[object, str]]:
    """Per server log: the async_scheduling vLLM was given (None: not given) and what it
    logged it runs with."""
    seen = []
    with tarfile.open(data / "server-logs.tgz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            f = tar.extractfile(member)
            assert f is not None
            text = f.read().decode("utf-8", "replace")
            args = re.search(r"non-default args: (\{.*\})", text)
            said = re.search(r"Asynchronous scheduling is (enabled|disabled)", text)
            assert args and said, member.name
            given = ast.literal_eval(args.group(1)).get("async_scheduling")
            seen.append((given, said.group(1)))
    return seen


@pytest.mark.parametrize(
    ("which", "gpu", "gpu_name"),
    [("repo", "h200", "NVIDIA H200"), ("repo_h100", "h100", "NVIDIA H100 80GB HBM3")],
)
def test_the_comparison_is_a_real_gpu_decision(
    which: str, gpu: str, gpu_name: str, request: pytest.FixtureRequest
) -> None:
    row = _comparison(request.getfixturevalue(which))
    assert (row.model, row.gpu, row.workload) == ("qwen2.5-7b", gpu, "chat")
    assert row.provenance is not None and row.provenance.gpu_name == gpu_name
    assert row.provenance.vllm_version == "0.26.0"
    assert row.verdicts["output_throughput"] == "worse"
    thr = next(m for m in row.results["metrics"] if m["metric"] == "output_throughput")
    assert thr["high"] < 1.0 and len(thr["a"]["values"]) == len(thr["b"]["values"]) == 3
    # Every A launch beat every B launch: not a verdict from one outlier.
    assert min(thr["a"]["values"]) > max(thr["b"]["values"])


def test_vllm_0_26_schedules_asynchronously_unless_told_not_to() -> None:
    seen = async_by_launch()
    assert len(seen) == 9
    assert {said for given, said in seen if given is None} == {"enabled"}
    assert [said for given, said in seen if given is False] == ["disabled"]
    on_h100 = async_by_launch(DATA_H100)  # the defaults' three launches and FlashInfer's three
    assert len(on_h100) == 6 and {said for _, said in on_h100} == {"enabled"}
    assert sum(given is None for given, _ in on_h100) == 3


def test_the_tables_of_the_section(repo: Repository, repo_h100: Repository) -> None:
    report = REPORT.read_text()
    assert comparison_table(repo) in report
    assert trials_table(repo) in report
    assert comparison_table(repo_h100) in report
