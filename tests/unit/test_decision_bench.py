"""bench/decision_replay.py runs on the committed H200 launches at a tiny size and says what it
promises: the fitted noise of the key, and per design and scenario the false-decision rate,
power, launches, GPU-minutes and coverage. (The rates themselves are checked at a CI size in
tests/unit/test_noise.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_decision_bench_runs_on_the_committed_launches(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "decision_replay.py"), "--reps", "12",
         "--noise", "parametric", "--designs", "fixed-3-welch,seq-pooled",
         "--json-out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    fitted = data["fitted"]
    # 5 compare launches and 9 of the heavy study, 3 windows each, 5 configuration groups.
    assert (fitted["launches"], fitted["configurations"], fitted["windows"]) == (14, 5, 3)
    assert 0.03 < fitted["launch_sd"] < 0.15 and 0.03 < fitted["window_sd"] < 0.15
    results = data["results"]["parametric"]
    assert set(results) == {"fixed-3-welch", "seq-pooled"}
    for design, scenarios in results.items():
        assert set(scenarios) == {"x1", "x1-outlier", "x1.2", "x1.2-outlier"}
        for r in scenarios.values():
            assert 0.0 <= r["false_decisions"] <= 1.0 and r["gpu_minutes_median"] > 0
            assert r["coverage"] is None or 0.0 <= r["coverage"] <= 1.0
        if design == "fixed-3-welch":
            assert all(r["launches_median"] == 6 for r in scenarios.values())
        else:
            assert all(6 <= r["launches_median"] <= 12 for r in scenarios.values())
    assert "| seq-pooled |" in done.stdout and "fitted on 14 launches" in done.stdout


def test_the_balanced_mode_judges_each_confirmation_twice(tmp_path: Path) -> None:
    """--objective balanced: the deciding metric's verdict and the study's balanced verdict on
    the same simulated confirmations; the second can only take "better" away."""
    out = tmp_path / "balanced.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "decision_replay.py"), "--objective", "balanced",
         "--reps", "12", "--noise", "resample", "--json-out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    joint = data["joint"]
    # 14 launches of 3 windows; launches of a configuration seen once give no launch residual.
    assert joint["window_residuals"] == 42 and 5 <= joint["launch_residuals"] < 14
    # A closed loop: a launch that serves more tokens finishes its requests sooner.
    assert joint["launch_correlation"] < 0 and joint["window_correlation"] < 0
    assert joint["memories"] == 14 and joint["memory_spread"] < 0.01
    results = data["results"]["resample"]
    assert set(results) == {"fixed-3-pooled", "seq-pooled"}
    for design, scenarios in results.items():
        assert len(scenarios) == 7 and "x1" in scenarios and "x1, one launch x0.6" in scenarios
        for r in scenarios.values():
            assert 0.0 <= r["balanced_better"] <= r["deciding_better"] <= 1.0
            lost = r["deciding_better"] - r["balanced_better"]
            assert all(0.0 <= v <= lost + 1e-9 for v in r["lost_to"].values())
            if design == "fixed-3-pooled":
                assert r["launches_median"] == 6
    assert "| seq-pooled |" in done.stdout and "correlation" in done.stdout


def test_the_readmes_balanced_table_is_the_committed_run() -> None:
    """bench/README.md's balanced-verdict table re-derived from
    bench/results/decision-balanced.json, cell by cell."""
    data = json.loads((ROOT / "bench" / "results" / "decision-balanced.json").read_text())
    designs = {"one look, 3 a side": "fixed-3-pooled", "sequential, 3-6 a side": "seq-pooled"}
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    section = readme.split("### The balanced objective's verdict", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    checked, noise = 0, ""
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        noise = cells[0] or noise
        for scenario, cell in zip(head[2:], cells[2:], strict=True):
            r = data["results"][noise][designs[cells[1]]][scenario]
            rates = (r["deciding_better"], r["balanced_better"], r["composite_interval_better"])
            want = " / ".join(f"{100 * x:.1f}" for x in rates) + f" %; {r['launches_median']:g}"
            assert cell == want, (noise, cells[1], scenario)
            checked += 1
    assert checked == 2 * 2 * 7


def test_the_launch_order_under_a_drifting_machine() -> None:
    """--drift puts each launch where the design runs it: counterbalanced (A B, B A, ...) as
    tuner launches them now, or alternating (A B, A B, ...) as it did before 2026-12-06."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import decision_replay as bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    order = sorted(
        ((bench.position(side, i, "counterbalanced"), side) for side in "ab" for i in range(4)),
    )
    assert "".join(side for _, side in order) == "abbaabba"
    assert [bench.position("b", i, "alternating") for i in range(3)] == [1, 3, 5]
    # After every second round a steady drift charges neither side; alternating charges B.
    drift = [sum(bench.position(s, i, "counterbalanced") for i in range(4)) for s in "ab"]
    assert drift[0] == drift[1]
    drift = [sum(bench.position(s, i, "alternating") for i in range(4)) for s in "ab"]
    assert drift[1] - drift[0] == 4


def test_the_readmes_drift_table_is_the_committed_run() -> None:
    """bench/README.md's drift table re-derived from bench/results/decision-drift-2026-12-06.json
    (and its drift-free row from bench/results/decision-replay.json), cell by cell."""
    runs = json.loads((ROOT / "bench" / "results" / "decision-drift-2026-12-06.json").read_text())
    steady = json.loads((ROOT / "bench" / "results" / "decision-replay.json").read_text())
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    section = readme.split("### A machine that drifts, and the order", 1)[1].split("\n### ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    designs = ("fixed-3-welch", "seq-welch", "seq-pooled")
    checked, drift = 0, ""
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        drift = cells[0].split(" ")[0] or drift
        if drift == "0":
            run = steady
            assert runs["alternating"]["-0.02"]["args"]["reps"] == run["args"]["reps"] == 2000
        else:
            run = runs[cells[1]][drift]
            assert (run["args"]["drift"], run["args"]["order"]) == (float(drift), cells[1])
        res = run["results"]["parametric"]
        for design, cell in zip(designs, cells[2:5], strict=True):
            r = res[design]
            want = f"{100 * r['x1']['false_decisions']:.1f} % / {100 * r['x1.2']['better']:.0f} %"
            assert cell == want, (drift, cells[1], design)
            checked += 1
        assert cells[5] == f"{100 * res['seq-pooled']['x1.2']['inconclusive']:.1f} %"
    assert checked == 7 * 3


def test_the_readmes_trend_design_table_is_the_committed_run() -> None:
    """bench/README.md's table of tuner's design with the trend taken out, re-derived from
    bench/results/decision-trend-designs-2026-12-06.json cell by cell; the untrended designs'
    cells are the drift table's run's (the simulated launches' times change no such verdict)."""
    runs = json.loads(
        (ROOT / "bench" / "results" / "decision-trend-designs-2026-12-06.json").read_text()
    )
    drift_runs = json.loads(
        (ROOT / "bench" / "results" / "decision-drift-2026-12-06.json").read_text()
    )
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    section = readme.split("### tuner's design with the trend taken out", 1)[1].split("\n### ")[0]
    section = section.split("What a decision costs", 1)[0]  # its first table
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    designs = [c.strip() for c in rows[0].strip("|").split("|")][1:-1]
    assert designs == [
        "seq-welch", "seq-welch-trend", "seq-pooled", "seq-pooled-trend", "fixed-3-pooled",
        "fixed-3-pooled-trend",
    ]  # fmt: skip
    checked = 0
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        words = cells[0].split(" ")
        if words[0] == "step":
            run = runs["step"][str(int(words[-1]) - 1)]  # "from launch 4": rank 3
            assert (run["args"]["step"], run["args"]["drift"]) == (float(words[1]), 0.0)
        else:
            drift = words[-3] if len(words) > 1 else words[0]
            run = runs["drift"][drift]
            assert (run["args"]["drift"], run["args"]["step"]) == (float(drift), 0.0)
            if drift in ("-0.02", "-0.04"):
                old = drift_runs["counterbalanced"][drift]["results"]["parametric"]
                for design in ("seq-welch", "seq-pooled"):
                    assert run["results"]["parametric"][design]["x1"] == old[design]["x1"]
        assert run["args"]["reps"] == 2000 and run["args"]["order"] == "counterbalanced"
        res = run["results"]["parametric"]
        for design, cell in zip(designs, cells[1:-1], strict=True):
            r = res[design]
            want = f"{100 * r['x1']['false_decisions']:.1f} % / {100 * r['x1.2']['better']:.0f} %"
            assert cell == want, (cells[0], design)
            checked += 1
        assert cells[-1] == f"{100 * res['seq-pooled-trend']['x1.2']['inconclusive']:.1f} %"
    assert checked == 6 * 6


def test_the_balanced_verdicts_trend_paragraph_is_the_committed_run() -> None:
    run = json.loads(
        (ROOT / "bench" / "results" / "decision-balanced-trend-2026-12-06.json").read_text()
    )
    readme = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split())
    assert run["args"]["reps"] == 2000 and run["args"]["objective"] == "balanced"
    res = run["results"]

    def spread(design: str, scenario: str, key: str) -> str:
        got = sorted(
            100 * res[noise][design][scenario][key] for noise in ("parametric", "resample")
        )
        return f"{got[0]:.1f}-{got[1]:.1f} %"

    quoted = [
        spread("seq-pooled-trend", "x1.2, E2E /1.2", "balanced_better") + " (sequential)",
        spread("fixed-3-pooled-trend", "x1.2, E2E /1.2", "balanced_better") + " (one look of 3)",
        "often (" + spread("seq-pooled-trend", "x1.2, E2E x1.1", "balanced_better")[:-2],
    ]

    def both(scenario: str) -> str:
        got = sorted(
            100 * res[noise][d][scenario]["balanced_better"]
            for noise in ("parametric", "resample")
            for d in ("seq-pooled-trend", "fixed-3-pooled-trend")
        )
        return f"{got[0]:.1f}-{got[-1]:.1f} %"

    quoted.append(f'"better" at B/A = 1 in {both("x1")}')
    quoted.append(f"for a pure latency regression in {both('x1, E2E x1.2')}")
    for text in quoted:
        assert text in readme, text


def test_the_readmes_cost_table_of_the_trend_designs_is_the_committed_run() -> None:
    """The launches and GPU-minutes a decision takes, tuner's sequential designs with and
    without the trend, re-derived from bench/results/decision-trend-designs-2026-12-06.json."""
    runs = json.loads(
        (ROOT / "bench" / "results" / "decision-trend-designs-2026-12-06.json").read_text()
    )
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    section = readme.split("### tuner's design with the trend taken out", 1)[1].split("\n### ")[0]
    table = section.split("What a decision costs at B/A = 1.2", 1)[1].split("\n\n")[1]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    designs = [c.strip() for c in rows[0].strip("|").split("|")][1:]
    assert designs == ["seq-welch", "seq-welch-trend", "seq-pooled", "seq-pooled-trend"]
    runs_by_label = {
        "0": runs["drift"]["0"],
        **{f"drift {d} a launch": runs["drift"][d] for d in ("-0.02", "-0.04", "-0.08")},
        "step -0.15 from launch 4": runs["step"]["3"],
        "step -0.15 from launch 5": runs["step"]["4"],
    }
    for line in rows[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        res = runs_by_label.pop(cells[0])["results"]["parametric"]
        for design, cell in zip(designs, cells[1:], strict=True):
            r = res[design]["x1.2"]
            assert cell == f"{r['launches_median']:.0f} / {r['gpu_minutes_median']:.1f}"
    assert runs_by_label == {}
    # At B/A = 1: the budget, 12 launches and 23.2 GPU-minutes, but for the guard's early stops.
    for kind, machines in runs.items():
        for machine, run in machines.items():
            res = run["results"]["parametric"]
            for design in designs:
                r = res[design]["x1"]
                if design.endswith("-trend") or (kind, machine) != ("drift", "-0.08"):
                    assert r["launches_median"] == 12
                    assert 23.15 <= r["gpu_minutes_median"] < 23.35
                else:
                    assert f"{r['gpu_minutes_median']:.1f}" == "19.6"
    assert "12 launches, 23.2-23.3 GPU-minutes (median)" in " ".join(section.split())


def test_the_own_launches_level_paragraph_is_the_committed_runs() -> None:
    """The paragraph on the level of an interval on the comparison's own launches alone:
    its figures from the re-run `-trend` columns and the 8,000-comparison run, and the level
    itself from tuner.scoring.sequential."""
    from tuner.scoring.sequential import pocock_confidence, pocock_confidence_own

    results = ROOT / "bench" / "results"
    runs = json.loads((results / "decision-trend-designs-2026-12-06.json").read_text())
    big = json.loads((results / "decision-trend-own-level-8000-2026-12-06.json").read_text())
    readme = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split())
    drifts = [runs["drift"][d]["results"]["parametric"]["seq-welch-trend"] for d in runs["drift"]]
    false = sorted(100 * r["x1"]["false_decisions"] for r in drifts)
    found = {round(100 * r["x1.2"]["better"]) for r in drifts}
    assert found == {78}
    assert f"`seq-welch-trend` {false[0]:.1f}-{false[-1]:.1f} % under a steady drift" in readme
    assert big["args"]["reps"] == 8000 and big["args"]["designs"] == ["seq-welch-trend"]
    assert big["args"]["drift"] == 0.0 and big["args"]["ratios"] == [1.0]
    rate = big["results"]["parametric"]["seq-welch-trend"]["x1"]["false_decisions"]
    assert f"and {100 * rate:.1f} % at 8,000 comparisons without a drift" in readme
    looks = (3, 4, 5, 6)
    assert f"{100 * pocock_confidence_own(looks):.2f} % a look for 3-6 a side" in readme
    assert f"Pocock level ({100 * pocock_confidence(looks):.2f} % a look)" in readme
    for run in (*runs["drift"].values(), *runs["step"].values()):
        assert run["per_look_confidence_own"] == pytest.approx(pocock_confidence_own(looks))


def test_the_headline_row_of_the_default_design_is_the_committed_runs() -> None:
    """bench/README.md's table of figures: the row of today's default design (the trend taken
    out), with a profile and without, re-derived from the trend designs' runs."""
    results = ROOT / "bench" / "results"
    runs = json.loads((results / "decision-trend-designs-2026-12-06.json").read_text())
    big = json.loads((results / "decision-trend-own-level-8000-2026-12-06.json").read_text())
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| the default decision"))
    figures = row.split(" | ")[1]

    def spread(values: list[float], digits: int) -> str:
        low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
        return low if low == high else f"{low}-{high}"

    cells = {}
    for design in ("seq-pooled-trend", "seq-welch-trend"):
        rs = [run["results"]["parametric"][design] for run in runs["drift"].values()]
        step = runs["step"]["3"]["results"]["parametric"][design]["x1"]["false_decisions"]
        cells[design] = (
            spread([100 * r["x1"]["false_decisions"] for r in rs], 1) + " %",
            spread([100 * r["x1.2"]["better"] for r in rs], 0) + " %, "
            + spread([r["x1.2"]["launches_median"] for r in rs], 0) + " ("
            + spread([r["x1.2"]["gpu_minutes_median"] for r in rs], 1) + ")",
            f"{100 * step:.1f} %",
        )  # fmt: skip
    with_profile, without = cells["seq-pooled-trend"], cells["seq-welch-trend"]
    rate = big["results"]["parametric"]["seq-welch-trend"]["x1"]["false_decisions"]
    assert figures == (
        f"{with_profile[0]} / {without[0]} ({100 * rate:.1f} % at 8,000 comparisons); "
        f"{with_profile[1]} / {without[1]}; {with_profile[2]} / {without[2]}"
    )


def test_the_integrated_pocock_level_reproduces_the_committed_decisions() -> None:
    """bench/README.md "The Pocock level, integrated": the four sequential designs re-run with
    the level by recursive integration give the committed run's figures, but for the median
    half-widths (by 2e-6 at most), and the level is today's."""
    from tuner.scoring.sequential import pocock_confidence

    results = ROOT / "bench" / "results"
    rerun = json.loads((results / "decision-pocock-recursion-2026-12-07.json").read_text())
    committed = json.loads((results / "decision-trend-designs-2026-12-06.json").read_text())
    before = committed["drift"]["0"]
    assert rerun["args"]["reps"] == before["args"]["reps"] == 2000
    assert rerun["args"]["drift"] == 0.0
    assert rerun["per_look_confidence"] == pytest.approx(pocock_confidence((3, 4, 5, 6)), abs=1e-12)
    assert abs(rerun["per_look_confidence"] - before["per_look_confidence"]) < 1e-6
    designs = rerun["results"]["parametric"]
    assert sorted(designs) == ["seq-pooled", "seq-pooled-trend", "seq-welch", "seq-welch-trend"]
    moved = 0.0
    for design, cells in designs.items():
        for cell, figures in cells.items():
            old = before["results"]["parametric"][design][cell]
            for name, value in figures.items():
                if name == "half_width_median":
                    moved = max(moved, abs(value - old[name]))
                else:
                    assert value == old[name], (design, cell, name)
    assert 0.0 < moved <= 4e-6
    readme = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split())
    assert "only the median half-widths move, by 4e-6 at most" in readme


def test_the_readmes_noisier_table_is_the_committed_run() -> None:
    """bench/README.md's table of a comparison noisier than its calibration, re-derived from
    bench/results/decision-noisier-2026-12-07.json (K = 1.3, 1.5) and the committed trend
    designs' run (K = 1), cell by cell."""
    noisier = json.loads(
        (ROOT / "bench" / "results" / "decision-noisier-2026-12-07.json").read_text()
    )["runs"]
    steady = json.loads(
        (ROOT / "bench" / "results" / "decision-trend-designs-2026-12-06.json").read_text()
    )["drift"]["0"]
    readme = (ROOT / "bench" / "README.md").read_text()
    for k, run in (("1", steady), *noisier.items()):
        assert run["args"].get("noisier", 1.0) == float(k)
        cells = []
        for design in ("seq-pooled-trend", "seq-welch-trend"):
            r = run["results"]["parametric"][design]
            cells.append(
                f"{r['x1']['false_decisions'] * 100:.1f} % / {r['x1']['coverage'] * 100:.1f} % / "
                f"{r['x1.2']['better'] * 100:.0f} %"
            )
        assert f"| {k} | {cells[0]} | {cells[1]} |" in readme


GUARDS = {"f25": "F test at 25 %", "f50": "F test at 50 %", "floor": "own variance as a floor"}


def test_the_readmes_guard_table_is_the_committed_run() -> None:
    """bench/README.md's table of other profile guards (`--contradicts`, `--own-floor`),
    re-derived from bench/results/decision-guard-2026-12-07.json, cell by cell."""
    guard = json.loads((ROOT / "bench" / "results" / "decision-guard-2026-12-07.json").read_text())
    readme = (ROOT / "bench" / "README.md").read_text()
    for name, label in GUARDS.items():
        runs = guard["runs"][name]
        cells = []
        for k in ("1", "1.3", "1.5"):
            run = runs[k]
            assert run["args"]["noisier"] == float(k)
            assert (run["args"]["contradicts"], run["args"]["own_floor"]) == {
                "f25": (0.25, False), "f50": (0.5, False), "floor": (0.05, True)
            }[name]  # fmt: skip
            r = run["results"]["parametric"]["seq-pooled-trend"]
            cells.append(
                f"{r['x1']['false_decisions'] * 100:.1f} % / {r['x1.2']['better'] * 100:.0f} %"
            )
        assert f"| {label} | {' | '.join(cells)} |" in readme


def test_the_own_floor_would_not_have_stopped_either_gpu_decision_where_it_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the comparison's own variance as a floor, the two comparisons decided on a GPU
    with a profile would have gone on: the H200's at its third look (4 a side), the H100's
    second (docs/results/plan-h200.md §16) at its first (3 a side)."""
    import importlib.util

    from tests.studykit import comparison_launches, launch_trials
    from tuner.abtest.compare import HEADLINE, Arm
    from tuner.abtest.decide import Design, judge_look
    from tuner.abtest.profile import load_profile
    from tuner.db.repository import Repository
    from tuner.db.session import make_engine
    from tuner.scoring import NoiseKey, noise

    spec = importlib.util.spec_from_file_location("replay", ROOT / "bench" / "decision_replay.py")
    assert spec is not None and spec.loader is not None
    replay = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "replay", replay)  # its dataclasses look themselves up
    spec.loader.exec_module(replay)
    data = ROOT / "studies" / "results" / "heavy-trend" / "2026-12-07" / "tuner-heavy.db"
    repo = Repository(make_engine(f"sqlite:///{data}"))
    launches = comparison_launches(repo, 1)
    x = launches[0]
    key = NoiseKey(x.host, x.gpu, x.vllm_version, x.model, x.workload, x.windows, x.placement)
    profile = load_profile(repo, key, exclude_run=x.run)
    a, b = launch_trials(launches)

    def step() -> str:
        look = judge_look(Arm("A", a[0].config), a, Arm("B", b[0].config), b, Design.sequential(),
                          profile)  # fmt: skip
        assert look.comparison.metric(HEADLINE).method == "pooled, trend taken out"
        return str(look.step.verdict)

    assert step() == "better"  # tuner's guard, as printed
    monkeypatch.setattr(noise, "_pooled", noise._pooled)  # restored after the test
    monkeypatch.setattr(noise, "CONTRADICTS", noise.CONTRADICTS)
    replay._what_if_guard(noise.CONTRADICTS, own_floor=True)
    assert step() == "continue"

    from bench.tables.noise import placement_components
    from tests.unit.test_results_decide_h200 import DATA, NOISE_LOG, looks_table

    lines = [json.loads(x) for x in NOISE_LOG.read_text().splitlines() if x.strip()]
    pinned = placement_components(lines, "output_throughput")["pinned"]
    assert pinned is not None
    table = looks_table(json.loads(DATA.read_text()), pinned)
    assert table.rstrip().endswith("| 3 | 4 | 1.195 | [0.973, 1.467] (98.22 %) | 10 | continue |")
