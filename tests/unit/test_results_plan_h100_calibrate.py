"""The H100's noise for the decode-bound 7B (docs/results/plan-h200.md §11, 2026-12-05):
`tuner calibrate`'s five launches of vLLM's defaults and the study's resumed trials, against
the committed database; the launch table, the profile line, the spread within one card and
the shift between two cards are re-derived here."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from tests.studykit import stream_log
from tests.unit.test_results_plan_h200_compare import trials_table
from tuner.abtest import load_profile, profile_lines
from tuner.db.repository import Repository
from tuner.db.rows import LaunchRow
from tuner.db.session import make_engine
from tuner.scoring import Launch, NoiseKey
from tuner.scoring.noise import Components, components

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "plan-h100" / "2026-12-05-calibrate"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"
STUDY = "decode-qwen7b-chat-h100"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-decode.db'}"))


def _stored_key() -> dict[str, object]:
    return json.loads((DATA / "calibrate-decode-h100.json").read_text())["profile"]["key"]


def _key(repo: Repository) -> NoiseKey:
    """The key as the launches hold it (each of its fields read from the rows)."""
    fields = list(NoiseKey.__dataclass_fields__)
    (key,) = {tuple(getattr(row, f) for f in fields) for row in _launches(repo)}
    return NoiseKey(**dict(zip(fields, key, strict=True)))


def _launches(repo: Repository) -> list[LaunchRow]:
    return repo.list_launches(_stored_key())


def _geomean(logs: list[float]) -> float:
    return math.exp(statistics.fmean(logs))


def launch_table(repo: Repository) -> str:
    out = [
        "| launch | run | configuration | out tok/s (geometric mean of 3 windows) | P99 E2E ms "
        "| start-up s | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(_launches(repo), 1):
        out.append(
            f"| {i} | {row.source} | {row.config_label} | "
            f"{_geomean(row.values['output_throughput']):,.0f} | "
            f"{_geomean(row.values['e2e_p99_ms']):,.0f} | {row.startup_s:.0f} | {row.wall_s:.0f} |"
        )
    return "\n".join(out) + "\n"


def _defaults_logs(repo: Repository, source: str) -> list[float]:
    return [
        statistics.fmean(row.values["output_throughput"])
        for row in _launches(repo)
        if row.source == source and row.is_defaults
    ]


def spread_lines(repo: Repository) -> str:
    today, before = _defaults_logs(repo, "calibrate"), _defaults_logs(repo, "compare")
    shift = math.exp(statistics.median(today) - statistics.median(before))
    return (
        f"- Within this card: the five launches' out tok/s spread by a launch SD of "
        f"{statistics.stdev(today):.4f} (log), {math.exp(min(today)):,.0f}-"
        f"{math.exp(max(today)):,.0f}. Within the previous session's card: "
        f"{statistics.stdev(before):.4f} over its three defaults launches "
        f"({math.exp(min(before)):,.0f}-{math.exp(max(before)):,.0f}).\n"
        f"- Between the two cards: this card's median defaults launch served x{shift:.3f} of "
        f"the other's.\n"
    )


def _by_configuration(repo: Repository) -> Components | None:
    """The output tok/s components with launches grouped by configuration alone, as
    `tuner calibrate` grouped them when it ran (and stored in its JSON)."""
    return components(
        [
            Launch(repr(sorted(row.config.to_dict().items())), row.values["output_throughput"])
            for row in _launches(repo)
        ],
        3,
    )


def test_the_profile_then_and_now(repo: Repository) -> None:
    """The stored profile pooled §10's card with this one's; grouped by run, as profiles are
    now, the launch spread is the one a comparison on one card meets."""
    stored = json.loads((DATA / "calibrate-decode-h100.json").read_text())
    then = _by_configuration(repo)
    assert then is not None and (then.df, then.groups) == (9, 2)
    assert then.launch_sd == pytest.approx(
        stored["profile"]["metrics"]["output_throughput"]["launch_sd"]
    )
    assert stored["complete"] == 5 and stored["provenance"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    now = load_profile(repo, _key(repo))
    assert now is not None and now.launches == stored["profile"]["launches"] == 11
    thr = now.get("output_throughput")
    assert thr is not None and (thr.df, thr.groups) == (8, 3)
    assert thr.sd < then.sd / 2
    report = REPORT.read_text()
    printed = next(
        line
        for line in stream_log(DATA, "decode").splitlines()
        if "output tok/s: launch SD" in line
    )
    assert printed.startswith(
        f"  output tok/s: launch SD {then.launch_sd:.3f}, window SD {then.window_sd:.3f} (log), "
        f"a launch's value {then.sd:.3f}, 9 df from 11 launches of 2 configurations"
    )
    assert printed in report
    assert profile_lines(now, ["output_throughput"])[1] in report


def test_the_three_sessions_ran_on_three_cards() -> None:
    uuids = {
        (p / "nvidia-smi.csv").read_text().splitlines()[1].split(", ")[2]
        for p in (DATA, DATA.parent / "2026-12-05", DATA.parent / "2026-12-05-compare")
    }
    assert len(uuids) == 3


def test_the_tables_of_the_section(repo: Repository) -> None:
    report = REPORT.read_text()
    assert launch_table(repo) in report
    assert spread_lines(repo) in report
    assert trials_table(repo, STUDY) in report
