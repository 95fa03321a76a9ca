"""Launches of one configuration that disagree far beyond their noise, and client-bound or
disturbed windows: the comparison says so instead of giving a verdict that reads as
information, and every report that shows those numbers says so too."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest

from tuner.abtest.compare import Arm, Comparison, compare
from tuner.abtest.decide import Design, judge_look
from tuner.db.rows import ComparisonRow
from tuner.domain import (
    ClientHealth,
    LatencyStats,
    MemoryUsage,
    Objective,
    ServingConfig,
    TrialResult,
    TrialStatus,
    WindowMetrics,
)
from tuner.load.stats import summarize
from tuner.results.comparisons import comparison_table, comparisons_markdown
from tuner.results.recommend import Recommendation
from tuner.results.report import comparison_report
from tuner.scoring.caveats import (
    DISAGREE_FLOOR,
    Disagreement,
    WindowFlags,
    beyond_disagreement,
    disagreement,
    noise_bound,
    stored_window_note,
    window_flags,
)
from tuner.scoring.significance import BETTER, INCONCLUSIVE, NO_DIFFERENCE, WORSE, is_inconclusive
from tuner.study.confirm import choose

GIB = 1024**3
DEFAULTS, CANDIDATE = Arm("defaults", ServingConfig()), Arm("#3", ServingConfig(max_num_seqs=8))


def _lat(ms: float) -> LatencyStats:
    return LatencyStats(count=64, mean=ms * 0.8, p50=ms * 0.7, p90=ms * 0.9, p99=ms, max=ms * 1.1)


def _window(tok_s: float, *, bound: bool = False, disturbed: bool = False) -> WindowMetrics:
    # Latencies scale with the throughput the way a slowed-down server's do.
    slow = 1000.0 / tok_s
    client = ClientHealth(
        client_cpu=0.95 if bound else 0.2,
        loop_lag_p99_ms=1.0,
        loop_lag_max_ms=2.0,
        host_cpu=1.0,
        host_cores=2,
        others_cpu=1.5 if disturbed else 0.0,
        client_bound=bound,
        disturbed=disturbed,
    )
    return WindowMetrics(
        duration_s=10.0,
        requests_ok=64,
        requests_failed=0,
        prompt_tokens=64 * 128,
        output_tokens=int(tok_s * 10),
        request_throughput=tok_s / 100.0,
        output_throughput=tok_s,
        total_throughput=tok_s * 2.0,
        ttft_ms=_lat(80.0 * slow),
        itl_ms=_lat(10.0 * slow),
        e2e_ms=_lat(900.0 * slow),
        client=client,
    )


def _launch(
    config: ServingConfig,
    tok_s: float,
    spread: float = 0.03,
    *,
    bound: int = 0,
    disturbed: int = 0,
) -> TrialResult:
    """One complete launch: three windows at tok_s x (1 - spread, 1, 1 + spread), the first
    ``bound`` of them client-bound and the first ``disturbed`` disturbed."""
    windows = tuple(
        _window(tok_s * f, bound=i < bound, disturbed=i < disturbed)
        for i, f in enumerate((1.0 - spread, 1.0, 1.0 + spread))
    )
    return TrialResult(
        config=config,
        status=TrialStatus.COMPLETE,
        windows=windows,
        metrics=summarize(windows),
        memory=MemoryUsage(host_peak_rss_bytes=2 * GIB),
    )


def _compare(a: Sequence[float], b: Sequence[float], **b_flags: int) -> Comparison:
    a_runs = [_launch(DEFAULTS.config, v) for v in a]
    b_runs = [_launch(CANDIDATE.config, v, **b_flags) for v in b]
    return compare(DEFAULTS, a_runs, CANDIDATE, b_runs)


def _row(c: Comparison, kind: str = "confirmation") -> ComparisonRow:
    """``c`` as the database hands it back (through JSON)."""
    return ComparisonRow(
        id=11,
        created_at=0.0,
        model="tiny-ernie",
        gpu="cpu",
        workload="smoke",
        a_config=c.a.config,
        b_config=c.b.config,
        repeats=3,
        results=json.loads(json.dumps({**c.to_results(), "kind": kind})),
        verdicts=json.loads(json.dumps(c.to_verdicts())),
        provenance=None,
        study_id=1 if kind == "confirmation" else None,
    )


# -- the rule ---------------------------------------------------------------------------------


def test_the_rule_flags_a_factor_beyond_the_floor_and_the_window_spread() -> None:
    tight = [(0.97, 1.0, 1.03)] * 3
    assert disagreement([100.0, 120.0, 80.0], tight) is None  # +-20 %: the H200's normal
    assert disagreement([100.0, 190.0, 100.0], tight) is None  # x1.9: under the floor of 2
    off = disagreement([462.0, 2363.0, 470.0], [(450, 462, 475), (2300, 2363, 2420)] * 2)
    assert off is not None and off.ratio == pytest.approx(2363 / 462)
    assert off.bound == DISAGREE_FLOOR and off.launches == 3
    assert off.text("tok/s") == "462 … 2,363 tok/s, x5.1"


def test_a_metric_noisy_within_a_launch_may_differ_more_across_launches() -> None:
    wide = [(80.0, 100.0, 128.0)] * 3  # x1.6 between the windows of each launch
    assert noise_bound(1.6) == pytest.approx(1.6**3)  # x4.1
    assert disagreement([100.0, 300.0, 150.0], wide) is None
    assert disagreement([100.0, 450.0, 150.0], wide) is not None


def test_a_disturbed_launch_with_scattered_windows_does_not_excuse_itself() -> None:
    # The typical launch's window spread counts (the median), not the widest launch's.
    windows = [(98.0, 100.0, 102.0), (99.0, 100.0, 101.0), (200.0, 500.0, 900.0)]
    assert disagreement([100.0, 100.0, 500.0], windows) is not None


def test_too_few_launches_or_no_windows() -> None:
    assert disagreement([100.0]) is None
    assert disagreement([100.0, 0.0, float("nan")]) is None  # what cannot be on a log scale
    # Peak memory has one number per launch: the floor alone applies.
    assert disagreement([2.0, 2.1]) is None and disagreement([2.0, 4.5]) is not None


# -- the comparison ---------------------------------------------------------------------------


def test_the_cpu_example_is_inconclusive_not_a_huge_change() -> None:
    # The defaults: one launch at 5x the others (another process was busy during two of
    # them), each launch's windows within +-3 %.
    c = _compare([462.0, 2363.0, 470.0], [480.0, 505.0, 495.0])
    thr = c.metric("output_throughput")
    assert thr.inconclusive and thr.a_disagreement is not None and thr.b_disagreement is None
    assert thr.verdict == (
        "inconclusive: launches of A (defaults) disagree (462 … 2,363 tok/s, x5.1) far "
        "beyond their within-launch noise (x2.0 at most expected)"
    )
    assert c.overall == thr.verdict and c.to_verdicts()["overall"] == thr.verdict
    line = thr.describe()
    assert line.startswith("output tok/s: inconclusive: launches of A (defaults) disagree")
    assert "-> " not in line and "is not a measurement of B against A" in line
    # Latencies of the slow launches disagree as much; memory (the same every launch) does not.
    assert c.metric("e2e_p99_ms").inconclusive
    assert not c.metric("memory_gib").inconclusive
    stored = next(m for m in c.to_results()["metrics"] if m["metric"] == "output_throughput")
    assert stored["disagreement"]["b"] is None
    assert stored["disagreement"]["a"]["ratio"] == pytest.approx(2363 / 462)
    assert stored["disagreement"]["a"]["bound"] == DISAGREE_FLOOR


def test_a_difference_far_beyond_the_disagreement_keeps_its_verdict() -> None:
    # A CI run beside CPU vLLM: max_num_seqs=1's launches disagree x2.1 (one ran while the
    # machine was busiest), yet its best launch is x8.9 below the defaults' worst.
    c = _compare([453.6, 458.4, 417.7], [46.9, 46.7, 22.7])
    thr = c.metric("output_throughput")
    assert thr.b_disagreement is not None and thr.b_disagreement.ratio > 2.0
    assert thr.verdict == WORSE and not thr.inconclusive
    stored = next(m for m in c.to_results()["metrics"] if m["metric"] == "output_throughput")
    assert stored["disagreement"]["b"]["ratio"] == pytest.approx(46.9 / 22.7)  # still said
    # Ranges that come closer than the disagreement stay inconclusive, decided or not.
    near = _compare([453.6, 458.4, 417.7], [200.0, 190.0, 92.0]).metric("output_throughput")
    assert near.b_disagreement is not None and near.inconclusive
    assert not beyond_disagreement([1.0, 2.0], [3.0], [])  # no disagreement: nothing to outweigh
    # The arm that was not flagged (noisy windows allow it x3.4) spreads x3.3 on its own: a
    # x2.4 gap to the flagged arm's x2.1 is not beyond that.
    flagged = Disagreement(800.0, 1700.0, 1.0, 2)
    assert not beyond_disagreement([100.0, 330.0], [800.0, 1700.0], [flagged])
    assert beyond_disagreement([100.0, 110.0], [800.0, 1700.0], [flagged])


def test_ordinary_launch_noise_gives_an_ordinary_verdict() -> None:
    c = _compare([800.0, 1000.0, 1200.0], [1150.0, 950.0, 1300.0])
    for m in c.metrics:
        assert m.verdict in (BETTER, WORSE, NO_DIFFERENCE), m.verdict
        assert m.a_disagreement is None and m.b_disagreement is None
    assert c.overall == NO_DIFFERENCE and c.window_note == "" and c.overall_text() == c.overall
    assert all(m["disagreement"] == {"a": None, "b": None} for m in c.to_results()["metrics"])


def test_client_bound_and_disturbed_windows_are_counted_per_arm() -> None:
    c = _compare([1000.0, 1010.0, 990.0], [1500.0, 1490.0, 1510.0], bound=1, disturbed=2)
    assert c.a_windows == WindowFlags(9, 0, 0)
    assert c.b_windows == WindowFlags(9, 3, 6)
    assert c.overall == BETTER  # the verdict itself stays a verdict
    note = "B (#3): 3 of 9 windows client-bound, 6 of 9 disturbed"
    assert c.window_note == note and c.overall_text() == f"better ({note})"
    windows = c.to_results()["windows"]
    assert windows["b"] == {"windows": 9, "client_bound": 3, "disturbed": 6}
    assert windows["a"] == {"windows": 9, "client_bound": 0, "disturbed": 0}
    assert window_flags(_launch(DEFAULTS.config, 100.0, bound=3).windows).short() == (
        "3/3 client-bound"
    )


# -- where the comparison is read back --------------------------------------------------------


def test_the_compare_page_and_the_export_show_the_new_verdict_and_the_windows() -> None:
    c = _compare([462.0, 2363.0, 470.0], [480.0, 505.0, 495.0], disturbed=1)
    row = _row(c, kind="compare")
    report = comparison_report(row)
    thr = next(m for m in report.metrics if m.metric == "output_throughput")
    assert thr.verdict == c.overall and thr.tone == "" and report.overall == c.overall
    assert report.window_note == "B (#3): 3 of 9 windows disturbed"
    assert report.unparsed == ""  # "windows" and "disagreement" have their places
    md = comparisons_markdown(
        [{**row.results, "id": 11, "study": None, "model": "m", "gpu": "cpu", "workload": "w",
          "verdicts": row.verdicts, "metrics": row.results["metrics"]}]
    )  # fmt: skip
    assert "overall inconclusive: launches of A (defaults) disagree" in md
    assert "Caution: B (#3): 3 of 9 windows disturbed." in md
    thr_line = next(line for line in md.splitlines() if line.startswith("| output tok/s"))
    assert "| not meaningful | inconclusive: launches of A (defaults)" in thr_line


def test_rows_stored_before_the_checks_read_as_before() -> None:
    c = _compare([1000.0, 1010.0, 990.0], [1500.0, 1490.0, 1510.0])
    results: dict[str, Any] = c.to_results()
    del results["windows"]
    for m in results["metrics"]:
        del m["disagreement"]
    row = _row(c)
    old = ComparisonRow(**{**vars(row), "results": results})
    report = comparison_report(old)
    assert report.window_note == "" and report.unparsed == "" and report.overall == BETTER
    assert stored_window_note(results) == "" and stored_window_note(None) == ""
    assert WindowFlags.from_dict({"windows": "9", "client_bound": -1}) == WindowFlags()


# -- the confirmation and the recommendation --------------------------------------------------


def test_a_confirmation_whose_defaults_disagree_confirms_nothing() -> None:
    # B looks 3x "better" on the geometric mean, but the defaults' launches disagree x5.
    c = _compare([462.0, 2363.0, 470.0], [1480.0, 1505.0, 1495.0])
    assert c.metric("output_throughput").inconclusive
    confirmed = choose([_row(c)], Objective.THROUGHPUT)
    assert confirmed is not None and confirmed.verdict == INCONCLUSIVE
    assert confirmed.config == ServingConfig() and confirmed.comparison_id == 11
    thr_detail = next(d for d in confirmed.details if d.startswith("output tok/s"))
    assert thr_detail.startswith("output tok/s: inconclusive: launches of A (defaults)")
    assert "%" not in thr_detail  # no "+282.5 % [-99.1, +163935.7]"
    # Without the disagreement the same candidate wins.
    clean = choose([_row(_compare([462.0, 470.0, 455.0], [1480.0, 1505.0, 1495.0]))],
                   Objective.THROUGHPUT)  # fmt: skip
    assert clean is not None and clean.verdict == BETTER and clean.caveats == ()


def test_the_memory_objective_ignores_a_throughput_it_does_not_weigh_only_when_sound() -> None:
    # Memory is what the memory objective scores, but its throughput must not be worse: a
    # comparison inconclusive on throughput cannot confirm a memory winner either.
    c = _compare([462.0, 2363.0, 470.0], [480.0, 505.0, 495.0])
    confirmed = choose([_row(c)], Objective.MEMORY)
    assert confirmed is not None and confirmed.verdict == INCONCLUSIVE


def test_the_confirmation_carries_the_flagged_windows() -> None:
    c = _compare([1000.0, 1010.0, 990.0], [1500.0, 1490.0, 1510.0], bound=3)
    confirmed = choose([_row(c)], Objective.THROUGHPUT)
    assert confirmed is not None and confirmed.verdict == BETTER
    assert confirmed.caveats == ("B (#3): 9 of 9 windows client-bound",)


def _recommendation(**kw: Any) -> Recommendation:
    fields: dict[str, Any] = dict(
        study="s",
        trial_number=3,
        is_baseline=False,
        score=1.4,
        flags=("--max-num-seqs", "8"),
        env={},
        serve_command="vllm serve m --max-num-seqs 8",
        metrics={},
        baseline_metrics=None,
        memory_gib=2.0,
        baseline_memory_gib=2.0,
        provenance={},
        feasible=True,
    )
    fields.update(kw)
    return Recommendation(**fields)


def test_the_recommendation_mentions_flagged_windows_and_an_inconclusive_confirmation() -> None:
    quiet = _recommendation().render()
    assert "caution" not in quiet and "client-bound" not in quiet
    text = _recommendation(
        windows=WindowFlags(3, 2, 0), baseline_windows=WindowFlags(3, 0, 1)
    ).render()
    assert (
        "  caution: trial #3: 2 of 3 windows client-bound (tuner's load generator was "
        "saturated, so those numbers are the client's floor, not the server's)"
    ) in text
    assert (
        "  caution: vLLM's defaults: 1 of 3 windows disturbed (tuner's load generator was short"
        in text
    )

    c = _compare([462.0, 2363.0, 470.0], [1480.0, 1505.0, 1495.0], disturbed=3)
    confirmed = choose([_row(c)], Objective.THROUGHPUT)
    text = _recommendation(confirmed=confirmed).render()
    head = next(line for line in text.splitlines() if "confirmation (fresh" in line)
    assert head.startswith("  confirmation (fresh launches, interleaved): inconclusive:")
    assert "no significant difference" not in head and "run vLLM's defaults" in head
    assert "    output tok/s: inconclusive: launches of A (defaults) disagree" in text
    assert "    caution: B (#3): 9 of 9 windows disturbed" in text


def test_is_inconclusive_reads_stored_text() -> None:
    assert is_inconclusive("inconclusive: launches of A disagree")
    assert not is_inconclusive(BETTER) and not is_inconclusive(None)


# -- a machine that drifts during the comparison ----------------------------------------------


def _drifting(
    a_level: float, ratio: float, slope: float, noise: Sequence[float], timed: bool = True
) -> Comparison:
    """Launches A B A B ... (one a minute) whose output falls by ``slope`` a launch (log scale),
    B at ``ratio`` of A, each with its launch noise (log) from ``noise``; ``timed=False``:
    without the times they ended (rows of older tuners)."""
    runs = _drifting_runs(a_level, ratio, slope, noise, timed)
    return compare(DEFAULTS, runs[0], CANDIDATE, runs[1])


def _drifting_runs(
    a_level: float, ratio: float, slope: float, noise: Sequence[float], timed: bool = True
) -> tuple[list[TrialResult], list[TrialResult]]:
    import math

    runs: tuple[list[TrialResult], list[TrialResult]] = ([], [])
    for i, e in enumerate(noise):
        side = i % 2
        tok_s = a_level * (ratio if side else 1.0) * math.exp(slope * i + e)
        launch = _launch(CANDIDATE.config if side else DEFAULTS.config, tok_s)
        end = 1_000.0 + 60.0 * i if timed else None
        runs[side].append(dataclasses.replace(launch, finished_at=end))
    return runs


def test_a_steady_drift_is_reported_with_b_over_a_taken_out_of_it() -> None:
    # The H100's launches of 2026-12-06 (docs/results/plan-h200.md §13): both sides fell about
    # 8 % a launch, and Welch's interval could not tell a x1.39 apart.
    noise = [-0.12, 0.08, 0.02, 0.10, 0.14, -0.24, -0.03, 0.06]
    c = _drifting(17_000.0, 1.39, -0.086, noise)
    thr = c.metric("output_throughput")
    assert thr.verdict == NO_DIFFERENCE and thr.low is not None and thr.low < 1.0
    assert thr.drift is not None
    per, adjusted = thr.drift.per_minute, thr.drift.adjusted
    assert per.high < 1.0 and per.low < 0.918 < per.high
    assert adjusted.low > 1.0 and adjusted.low < 1.39 < adjusted.high and adjusted.df == 5
    told = thr.drift.text(thr.label)
    assert told.startswith("drift: output tok/s fell 8.3 % a minute on both sides")
    assert "taken out: x1.387 [1.048, 1.835] (95 %, 5 df); not the verdict: compare" in told
    # Every metric's launches drifted alike here (the fake's latencies follow its throughput).
    assert c.metric("e2e_p99_ms").drift is not None and c.metric("memory_gib").drift is None
    stored = json.loads(json.dumps(c.to_results()))["metrics"][0]["drift"]
    assert stored["adjusted"]["low"] == pytest.approx(adjusted.low) and stored["df"] == 5
    page = comparison_report(_row(c, kind="compare"))
    assert page.provenance["drift"] == (
        "output tok/s x0.917 [0.863, 0.975] a minute on both sides; B/A with it taken out "
        "x1.387 [1.048, 1.835] (95 %, 5 df; not the verdict)"
    )
    assert page.unparsed == ""
    # Launches without the time they ended cannot be put in order: no drift is told.
    timeless = _drifting(17_000.0, 1.39, -0.086, noise, timed=False)
    assert timeless.metric("output_throughput").drift is None
    # A study's confirmation says it beside its verdict (tuner best, the study page, the API).
    confirmed = choose([_row(c)], Objective.THROUGHPUT)
    assert confirmed is not None and confirmed.caveats == (
        "the machine drifted: output tok/s x0.917 [0.863, 0.975] a minute on both sides; "
        "B/A with it taken out x1.387 [1.048, 1.835] (95 %, 5 df; not the verdict)",
    )


def test_a_decision_that_took_the_trend_out_says_so_beside_the_drift() -> None:
    noise = [-0.12, 0.08, 0.02, 0.10, 0.14, -0.24, -0.03, 0.06]
    a, b = _drifting_runs(17_000.0, 1.39, -0.086, noise)
    look = judge_look(DEFAULTS, a, CANDIDATE, b, Design.fixed_launches(4), None)
    thr = look.comparison.metric("output_throughput")
    # The verdict's interval is the trend fit's (the caveat's B/A at the same 95 %).
    assert thr.method == "trend taken out: no noise profile for this key" and thr.df == 5
    assert thr.verdict == BETTER and (thr.low, thr.high) == pytest.approx((1.048, 1.835), abs=5e-4)
    assert thr.drift is not None and thr.drift.in_verdict
    told = thr.drift.text(thr.label)
    assert "the interval above has this straight-line trend taken out" in told
    assert "not the verdict" not in told
    stored = json.loads(json.dumps(look.to_results()))
    assert stored["metrics"][0]["drift"]["in_verdict"] is True
    assert stored["decision"]["trend"] == "straight line over the launches' times"
    row = dataclasses.replace(_row(look.comparison), results={**stored, "kind": "confirmation"})
    confirmed = choose([row], Objective.THROUGHPUT)
    assert confirmed is not None and confirmed.caveats == (
        "the machine drifted: output tok/s x0.917 [0.863, 0.975] a minute on both sides (95 %); "
        "the verdict's interval has it taken out",
    )
    assert "a straight-line trend over the launches' times taken out" in look.design.text()
    # The surfaces say what the ratio is now: the fit's, at one time, not the geometric means'.
    page = comparison_report(row)
    assert page.ratio_of == "geometric means at one time (a straight-line trend taken out)"
    assert page.provenance["design"] == (
        "fixed, 4 launches a side, straight line over the launches' times taken out"
    )
    table = comparison_table({**row.results, "a_label": "A", "b_label": "B"})
    assert "change [95 % CI] of geometric means at one time" in table
    # A composite objective's score takes the trend out too (each side's launch times stored).
    assert stored["metrics"][0]["a"]["at"] == [r.finished_at for r in a]
    balanced = choose([row], Objective.BALANCED)
    assert balanced is not None and balanced.score_low > 1.0
    no_times = json.loads(json.dumps(stored))
    for m in no_times["metrics"]:
        m["a"].pop("at"), m["b"].pop("at")
    old_row = dataclasses.replace(row, results={**no_times, "kind": "confirmation"})
    plain = choose([old_row], Objective.BALANCED)
    assert plain is not None and plain.score_low < balanced.score_low
    # The design without the trend judges as before: the drift is left in, and said so.
    untrended = Design.fixed_launches(4, trend=False)
    assert "trend" not in untrended.text()
    old = judge_look(DEFAULTS, a, CANDIDATE, b, untrended, None).comparison.metric(thr.metric)
    assert old.verdict == NO_DIFFERENCE and old.drift is not None and not old.drift.in_verdict


def test_the_drift_interval_covers_as_stated_and_a_steady_machine_rarely_shows_one() -> None:
    # Launch noise of SD 0.07 (log), about the H200's 0.068 (docs/results/noise-h200.md).
    import numpy as np

    from tuner.scoring.caveats import drift

    rng = np.random.default_rng(20261206)
    reps, covered, missed, flagged = 2000, 0, 0, 0
    for _ in range(reps):
        e = rng.normal(0.0, 0.07, 8)
        order = np.arange(8)
        logs = 0.2 * (order % 2) - 0.08 * order + e  # B/A x1.22, falling 7.7 % a launch
        ends = 90.0 * order  # a launch every minute and a half
        a = [(float(t), float(np.exp(v))) for t, v in zip(ends[0::2], logs[0::2], strict=True)]
        b = [(float(t), float(np.exp(v))) for t, v in zip(ends[1::2], logs[1::2], strict=True)]
        found = drift(a, b)
        if found is None:
            missed += 1
            continue
        covered += found.adjusted.low <= np.exp(0.2) <= found.adjusted.high
        steady = [(t, v * np.exp(0.08 * t / 90.0)) for t, v in (*a, *b)]
        flagged += drift(steady[:4], steady[4:]) is not None
    # A drift this steep shows nearly every time; where it shows, B/A taken out of it is
    # covered 95 % of the time (the binomial SD over 2,000 repetitions is 0.5 %).
    assert missed / reps < 0.01
    assert 0.935 <= covered / (reps - missed) <= 0.965
    assert 0.03 <= flagged / reps <= 0.07  # a 5 % test of "no drift"


def test_launches_without_launch_noise_show_no_drift() -> None:
    """Values exactly constant per side (a deterministic runner) leave no residual: their
    slope, ±1e-15, is no drift, however its degenerate interval reads."""
    from tuner.scoring.caveats import drift

    a = [(60.0 * i, 5446.0) for i in range(5)]
    b = [(60.0 * i, 19916.0) for i in range(5, 8)]
    assert drift(a, b) is None


def test_the_drift_is_read_on_the_launches_times_so_other_arms_leave_no_gap() -> None:
    """A confirmation's D A B, B A D, ...: compared with D, B's launches and D's are not every
    launch of the run. Their times, not their ranks, give the change a minute."""
    import math

    from tuner.scoring.caveats import drift

    noise = [0.01, -0.02, 0.015, -0.01, 0.02, -0.015, 0.005, -0.005]
    order = "DABBADDABBAD"  # four rounds, a launch every minute
    d = [i for i, arm in enumerate(order) if arm == "D"]
    b = [i for i, arm in enumerate(order) if arm == "B"]
    value = {i: math.exp(-0.05 * i + 0.1 * (order[i] == "B")) for i in range(len(order))}
    found = drift(
        [(60.0 * i, value[i] * math.exp(e)) for i, e in zip(d, noise[:4], strict=True)],
        [(60.0 * i, value[i] * math.exp(e)) for i, e in zip(b, noise[4:], strict=True)],
    )
    assert found is not None
    assert found.per_minute.low < math.exp(-0.05) < found.per_minute.high
    assert found.adjusted.low < math.exp(0.1) < found.adjusted.high


def test_the_guard_reads_launches_along_a_drift_the_verdict_took_out() -> None:
    """A machine falling 15 % a launch spreads each side's launches beyond x2 over 8 launches:
    read as measured, they "disagree"; along the fitted line they agree, and the verdict (which
    took that line out) stands. A lone disturbed launch on a steady machine moves no line
    significantly and is still judged on its own value."""
    noise = [-0.12, 0.08, 0.02, 0.10, 0.14, -0.24, -0.03, 0.06]
    a, b = _drifting_runs(17_000.0, 1.39, -0.16, noise)
    untrended = judge_look(DEFAULTS, a, CANDIDATE, b, Design.fixed_launches(4, trend=False), None)
    raw = untrended.comparison.metric("output_throughput")
    assert raw.a_disagreement is not None and raw.verdict.startswith("inconclusive: launches of")
    look = judge_look(DEFAULTS, a, CANDIDATE, b, Design.fixed_launches(4), None)
    thr = look.comparison.metric("output_throughput")
    assert thr.drift is not None and thr.drift.in_verdict
    assert thr.a_disagreement is None and thr.b_disagreement is None and thr.verdict == BETTER
    steady = [0.02, -0.03, 0.01, 0.04, -0.9, 0.0, -0.02, 0.03]  # launch 5 (A) at x0.41
    a, b = _drifting_runs(17_000.0, 1.0, 0.0, steady)
    look = judge_look(DEFAULTS, a, CANDIDATE, b, Design.fixed_launches(4), None)
    thr = look.comparison.metric("output_throughput")
    assert thr.drift is None and thr.verdict.startswith("inconclusive: launches of A")


def test_a_sequential_look_takes_its_own_launches_alone_at_their_own_level() -> None:
    """The level simulated for t at the trend fit's few df (SequentialPlan.own_confidence)
    where an interval rests on the comparison's own launches alone, the Pocock level where a
    profile is pooled; stored and said with the design; a composite score reads it back."""
    from tuner.scoring.noise import Components, NoiseKey, NoiseProfile, trend_ratio_interval

    noise = [-0.12, 0.08, 0.02, 0.10, 0.14, -0.24, -0.03, 0.06]
    a, b = _drifting_runs(17_000.0, 1.39, -0.086, noise)
    design = Design.sequential(3, 4)
    plan = design.plan
    assert plan.own_confidence is not None and plan.own_confidence > plan.confidence
    base = judge_look(DEFAULTS, a, CANDIDATE, b, design, None).comparison
    values = base.metric("output_throughput")
    assert values.times is not None
    points = [
        list(zip(values.times[0], values.a_values, strict=True)),
        list(zip(values.times[1], values.b_values, strict=True)),
    ]

    def judged(profile: Components | None) -> tuple[float | None, float | None, str]:
        key = NoiseKey("GPU-1", "H100", "0.26.0", "m", "w", 3)
        prof = None if profile is None else NoiseProfile(key, {"output_throughput": profile}, 9)
        thr = judge_look(DEFAULTS, a, CANDIDATE, b, design, prof).comparison.metric(
            "output_throughput"
        )
        return thr.low, thr.high, thr.method

    def at(level: float, profile: Components | None) -> tuple[float, float]:
        found = trend_ratio_interval(*points, level, profile)
        assert found is not None
        return found.low, found.high

    low, high, method = judged(None)
    assert method == "trend taken out: no noise profile for this key"
    assert (low, high) == pytest.approx(at(plan.own_confidence, None))
    assert (low, high) != pytest.approx(at(plan.confidence, None))
    accepted = Components(0.02, 0.002, 0.02, 30, 60, 3, 36, 6)  # the launches' own spread
    low, high, method = judged(accepted)
    assert method == "pooled, trend taken out"
    assert (low, high) == pytest.approx(at(plan.confidence, accepted))
    contradicted = Components(0.0001, 0.0001, 0.0001, 20, 60, 3, 25, 4)  # SD 0.01
    low, high, method = judged(contradicted)
    assert method.endswith("the profile is not used")
    assert (low, high) == pytest.approx(at(plan.own_confidence, None))
    # Said and stored with the design; not for a fixed design or one without the trend.
    assert f"{plan.own_confidence * 100:.2f} % on its own launches alone" in design.text()
    assert design.to_dict()["per_look_confidence_own"] == plan.own_confidence
    untrended = Design.sequential(3, 4, trend=False)
    assert untrended.to_dict()["per_look_confidence_own"] is None
    assert untrended.plan.own_confidence is None  # not simulated where nothing reads it
    assert "own launches" not in untrended.text()
    assert Design.fixed_launches(4).to_dict()["per_look_confidence_own"] is None
    # A confirmation's composite score takes its trend-fitted interval at the stored level.
    stored = json.loads(
        json.dumps(judge_look(DEFAULTS, a, CANDIDATE, b, design, None).to_results())
    )
    assert stored["decision"]["per_look_confidence_own"] == plan.own_confidence
    row = dataclasses.replace(_row(_drifting(17_000.0, 1.39, -0.086, noise)))
    own = choose([dataclasses.replace(row, results={**stored, "kind": "confirmation"})],
                 Objective.BALANCED)  # fmt: skip
    normal = json.loads(json.dumps(stored))
    normal["decision"].pop("per_look_confidence_own")
    at_normal = choose([dataclasses.replace(row, results={**normal, "kind": "confirmation"})],
                       Objective.BALANCED)  # fmt: skip
    assert own is not None and at_normal is not None
    assert own.score_low < at_normal.score_low and own.score_high > at_normal.score_high
