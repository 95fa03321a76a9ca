"""§6's heavy-load configuration against vLLM's defaults on an H100 again, with the machine
watched (docs/results/plan-h200.md §14, 2026-12-06): the launches in their counterbalanced
order, the verdict `tuner compare` gave, and what the GPU's clocks and the host's CPU did during
each launch, re-derived from the committed database and the loggers' files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.studykit import (
    comparison_launches,
    comparison_results,
    geomean,
    launch_table,
    machine_table,
    stream_log,
    verdict_lines,
)
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.scoring import drift, ratio_interval

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "heavy-clocks" / "2026-12-06"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-heavy.db'}"))


def test_the_tables_and_lines_of_the_section(repo: Repository) -> None:
    results = comparison_results(repo)
    report = REPORT.read_text()
    parts = (
        launch_table(comparison_launches(repo)),
        verdict_lines(results),
        machine_table(DATA, comparison_launches(repo)),
    )
    for part in parts:
        assert part in report, part


def test_the_stored_values_are_the_launches_counterbalanced_and_welch_gives_the_interval(
    repo: Repository,
) -> None:
    results = comparison_results(repo)
    (m,) = [m for m in results["metrics"] if m["metric"] == "output_throughput"]
    launches = sorted(comparison_launches(repo), key=lambda x: x.created_at)
    assert [x.is_defaults for x in launches] == [True, False, False, True, True, False]
    a = [geomean(x.values["output_throughput"]) for x in launches if x.is_defaults]
    b = [geomean(x.values["output_throughput"]) for x in launches if not x.is_defaults]
    assert a == pytest.approx(m["a"]["values"]) and b == pytest.approx(m["b"]["values"])
    assert min(b) > max(a)  # every launch of B above every launch of A
    found = ratio_interval(a, b, results["decision"]["per_look_confidence"])  # 95 %, fixed
    assert found is not None and (found.low, found.high) == pytest.approx((m["low"], m["high"]))
    assert found.low < 1.0 < found.high  # holds 1, if only just: not decided
    # No drift to tell at 95 % (one level an arm and a common slope on 6 launches).
    ends = [g["started_at"] + g["wall_s"] for g in results["gpu_launches"]]
    assert m.get("drift") is None
    a_ends, b_ends = ends[:3], ends[3:]  # the stored launches: A's, then B's
    a_at = list(zip(a_ends, m["a"]["values"], strict=True))
    assert drift(a_at, list(zip(b_ends, m["b"]["values"], strict=True))) is None
    # One card, the one nvidia-smi named, and the stream ran the plan to its end.
    uuid = (DATA / "nvidia-smi.csv").read_text().splitlines()[1].split(", ")[2]
    assert uuid == "GPU-29f426d0-76e9-f285-01b6-c998849aa0af"
    assert "stream done" in stream_log(DATA, "heavy")
