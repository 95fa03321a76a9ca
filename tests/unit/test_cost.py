"""$ per 1M output tokens: the arithmetic, the price's source, the cost objective, the spec's
gpu_price and `tuner best`'s lines."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tests.unit.test_energy_display import _recommendation
from tuner.catalog.gpus import CATALOG_PRICES, PRICE_SOURCE, gpu_price
from tuner.domain import Estimate, MemoryUsage, Objective, ServingConfig, TrialResult, TrialStatus
from tuner.errors import SpecError, UsageError
from tuner.results import costs
from tuner.scoring import objectives as scoring
from tuner.scoring.cost import cost_estimate, slo_throughput, trial_cost, usd_per_million
from tuner.spec.study import load_spec


def _est(median: float, low: float, high: float) -> Estimate:
    return Estimate(median, low, high, (low, median, high))


def test_dollars_per_million_tokens() -> None:
    # 1,000 tok/s is 3.6M tokens an hour: at $3.60 an hour, $1 per million.
    assert usd_per_million(1000.0, 3.6) == pytest.approx(1.0)
    assert usd_per_million(2000.0, 3.6) == pytest.approx(0.5)
    assert usd_per_million(0.0, 3.6) == math.inf  # served nothing
    assert math.isnan(usd_per_million(math.nan, 3.6))
    with pytest.raises(ValueError):
        usd_per_million(1000.0, -1.0)


def test_a_cost_range_is_the_throughput_range_reversed() -> None:
    cost = cost_estimate(_est(1000.0, 800.0, 1200.0), 3.6)
    assert cost.median == pytest.approx(1.0)
    assert cost.low == pytest.approx(1 / 1.2) and cost.high == pytest.approx(1 / 0.8)
    assert cost.values == pytest.approx((1.25, 1.0, 1 / 1.2))


def test_the_slo_throughput_is_the_capacity_where_a_curve_was_measured() -> None:
    fixed = {"output_throughput": _est(900.0, 900.0, 900.0)}
    curve = {**fixed, "capacity_output_throughput": _est(600.0, 600.0, 600.0)}
    assert slo_throughput(fixed) == (fixed["output_throughput"], "output_throughput")
    assert slo_throughput(curve)[1] == "capacity_output_throughput"
    assert trial_cost(curve, 3.6) is not None
    assert trial_cost(curve, 3.6).median == pytest.approx(1000 / 600)  # type: ignore[union-attr]
    assert trial_cost({}, 3.6) is None


def _result(thr: float, p99: float = 100.0, capacity: float | None = None) -> TrialResult:
    metrics = {
        "output_throughput": _est(thr, thr, thr),
        "e2e_p99_ms": _est(p99, p99, p99),
        "ttft_p99_ms": _est(10.0, 10.0, 10.0),
        "itl_p99_ms": _est(5.0, 5.0, 5.0),
        "error_rate": _est(0.0, 0.0, 0.0),
    }
    if capacity is not None:
        metrics["capacity_output_throughput"] = _est(capacity, capacity, capacity)
    return TrialResult(
        config=ServingConfig(),
        status=TrialStatus.COMPLETE,
        metrics=metrics,
        memory=MemoryUsage(gpu_peak_bytes={"GPU-1": 10 * 1024**3}),
    )


def test_the_cost_objective_scores_the_inverse_cost_ratio() -> None:
    ref, cand = _result(1000.0), _result(1250.0, p99=400.0)
    price = 4.0
    ratio = usd_per_million(1000.0, price) / usd_per_million(1250.0, price)
    assert scoring.score(cand, Objective.COST, ref) == pytest.approx(ratio) == pytest.approx(1.25)
    # With a curve it is the capacity, not the fixed load's throughput, that is paid for.
    curve_ref, curve = _result(1000.0, capacity=500.0), _result(1000.0, capacity=750.0)
    assert scoring.score(curve, Objective.COST, curve_ref) == pytest.approx(1.5)
    # The SLO: the fixed load's margins, or the curve's capacity above 0.
    from tuner.domain import Slo

    slow = scoring.constraint_values(cand, Slo(e2e_p99_ms=200.0), Objective.COST)
    assert not scoring.is_feasible(slow)
    none_met = _result(1000.0, capacity=0.0)
    assert not scoring.is_feasible(scoring.constraint_values(none_met, Slo(), Objective.COST))
    assert scoring.is_feasible(scoring.constraint_values(curve, Slo(), Objective.COST))


def test_prices_name_their_source() -> None:
    default = gpu_price("h200")
    assert default is not None and default.catalog_default
    assert default.usd_per_hour == CATALOG_PRICES["h200"]
    assert "catalog default" in default.label() and "list-price assumption" in default.label()
    assert default.source == PRICE_SOURCE and "May 2026" in PRICE_SOURCE
    given = gpu_price("h200", 2.5)
    assert given is not None and not given.catalog_default and given.usd_per_hour == 2.5
    assert gpu_price("rtx4090") is None  # no price was read for it: none is made up
    assert gpu_price("cpu") is None
    with pytest.raises(UsageError, match="not a price"):
        gpu_price("h200", -1.0)
    assert costs.study_price("h100", {"gpu_price": 1.5}).usd_per_hour == 1.5  # type: ignore[union-attr]
    assert costs.study_price("h100", {}).catalog_default  # type: ignore[union-attr]
    assert costs.study_price("l4", None) is None and "--gpu-price" in costs.no_price("l4")


@pytest.mark.parametrize("price", [math.inf, math.nan, -0.5, 1e308, 1000.5])
def test_a_price_that_is_no_price_is_refused_everywhere(price: float, tmp_path: Path) -> None:
    """inf printed "$inf/GPU-hour", 1e308 a 300-digit figure; nan was refused for being below 0."""
    with pytest.raises(UsageError, match="not a price per GPU-hour: give 0 to 1,000"):
        gpu_price("h200", price)
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[study]\nmodel = "tiny-ernie"\ngpu_price = {price!r}\n')
    if math.isfinite(price):  # TOML spells the others inf and nan
        with pytest.raises(SpecError, match="not a price per GPU-hour"):
            load_spec(spec)


def test_a_study_price_is_labelled_as_the_studys_and_a_broken_one_says_so() -> None:
    stored = costs.study_price("h200", {"gpu_price": 2.5})
    assert stored is not None and stored.label() == "$2.50/GPU-hour (the study's price)"
    given = costs.study_price("h200", {"gpu_price": 2.5}, 1.25)
    assert given is not None and given.label() == "$1.25/GPU-hour (given price)"
    tiny = gpu_price("h200", 0.001)
    assert tiny is not None and tiny.label().startswith("$0.001/GPU-hour")  # not $0.00
    with pytest.raises(UsageError, match="stored gpu_price 'abc' is no price") as info:
        costs.study_price("h200", {"gpu_price": "abc"})
    assert "--gpu-price" in info.value.hint
    assert costs.study_price("h200", {"gpu_price": "abc"}, 3.0) is not None  # given: not read
    # A study stored before the input cap (the API took up to 1e6) still reads.
    dear = costs.study_price("h200", {"gpu_price": 5000.0})
    assert dear is not None and dear.usd_per_hour == 5000.0


def test_the_spec_takes_a_gpu_price_and_refuses_a_negative_one(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[study]\nmodel = "tiny-ernie"\ngpu = "h200"\ngpu_price = 3.25\n')
    assert load_spec(good).gpu_price == 3.25
    assert load_spec(good).to_dict()["gpu_price"] == 3.25  # stored with the study
    bad = tmp_path / "bad.toml"
    bad.write_text('[study]\nmodel = "tiny-ernie"\ngpu_price = -2\n')
    with pytest.raises(SpecError, match="gpu_price"):
        load_spec(bad)
    cost = tmp_path / "cost.toml"
    cost.write_text('[study]\nmodel = "tiny-ernie"\nobjective = "cost"\n')
    assert load_spec(cost).objective is Objective.COST


def test_best_shows_the_cost_and_the_price_it_assumed() -> None:
    price = gpu_price("h200")
    assert price is not None
    rec = _recommendation({"output_throughput": _est(1000.0, 900.0, 1100.0)})
    rec = type(rec)(
        **{
            **rec.__dict__,
            "cost": trial_cost(rec.metrics, price.usd_per_hour),
            "baseline_cost": trial_cost({"output_throughput": _est(500, 500, 500)}, 4.0),
            "price": price.label(),
        }
    )
    text = rec.render()
    assert "$/1M out tok: 1.11 [1.01, 1.23]   defaults 2.22 [2.22, 2.22]" in text
    assert "at $4.00/GPU-hour (catalog default: list-price assumption" in text
    unpriced = _recommendation({"output_throughput": _est(1000.0, 900.0, 1100.0)})
    unpriced = type(unpriced)(**{**unpriced.__dict__, "price": costs.no_price("l4")})
    assert "cost: no price per GPU-hour for l4" in unpriced.render()


def test_the_cost_objective_refuses_one_open_loop_load_point() -> None:
    """chat-heavy (Poisson arrivals at 60 req/s) or a trace at its own times: every
    configuration that keeps up serves the rate it is sent, so `--objective cost` ranked noise."""
    from tuner.compose import resolve_workload
    from tuner.spec.study import StudySpec

    spec = StudySpec(workload="chat-heavy").with_overrides(objective="cost")
    with pytest.raises(UsageError, match="one open-loop load") as info:
        resolve_workload(spec)
    assert "concurrency_ladder" in (info.value.hint or "")
    for fine in (
        StudySpec(workload="chat").with_overrides(objective="cost"),  # a closed loop
        dataclasses.replace(spec, workload_overrides={"concurrency_ladder": [4, 16]}),
        StudySpec(workload="chat-heavy"),  # another objective
    ):
        assert resolve_workload(fine).name in ("chat", "chat-heavy")


def test_best_says_a_cost_at_an_open_loop_load_is_an_upper_bound(tmp_path: Path) -> None:
    """`tuner best` printed price / the offered load as the $/1M of every configuration that
    kept up with it, with nothing to say it is not what the GPU can serve."""
    from typer.testing import CliRunner

    from tests.integration.test_launch_cli import insert_measured_study
    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 'open.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="poisson", gpu="h200", workload="chat-heavy")
    insert_measured_study(url, configs, name="closed", gpu="h200", workload="chat")
    shown = CliRunner().invoke(app, ["best", "poisson", "--storage", url])
    assert shown.exit_code == 0, shown.output
    assert "$/1M out tok: at most " in shown.stdout and "defaults at most " in shown.stdout
    assert "an upper bound: the server kept up with an open-loop load" in shown.stdout
    closed = CliRunner().invoke(app, ["best", "closed", "--storage", url])
    assert "$/1M out tok: " in closed.stdout and "at most" not in closed.stdout


def test_the_cost_objective_refuses_a_trace_at_its_own_times_at_any_cap(tmp_path: Path) -> None:
    """A concurrency ladder on a trace replayed at its own times only caps the requests in
    flight: every point is sent the same rate, and that passed as a load curve."""
    from tuner.compose import resolve_workload
    from tuner.spec.study import StudySpec

    trace = tmp_path / "even.jsonl"
    rows = (
        f'{{"prompt_tokens": 32, "output_tokens": 4, "arrival_s": {i / 10}}}' for i in range(40)
    )
    trace.write_text("\n".join(rows) + "\n")
    spec = StudySpec(workload=f"tuner:{trace}").with_overrides(objective="cost")
    for overrides in ({}, {"concurrency_ladder": [4, 16]}, {"arrival": "poisson"}):
        with pytest.raises(UsageError, match="one open-loop load"):
            resolve_workload(dataclasses.replace(spec, workload_overrides=overrides))
    closed = dataclasses.replace(spec, workload_overrides={"arrival": "closed"})
    assert not resolve_workload(closed).open_loop
    ladder = {"arrival": "poisson", "rate_ladder": [5.0, 50.0]}
    assert resolve_workload(dataclasses.replace(spec, workload_overrides=ladder)).rate_ladder


def test_a_ladder_the_server_kept_up_with_ranks_on_a_lower_bound(tmp_path: Path) -> None:
    """A rate ladder whose every rung was served measured only a floor of the capacity: the
    capacity and cost objectives ranked on it as if it were one, and `tuner best` said nothing."""
    from typer.testing import CliRunner

    from tests.integration.test_launch_cli import insert_ladder_study
    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    for objective in ("capacity", "cost", "balanced"):
        insert_ladder_study(url, name=objective, objective=objective)
    for objective in ("capacity", "cost"):
        shown = CliRunner().invoke(app, ["best", objective, "--storage", url])
        assert shown.exit_code == 0, shown.output
        text = " ".join(shown.stdout.split())
        assert f"caution: the {objective} ranking rests on a lower bound" in text
        assert "the rate_ladder's top rate, 2 req/s" in text
        assert "add rates above 2 req/s to the rate_ladder" in text
        assert "concurrency_ladder = [16, 64, 256]" in text  # or a closed-loop capacity
    other = CliRunner().invoke(app, ["best", "balanced", "--storage", url])
    assert other.exit_code == 0 and "ranking rests on" not in other.stdout  # not by throughput


def test_the_cost_objective_refuses_a_rate_ladder_of_one_rate() -> None:
    """rate_ladder = [4.0] is one open-loop load, as a request_rate is: it was let through."""
    from tuner.compose import resolve_workload
    from tuner.spec.study import StudySpec

    spec = StudySpec(workload="chat-heavy").with_overrides(objective="cost")
    for ladder in ([4.0], [4.0, 4.0]):
        one = dataclasses.replace(spec, workload_overrides={"rate_ladder": ladder})
        with pytest.raises(UsageError, match="one open-loop load"):
            resolve_workload(one)
    two = dataclasses.replace(spec, workload_overrides={"rate_ladder": [4.0, 64.0]})
    assert len(resolve_workload(two).load_points()) == 2


def test_a_capacity_read_at_a_ladder_the_server_kept_up_with_says_at_least(
    tmp_path: Path,
) -> None:
    """`tuner size` said "at least" of a capacity read at the top rate of a rate ladder the
    server kept up with; `tuner best`'s capacity line, its --json and `tuner trials` showed the
    same figure as the capacity."""
    import json

    from typer.testing import CliRunner

    from tests.integration.test_launch_cli import insert_ladder_study
    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    insert_ladder_study(url)

    def tuner(*args: str) -> str:
        done = CliRunner().invoke(app, [*args, "--storage", url], env={"COLUMNS": "300"})
        assert done.exit_code == 0, done.output
        return done.stdout

    # Trial #0 (the defaults, recommended) kept up with the top rate, 2 req/s; trial #1's
    # capacity is at 1 req/s, below a rate it served less at: bracketed, a capacity.
    text = " ".join(tuner("best", "ladder").split())
    assert "capacity: at least " in text and "out tok/s at 2 req/s defaults at least " in text
    assert "a lower bound: the server kept up with an open-loop load" in text
    assert "concurrency_ladder = [16, 64, 256]" in text
    assert "an upper bound: read at a capacity that is only a lower bound" in text
    rec = json.loads(tuner("best", "ladder", "--json"))["recommendation"]
    assert rec["capacity"].startswith("at least ") and rec["capacity_is_lower_bound"] is True
    assert rec["baseline_capacity_is_lower_bound"] is True
    table = tuner("trials", "ladder")
    (base,) = [line for line in table.splitlines() if "(baseline)" in line]
    (other,) = [line for line in table.splitlines() if "max_num_seqs=64" in line]
    assert "at least " in base and "out tok/s at 2 req/s" in base
    assert "at least" not in other and "out tok/s at 1 req/s" in other
    note = " ".join(table.split())
    assert "at least: the capacity of #0 is only a lower bound: the server kept up" in note
    listed = json.loads(tuner("trials", "ladder", "--json"))
    assert [t["capacity_is_lower_bound"] for t in listed] == [True, False]


def test_the_capacity_advice_names_only_workloads_that_saturate_a_server() -> None:
    """The advice under a bound (and the cost objective's refusal) named chat, rag and code,
    closed loops of 8 to 16 streams: their throughput is a GPU's at that concurrency, not its
    capacity, so a user who followed it sized from a figure far below what one GPU serves."""
    import re

    from tuner.load import WORKLOADS
    from tuner.results.costs import MEASURE_CAPACITY

    named = [w for w in WORKLOADS if re.search(rf"\b{re.escape(w)}\b", MEASURE_CAPACITY)]
    assert named, MEASURE_CAPACITY
    for name in named:
        load = WORKLOADS[name]
        assert load.request_rate is None and (load.concurrency or 0) >= 256, name
