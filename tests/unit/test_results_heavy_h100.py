"""The H200's heavy-load configuration compared with vLLM's defaults on an H100
(docs/results/plan-h200.md §13, 2026-12-06): the interleaved launches, the verdict `tuner
compare` gave, and the drift of the machine that today's code reports, re-derived from the
committed database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.studykit import comparison_launches as _launches
from tests.studykit import comparison_results as _results
from tests.studykit import geomean as _geomean
from tests.studykit import launch_table, stream_log, verdict_lines
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.scoring import drift, ratio_interval

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "heavy-h100" / "2026-12-06"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-heavy.db'}"))


def drift_line(results: dict[str, Any]) -> str:
    """What today's code tells of these launches (the run's tuner did not yet)."""
    (m,) = [m for m in results["metrics"] if m["metric"] == "output_throughput"]
    ends = [g["started_at"] + g["wall_s"] for g in results["gpu_launches"]]
    n_a = len(m["a"]["values"])
    found = drift(
        list(zip(ends[:n_a], m["a"]["values"], strict=True)),
        list(zip(ends[n_a:], m["b"]["values"], strict=True)),
    )
    assert found is not None
    return f"  {found.text('output tok/s')}\n"


def test_the_tables_and_lines_of_the_section(repo: Repository) -> None:
    results = _results(repo)
    report = REPORT.read_text()
    for part in (launch_table(_launches(repo)), verdict_lines(results), drift_line(results)):
        assert part in report, part


def test_the_stored_values_are_the_launches_and_welch_gives_the_stored_interval(
    repo: Repository,
) -> None:
    results = _results(repo)
    (m,) = [m for m in results["metrics"] if m["metric"] == "output_throughput"]
    launches = sorted(_launches(repo), key=lambda x: x.created_at)
    a = [_geomean(x.values["output_throughput"]) for x in launches if x.is_defaults]
    b = [_geomean(x.values["output_throughput"]) for x in launches if not x.is_defaults]
    assert a == pytest.approx(m["a"]["values"]) and b == pytest.approx(m["b"]["values"])
    assert [x.is_defaults for x in launches] == [True, False] * 4  # interleaved A B A B ...
    found = ratio_interval(a, b, results["decision"]["per_look_confidence"])  # 96.65 %
    assert found is not None and (found.low, found.high) == pytest.approx((m["low"], m["high"]))
    # One card, the one nvidia-smi named.
    uuid = (DATA / "nvidia-smi.csv").read_text().splitlines()[1].split(", ")[2]
    assert uuid == "GPU-3b471dbf-fb59-5482-f268-7d209fce8111"
    assert {x.gpu for x in launches} == {"NVIDIA H100 80GB HBM3"}


def test_the_stream_log_says_what_the_comparison_printed() -> None:
    log = stream_log(DATA, "heavy")
    assert "output tok/s: B/A 1.274 [0.746, 2.175] (+27.4 %) -> no significant difference" in log
    assert "decision: no significant difference after 4 + 4 launches" in log
