"""§6's heavy-load configuration against vLLM's defaults on an H100, twice in one session with
the default decision design (docs/results/plan-h200.md §16, 2026-12-07): the launches, the
verdicts `tuner compare` printed, each look re-derived through the function the command judges
with (the second comparison with the noise profile the first one's launches make), and what the
GPU's clocks and the host's CPU did during each launch, from the committed database and files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.studykit import (
    comparison_launches,
    comparison_results,
    launch_table,
    launch_trials,
    machine_table,
    stream_log,
    verdict_lines,
)
from tuner.abtest.compare import HEADLINE, Arm
from tuner.abtest.decide import Design, judge_look
from tuner.abtest.profile import load_profile
from tuner.db.repository import Repository
from tuner.db.rows import LaunchRow
from tuner.db.session import make_engine
from tuner.scoring import BETTER, SIGNIFICANT, NoiseKey

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "heavy-trend" / "2026-12-07"
REPORT = ROOT / "docs" / "results" / "plan-h200.md"


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository(make_engine(f"sqlite:///{DATA / 'tuner-heavy.db'}"))


def _key(x: LaunchRow) -> NoiseKey:
    return NoiseKey(
        host=x.host, gpu=x.gpu, vllm_version=x.vllm_version, model=x.model,
        workload=x.workload, windows=x.windows, placement=x.placement,
    )  # fmt: skip


def test_the_tables_and_lines_of_the_section(repo: Repository) -> None:
    section = REPORT.read_text().split("## 16. ", 1)[1]
    both = comparison_launches(repo, 0) + comparison_launches(repo, 1)
    parts = [machine_table(DATA, both)]
    for nth in (0, 1):
        parts += [
            launch_table(comparison_launches(repo, nth)),
            verdict_lines(comparison_results(repo, nth)),
        ]
    for part in parts:
        assert part in section, part


@pytest.mark.parametrize(("nth", "looks"), [(0, ["continue", BETTER]), (1, [BETTER])])
def test_each_look_is_what_the_design_decides_on_the_stored_launches(
    repo: Repository, nth: int, looks: list[str]
) -> None:
    """The default design (a look after each pair from 3 to 6 launches a side, Pocock, the
    trend taken out): the first comparison had no profile for this card and went on at 3 + 3;
    the second borrowed the first one's 8 launches and decided at its first look."""
    launches = comparison_launches(repo, nth)
    a, b = launch_trials(launches)
    assert [x.is_defaults for x in launches] == ([True, False, False, True] * 2)[: len(launches)]
    if nth == 0:  # nothing stored on this key before the first comparison's launches
        assert min(x.created_at for x in launches) == min(
            x.created_at for x in comparison_launches(repo, 0) + comparison_launches(repo, 1)
        )
        profile = None
    else:
        profile = load_profile(repo, _key(launches[0]), exclude_run=launches[0].run)
        assert profile is not None and profile.launches == 8
    design = Design.sequential()
    stored = comparison_results(repo, nth)
    assert stored["decision"]["max_launches"] == design.cap == 6
    (m,) = [m for m in stored["metrics"] if m["metric"] == HEADLINE]
    steps = []
    for n in range(design.first, len(a) + 1):
        look = judge_look(
            Arm("defaults", a[0].config), a[:n], Arm("B", b[0].config), b[:n], design, profile
        )
        steps.append(look.step.verdict)
    assert steps == looks and look.step.reason == SIGNIFICANT
    h = look.comparison.metric(HEADLINE)
    assert (h.ratio, h.low, h.high, h.df) == pytest.approx(
        (m["ratio"], m["low"], m["high"], m["df"])
    )
    assert h.method == m["method"]


def test_one_card_and_the_streams_ran_to_their_end(repo: Repository) -> None:
    uuid = (DATA / "nvidia-smi.csv").read_text().splitlines()[1].split(", ")[2]
    assert uuid == "GPU-02ffa1a9-345a-2d27-d7c5-964fa16dec5a"
    both = comparison_launches(repo, 0) + comparison_launches(repo, 1)
    assert {x.host for x in both} == {uuid} and len(both) == 14
    for name in ("heavy", "rep"):
        assert "stream done" in stream_log(DATA, name)
