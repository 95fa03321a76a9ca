"""bench/plan_replay.py's machinery on a hand-made table: the additive surface, the flagging of
modelled evaluations, and that a plan whose first lever pays x1.5 reaches it sooner than
random search over the full space."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import plan_replay as pr  # noqa: E402

from bench.replay import Launch, Row, Table  # noqa: E402
from tuner.domain import Objective, Regime, ServingConfig, Slo  # noqa: E402
from tuner.domain.config import Scalar  # noqa: E402
from tuner.scoring.regime import Diagnosis  # noqa: E402
from tuner.study.plan import make_plan  # noqa: E402


def _launch(tok_s: float, seconds: float = 120.0) -> Launch:
    metrics = {
        "output_throughput": tok_s,
        "memory_gib": 131.5,
        "e2e_p99_ms": 5000.0,
        "ttft_p99_ms": 1000.0,
        "itl_p99_ms": 40.0,
        "error_rate": 0.0,
    }
    return Launch(metrics, (metrics,), (10.0,), 60.0, seconds - 60.0)


def _table(rows: list[tuple[dict[str, Scalar], float]]) -> Table:
    made = tuple(
        Row(ServingConfig(extra=extra), number, (_launch(tok_s),))
        for number, (extra, tok_s) in enumerate(rows)
    )
    return Table(
        name="synthetic",
        study="synthetic",
        objective=Objective.THROUGHPUT,
        slo=Slo(e2e_p99_ms=60000.0),
        memory_ceiling_gib=141.0,
        knobs=(),
        rows=made,
        baseline=made[0],
        skipped=0,
    )


def _args(**over: float) -> argparse.Namespace:
    values: dict[str, object] = dict(
        launch_sd=0.068, trial_s=0.0, prior_sd=0.0, target=0.05, trials=16, budget=40
    )
    values.update(sampler="untried", repeats="skip")  # the study loop's, as the CLI's defaults
    values.update(over)
    return argparse.Namespace(**values)


def _bench(table: Table, **over: float) -> pr.Bench:
    flags = pr.shipped("0.26.0")
    assert flags is not None
    card, full = pr.spaces("ernie-0.3b", "h200", "throughput-256", {}, flags)
    return pr.Bench(table, card, full, _args(**over))


def test_the_surface_splits_a_two_knob_row_and_adds_effects() -> None:
    table = _table(
        [({}, 10000.0), ({"stream_interval": 8}, 15000.0),
         ({"stream_interval": 4, "async_scheduling": True}, 12100.0)]
    )  # fmt: skip
    surface = pr.Surface(table)
    thr = pr.METRICS.index("output_throughput")
    assert math.isclose(surface.effects[("stream_interval", 8)][thr], math.log(1.5))
    half = math.log(1.21) / 2  # one row changed two knobs: minimum norm splits it
    assert math.isclose(surface.effects[("async_scheduling", True)][thr], half, rel_tol=1e-9)
    measured, was = surface.numbers(ServingConfig(extra={"stream_interval": 8}))
    assert was and measured is not None and math.isclose(measured["output_throughput"], 15000.0)
    both = ServingConfig(extra={"stream_interval": 8, "async_scheduling": True})
    modelled, was = surface.numbers(both)
    assert not was and modelled is not None
    assert math.isclose(modelled["output_throughput"], 10000.0 * 1.5 * math.exp(half))
    # A knob value no row measured moves nothing, unless a prior is given.
    other = ServingConfig(max_num_seqs=512)
    assert math.isclose(surface.numbers(other)[0]["output_throughput"], 10000.0)  # type: ignore[index]
    drawn = pr.Surface(table, prior=lambda f: 0.2)
    assert math.isclose(
        drawn.numbers(other)[0]["output_throughput"],  # type: ignore[index]
        10000.0 * math.exp(0.2),
    )


def test_a_knob_set_to_the_value_vllm_resolves_anyway_is_the_same_server() -> None:
    # vLLM 0.26.0 declares async scheduling None and turns it on on a GPU: a row that set it
    # measured stream_interval=4 alone, so the whole gain is the stream interval's.
    table = _table(
        [({}, 10000.0), ({"stream_interval": 4, "async_scheduling": True}, 12100.0)]
    )  # fmt: skip
    resolved = pr.resolved_defaults(_bench(table).card)
    assert resolved["async_scheduling"] is True
    surface = pr.Surface(table, resolved=resolved)
    thr = pr.METRICS.index("output_throughput")
    assert set(surface.effects) == {("stream_interval", 4)}
    assert math.isclose(surface.effects[("stream_interval", 4)][thr], math.log(1.21))
    alone, was = surface.numbers(ServingConfig(extra={"stream_interval": 4}))
    assert was and alone is not None and math.isclose(alone["output_throughput"], 12100.0)
    # Without the rule the same row splits its gain with a knob that changed nothing.
    assert ("async_scheduling", True) in pr.Surface(table).effects


def test_a_lever_that_pays_x1_5_is_found_by_the_plan_sooner_than_by_random_search() -> None:
    bench = _bench(_table([({}, 10000.0), ({"stream_interval": 8}, 15000.0)]))
    diagnosis = Diagnosis(Regime.FRONTEND, ("API server at 1.00 of a core",), {}, 256)
    plan = make_plan(diagnosis, bench.card, Objective.THROUGHPUT)
    assert plan is not None and plan.knobs[0].knob == "stream_interval"
    _, best, measured = pr.Surface(bench.table).best(bench.full)
    assert measured and math.isclose(best.score or 0.0, 1.5, rel_tol=1e-6)
    for seed in (0, 1, 2):
        planned = pr.run_plan(bench, plan, seed)
        rand = pr.run_random(bench, seed, defaults_first=False)
        # Defaults, then the recipe (stream_interval=8 with api_server_count=4; no max_num_seqs
        # above the H200's 1,024 is offered, and async scheduling is vLLM 0.26's own default):
        # the target at the second trial. The recipe and the leave-one-out without
        # stream_interval were never measured as such (modelled); the one without
        # api_server_count is stream_interval=8 alone, the table's own row.
        assert planned.found_trials == 2 and planned.trials == 4
        assert planned.modelled == 2
        assert planned.found_s is not None and math.isclose(planned.found_s, 240.0)
        # In trials; not always in GPU-time: a draw the rules refuse costs random search
        # nothing (the study prunes it before launch), and one valid draw may hit.
        assert rand.found_trials is None or rand.found_trials > planned.found_trials
        assert rand.modelled + rand.pruned <= rand.trials


def test_a_right_prediction_measures_the_recipe_first_and_a_wrong_one_pays_a_launch() -> None:
    bench = _bench(_table([({}, 10000.0), ({"stream_interval": 8}, 15000.0)]))
    frontend = Diagnosis(Regime.FRONTEND, ("API server at 1.00 of a core",), {}, 256)
    plan = make_plan(frontend, bench.card, Objective.THROUGHPUT)
    assert plan is not None
    wrong = make_plan(
        Diagnosis(Regime.DECODE, ("forced",), {}, 256), bench.card, Objective.THROUGHPUT
    )
    assert wrong is not None and wrong.knobs
    for seed in (0, 1, 2):
        # Right: the recipe at the first trial, and not measured again by the screening.
        right = pr.run_plan(bench, plan, seed, predicted=plan)
        assert right.found_trials == 1 and right.trials == 4
        assert right.found_s is not None and math.isclose(right.found_s, 120.0)
        assert set(right.plan["effects"]) == {k.knob for k in plan.knobs}
        # Wrong: the decode recipe, then the defaults, then the frontend plan in full.
        missed = pr.run_plan(bench, plan, seed, predicted=wrong)
        assert missed.found_trials == 3 and missed.trials == 5
        assert missed.found_s is not None and math.isclose(missed.found_s, 360.0)


def test_summaries_count_censored_runs_and_the_ratio_has_an_interval() -> None:
    accounts = [pr.Account("plan", s, found_s=60.0 * (s + 1), found_trials=s + 1) for s in range(9)]
    accounts.append(pr.Account("plan", 9))  # never found
    summary = pr.summarise(accounts, budget=40, level=0.95)
    assert summary["never_within_budget"] == 1
    assert summary["gpu_min_to_target"]["median"] == 5.0  # the lower median, in minutes
    low, high = summary["gpu_min_to_target"]["ci"]
    assert low is not None and low <= 5.0 and (high is None or high >= 5.0)
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 4.0, 8.0])
    assert float(pr._ratio_of_medians(a, b)) == 0.5
