"""§6's heavy-load configuration against vLLM's defaults on an H100 again, with the machine
watched (docs/results/plan-h200.md §14, 2026-12-06): the launches in their counterbalanced
order, the verdict `tuner compare` gave, and what the GPU's clocks and the host's CPU did during
each launch, re-derived from the committed database and the loggers' files."""

from __future__ import annotations

import io
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.studykit import (
    comparison_launches,
    comparison_results,
    geomean,
    launch_table,
    stream_log,
    verdict_lines,
)
from tuner.db.repository import Repository
from tuner.db.rows import LaunchRow
from tuner.db.session import make_engine
from tuner.scoring import drift, ratio_interval

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "heavy-clocks" / "2026-12-06"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-heavy.db'}"))


def _logged(name: str) -> str:
    with tarfile.open(DATA / "results.tgz") as tar:
        member = tar.extractfile(f"results/{name}")
        assert member is not None
        return io.TextIOWrapper(member, encoding="utf-8").read()


def gpu_samples() -> list[dict[str, Any]]:
    """nvidia-smi's rows every 5 s: time (UTC epoch), SM clock MHz, temperature C, power W,
    utilization %, clock-event reasons (a bit mask; 0x1 is the GPU idle)."""
    rows = []
    for line in _logged("gpu-clocks.csv").splitlines()[1:]:
        stamp, sm, _mem, _max, temp, power, _limit, util, reasons = line.split(", ")
        when = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
        rows.append(
            {
                "t": when.timestamp(),
                "sm": int(sm.split()[0]),
                "temp": int(temp),
                "power": float(power.split()[0]),
                "util": int(util.split()[0]),
                "reasons": int(reasons, 16),
            }
        )
    return rows


def host_samples() -> list[dict[str, Any]]:
    """vmstat's rows every 5 s (the first, averages since boot, left out): time, run queue,
    CPU % user, system, idle and stolen by the host."""
    rows = []
    for line in _logged("vmstat.txt").splitlines()[3:]:
        f = line.split()
        when = datetime.fromisoformat(f"{f[-2]}T{f[-1]}").replace(tzinfo=UTC)
        rows.append(
            {
                "t": when.timestamp(),
                "r": int(f[0]),
                "us": int(f[12]),
                "sy": int(f[13]),
                "id": int(f[14]),
                "st": int(f[16]),
            }
        )
    return rows


def machine_table(launches: list[LaunchRow]) -> str:
    """Per launch, over the samples while the GPU worked (utilization above 0: the warm-up and
    the measured windows): the SM clock, temperature, power and clock-event reasons; and the
    host's CPU over the whole launch."""
    gpu, host = gpu_samples(), host_samples()
    out = [
        "| launch | configuration | SM clock MHz (busy) | GPU utilization %, busy mean "
        "| temperature C, max | power W, max | clock-event reasons (busy) "
        "| host CPU % busy, mean | stolen %, max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, launch in enumerate(sorted(launches, key=lambda x: x.created_at), 1):
        assert launch.wall_s is not None
        start, end = launch.created_at - launch.wall_s, launch.created_at  # stored at its end
        busy = [s for s in gpu if start <= s["t"] <= end and s["util"] > 0]
        during = [s for s in host if start <= s["t"] <= end]
        assert busy and during
        clocks = sorted({s["sm"] for s in busy})
        reasons = sorted({s["reasons"] for s in busy})
        cpu = sum(100 - s["id"] for s in during) / len(during)
        cells = (
            str(i),
            launch.config_label,
            f"{clocks[0]}-{clocks[-1]}",
            f"{sum(s['util'] for s in busy) / len(busy):.0f}",
            str(max(s["temp"] for s in busy)),
            f"{max(s['power'] for s in busy):.0f}",
            ", ".join(f"0x{r:x}" for r in reasons),
            f"{cpu:.1f}",
            str(max(s["st"] for s in during)),
        )
        out.append(f"| {' | '.join(cells)} |")
    return "\n".join(out) + "\n"


def test_the_tables_and_lines_of_the_section(repo: Repository) -> None:
    results = comparison_results(repo)
    report = REPORT.read_text()
    parts = (
        launch_table(comparison_launches(repo)),
        verdict_lines(results),
        machine_table(comparison_launches(repo)),
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
