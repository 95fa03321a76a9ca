"""Fleet sizing (tuner.results.sizing): GPUs for a rate from a capacity and its range, the
dollars, an SLO other than the study's, and `tuner size` over stored studies on two GPUs."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.test_launch_cli import insert_ladder_study, insert_measured_study
from tests.unit.test_report_study import _study, _trial
from tuner.catalog.gpus import CATALOG_PRICES
from tuner.cli.app import app
from tuner.domain import LatencyStats, Objective, ServingConfig, Slo, WindowMetrics
from tuner.errors import UsageError
from tuner.load import trial_metrics
from tuner.load.workloads import get_workload
from tuner.results.sizing import REQ, TOK, Rate, fleet_size, gpus_for, parse_rate
from tuner.scoring.objectives import objective_values
from tuner.study import CONFIRM_NUMBER_BASE
from tuner.testing.fake_runner import FakeRunner


def _lat(p99: float) -> LatencyStats:
    return LatencyStats(count=10, mean=p99 / 2, p50=p99 / 2, p90=p99, p99=p99, max=p99)


def _w(concurrency: int, req_s: float, p99_ms: float, tokens_per_req: int = 100) -> WindowMetrics:
    return WindowMetrics(
        duration_s=10.0,
        requests_ok=int(req_s * 10),
        requests_failed=0,
        prompt_tokens=1000,
        output_tokens=int(req_s * 10 * tokens_per_req),
        request_throughput=req_s,
        output_throughput=req_s * tokens_per_req,
        total_throughput=req_s * tokens_per_req + 100,
        ttft_ms=_lat(p99_ms / 10),
        itl_ms=_lat(5.0),
        e2e_ms=_lat(p99_ms),
        concurrency=concurrency,
    )


# A curve of three points, three windows each: 8, 16 and 32 streams.
CURVE = (
    *(_w(8, r, 800.0) for r in (4.0, 4.2, 4.4)),
    *(_w(16, r, 1500.0) for r in (7.5, 8.0, 8.4)),
    *(_w(32, r, 4000.0) for r in (11.0, 12.0, 12.5)),
)


def test_gpus_for_a_rate() -> None:
    assert gpus_for(10.0, 2.5) == 4  # exactly 4, not 4.000000001 -> 5
    assert gpus_for(10.0, 3.0) == 4
    assert gpus_for(0.5, 5.0) == 1
    assert gpus_for(10.0, 0.0) is None and gpus_for(10.0, math.nan) is None


def test_rates_parse_with_their_unit() -> None:
    assert parse_rate("20") == Rate(20.0, REQ)
    assert parse_rate("20req/s") == Rate(20.0, REQ)
    assert parse_rate(" 5000 tok/s") == Rate(5000.0, TOK)
    assert parse_rate("1e9") == Rate(1e9, REQ)
    assert parse_rate("5.") == Rate(5.0, REQ) and parse_rate(".5 tok/s") == Rate(0.5, TOK)
    # 1e309 is infinity: it crashed the GPU count; 1e308 gave a 300-digit one
    for bad in ("0", "-3", "fast", "20 rps", "1e309", "1e308", "2e9tok/s"):
        with pytest.raises(UsageError, match="positive rate"):
            parse_rate(bad)


def _sized(rate: Rate, slo: Slo | None = None, study_slo: dict[str, Any] | None = None) -> Any:
    study = _study(gpu="h200", slo=study_slo or {"e2e_p99_ms": 2000.0})
    trial = _trial(3, 800.0, windows=CURVE)
    return fleet_size(study, trial, ("--max-num-seqs", "64"), rate, slo=slo)


def test_the_count_takes_the_low_end_of_the_capacity_range() -> None:
    sized = _sized(Rate(30.0, REQ))
    # The study's SLO (E2E P99 <= 2 s) keeps 16 streams: 7.5, 8.0, 8.4 req/s per GPU.
    assert "16 streams" in sized.basis
    c = sized.capacity
    assert (c.median, c.low, c.high) == (8.0, 7.5, 8.4)
    assert sized.gpus == math.ceil(30 / 7.5) == 4
    assert sized.gpus_at_median == math.ceil(30 / 8.0) == 4
    assert sized.gpus_at_high == math.ceil(30 / 8.4) == 4
    wide = _sized(Rate(32.0, REQ))
    assert (wide.gpus, wide.gpus_at_median, wide.gpus_at_high) == (5, 4, 4)
    price = CATALOG_PRICES["h200"]
    assert wide.usd_per_hour == pytest.approx(5 * price)
    # 32 req/s of 100 output tokens: 3,200 tok/s, 11.52M tokens an hour.
    assert sized.tokens_per_request == pytest.approx(100.0)
    assert wide.usd_per_million == pytest.approx(5 * price / (3200 * 3600) * 1e6)
    text = wide.render()
    assert "5 (rate / the low end of the capacity range; 4 at the median" in text
    assert "not a confidence interval" in text and "catalog default" in text


def test_the_flags_line_is_shell_quoted() -> None:
    study = _study(gpu="h200", slo={"e2e_p99_ms": 2000.0})
    trial = _trial(3, 800.0, windows=CURVE)
    sized = fleet_size(study, trial, ("--code-revision", "p|q\nr"), Rate(30.0, REQ))
    assert "  flags: --code-revision 'p|q\nr'\n" in sized.render()


def test_a_rate_in_tokens_counts_the_output_tokens() -> None:
    sized = _sized(Rate(2000.0, TOK))
    assert sized.capacity.low == 750.0  # 7.5 req/s x 100 tokens
    assert sized.gpus == 3  # 2000 / 750 = 2.67
    assert sized.usd_per_million == pytest.approx(3 * CATALOG_PRICES["h200"] / 7.2)


def test_a_stricter_slo_reads_the_capacity_again_and_says_so() -> None:
    sized = _sized(Rate(30.0, REQ), slo=Slo(e2e_p99_ms=1000.0))
    assert "8 streams" in sized.basis and sized.capacity.low == 4.0
    assert sized.gpus == 8 and sized.slo_source == "given"
    assert any("re-read from its windows" in n for n in sized.notes)
    none = _sized(Rate(30.0, REQ), slo=Slo(e2e_p99_ms=100.0))
    assert none.gpus is None and none.usd_per_hour is None
    assert "none can serve it" in none.render()


def test_a_study_without_price_says_so() -> None:
    study = _study(gpu="l4", slo={})
    sized = fleet_size(study, _trial(1, 800.0, windows=CURVE), (), Rate(10.0, REQ))
    assert sized is not None and sized.price is None and sized.usd_per_hour is None
    assert "no price per GPU-hour for l4" in sized.render()
    given = dataclasses.replace(study, spec={"gpu_price": 0.8})
    priced = fleet_size(given, _trial(1, 800.0, windows=CURVE), (), Rate(10.0, REQ))
    assert priced is not None and priced.gpus is not None
    assert priced.usd_per_hour == pytest.approx(0.8 * priced.gpus)


def test_tuner_size_compares_two_gpu_profiles(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'size.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="m-h100", gpu="h100", workload="chat")
    insert_measured_study(url, configs, name="m-h200", gpu="h200", workload="chat")
    run = CliRunner().invoke(
        app, ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url, "--json"]
    )
    assert run.exit_code == 0, run.output
    sizes = json.loads(run.stdout)["sizes"]
    assert {s["gpu"] for s in sizes} == {"h100", "h200"}
    for s in sizes:
        assert s["gpus"] == math.ceil(5 / s["capacity"]["low"])
        assert s["usd_per_hour"] == pytest.approx(s["gpus"] * CATALOG_PRICES[s["gpu"]])
    text = CliRunner().invoke(
        app, ["size", "--model", "tiny-ernie", "--rate", "5", "--gpu", "h200", "--storage", url]
    )
    assert text.exit_code == 0 and "tiny-ernie on h200" in text.stdout
    assert "h100" not in text.stdout
    missing = CliRunner().invoke(
        app, ["size", "--model", "no-such-model", "--rate", "5", "--storage", url]
    )
    # A name no study has is a typo (exit 2, naming what there is), not "nothing measured".
    assert isinstance(missing.exception, UsageError)
    said = f"{missing.exception.message} {missing.exception.hint}"
    there = "(there are: tiny-ernie/h100/chat, tiny-ernie/h200/chat)"
    assert f"no study of no-such-model {there}" in said
    assert "check --model, --gpu and --workload" in said
    chatty = ["size", "--model", "tiny-ernie", "--rate", "5", "--workload", "chatty"]
    typo = CliRunner().invoke(app, [*chatty, "--storage", url])
    assert isinstance(typo.exception, UsageError)
    assert "no study of tiny-ernie with workload chatty" in typo.exception.message
    # The message names the filters it applied, and says when emulated studies exist.
    insert_measured_study(url, configs, name="e-a10g", gpu="a10g", workload="rag", emulated=True)
    other = CliRunner().invoke(
        app, ["size", "--model", "tiny-ernie", "--rate", "5", "--workload", "rag", "--storage", url]
    )
    assert other.exit_code == 1 and other.stdout == ""
    assert other.stderr.startswith("no measured study of tiny-ernie with workload rag to size")
    assert "emulated ones can be sized: add --emulated" in other.stderr


def test_one_gpu_price_is_refused_for_several_gpu_profiles(tmp_path: Path) -> None:
    """`tuner size --gpu h200 --gpu a100-80g --gpu-price 2.5` (the README's example) priced
    every profile at $2.50/GPU-hour, so their costs differed by GPU count alone."""
    url = f"sqlite:///{tmp_path / 'two-prices.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="m-h100", gpu="h100", workload="chat")
    insert_measured_study(url, configs, name="m-h200", gpu="h200", workload="chat")
    size = ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url, "--gpu-price", "2.5"]
    for gpus in ([], ["--gpu", "h100", "--gpu", "h200"]):  # every profile measured, or named
        refused = CliRunner().invoke(app, [*size, *gpus])
        assert isinstance(refused.exception, UsageError), refused.output
        assert "would price h100, h200 alike" in refused.exception.message
        assert "--gpu PROFILE --gpu-price USD" in refused.exception.hint
    one = CliRunner().invoke(app, [*size, "--gpu", "h200", "--json"])
    assert one.exit_code == 0, one.output
    (sized,) = json.loads(one.stdout)["sizes"]
    assert sized["usd_per_hour"] == pytest.approx(2.5 * sized["gpus"])
    # A study on another profile with nothing measured (queued, say) prices nothing: the one
    # price is for the one profile sized. It was refused (a 400 on GET /v1/sizing).
    insert_measured_study(url, [], name="queued-l4", gpu="l4", workload="chat")
    both = CliRunner().invoke(app, [*size, "--gpu", "h200", "--gpu", "l4", "--json"])
    assert both.exit_code == 0, both.output
    assert [s["gpu"] for s in json.loads(both.stdout)["sizes"]] == ["h200"]


def test_the_reading_commands_take_the_price_their_hint_names(tmp_path: Path) -> None:
    """A CPU study has no catalog price: `tuner best` and `tuner size` say to give one with
    --gpu-price, and both commands take it (labelled as given, the figures at that price)."""
    url = f"sqlite:///{tmp_path / 'price.db'}"
    insert_measured_study(url, [ServingConfig(), ServingConfig(max_num_seqs=64)], name="c")
    cli = CliRunner()
    unpriced = cli.invoke(app, ["best", "c", "--storage", url])
    assert unpriced.exit_code == 0, unpriced.output
    assert "no price per GPU-hour for cpu" in unpriced.stdout and "--gpu-price" in unpriced.stdout
    priced = cli.invoke(app, ["best", "c", "--gpu-price", "2", "--storage", url, "--json"])
    assert priced.exit_code == 0, priced.output
    rec = json.loads(priced.stdout)["recommendation"]
    assert rec["price"] == "$2.00/GPU-hour (given price)" and rec["cost"]["median"] > 0
    size = ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url, "--json"]
    sized = json.loads(cli.invoke(app, [*size, "--gpu-price", "2"]).stdout)["sizes"][0]
    assert sized["usd_per_hour"] == pytest.approx(2 * sized["gpus"])
    assert json.loads(cli.invoke(app, size).stdout)["sizes"][0]["usd_per_hour"] is None
    refused = cli.invoke(app, [*size, "--gpu-price", "-1"])
    assert refused.exit_code == 2 and "not a price per GPU-hour" in refused.output


def test_a_missed_slo_keeps_the_window_count_and_an_unrecorded_load_is_named(
    tmp_path: Path,
) -> None:
    """ "range over 1 windows": a capacity of 0 (the SLO missed) was counted as one window
    whatever was measured; an older tuner's windows (no load level) read "None streams"."""
    from tuner.load.curve import point_label

    url = f"sqlite:///{tmp_path / 'slo.db'}"
    insert_measured_study(url, [ServingConfig(), ServingConfig(max_num_seqs=64)], name="s")
    size = ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url, "--json"]
    sized = json.loads(CliRunner().invoke(app, size).stdout)["sizes"][0]
    missed = CliRunner().invoke(app, [*size, "--slo", "ttft_p99=0.001ms"])
    (answer,) = json.loads(missed.stdout)["sizes"]
    assert answer["gpus"] is None and answer["capacity"]["median"] == 0
    assert answer["windows"] == sized["windows"] > 1
    assert point_label(None, None) == "a load level not recorded"
    assert point_label(16, None) == "16 streams" and point_label(None, 4.0) == "4 req/s"


def test_tuner_size_fails_when_no_configuration_serves_the_rate(tmp_path: Path) -> None:
    """Every study sized and none serves the rate within the SLO: the answers are printed, and
    the exit status is 1 with a line that says so (0 read as an answer to a script)."""
    url = f"sqlite:///{tmp_path / 'none.db'}"
    insert_measured_study(url, [ServingConfig(), ServingConfig(max_num_seqs=64)], name="s")
    size = ["size", "--model", "tiny-ernie", "--rate", "5", "--storage", url]
    missed = CliRunner().invoke(app, [*size, "--slo", "ttft_p99=0.001ms"])
    assert missed.exit_code == 1, missed.output
    assert "none can serve it" in missed.stdout
    assert "no measured trial of the studies sized serves 5 req/s within the SLO" in missed.stderr
    as_json = CliRunner().invoke(app, [*size, "--slo", "ttft_p99=0.001ms", "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["sizes"][0]["gpus"] is None
    served = CliRunner().invoke(app, size)
    assert served.exit_code == 0 and served.stderr == ""


Measured = Sequence[tuple[ServingConfig, Sequence[WindowMetrics]]]


def _insert_trials(url: str, trials: Measured, confirm: Measured = ()) -> None:
    """A finished balanced study "s" of chat on h200 whose trials measured ``windows``, and the
    launches of its confirmation (``confirm``), numbered as the confirmation numbers them."""
    repo = insert_measured_study(url, [], name="s", gpu="h200", workload="chat")
    shape = get_workload("chat").replace(requests_per_window=8, windows=3)
    searched = [(n, "search", *trial) for n, trial in enumerate(trials)]
    again = [(CONFIRM_NUMBER_BASE + n, "confirm", *trial) for n, trial in enumerate(confirm)]
    for number, phase, config, windows in [*searched, *again]:
        metrics = trial_metrics(shape, windows, None)
        run = FakeRunner().run(config, shape)
        result = dataclasses.replace(run, windows=tuple(windows), metrics=metrics)
        values = objective_values(result, memory_ceiling_gib=64.0, objective=Objective.BALANCED)
        trial_id = repo.start_trial("s", number, config, phase, is_baseline=config.is_default())
        repo.finish_trial(trial_id, result, 1.0, values)


def test_tuner_size_sizes_the_best_trial_that_meets_the_slo_given(tmp_path: Path) -> None:
    """The recommendation (30 req/s at an E2E P99 of 1.2 s) misses --slo e2e_p99=1000ms, and
    trial #1 (8 req/s at 0.6 s) meets it: `tuner size` re-read only the recommendation, said
    "no measured configuration serves the rate within the SLO" and exited 1."""
    url = f"sqlite:///{tmp_path / 'slo-given.db'}"
    fast = [_w(64, r, 1200.0) for r in (29.0, 30.0, 31.0)]
    quick = [_w(16, r, 600.0) for r in (7.5, 8.0, 8.5)]
    _insert_trials(url, [(ServingConfig(), fast), (ServingConfig(max_num_seqs=16), quick)])
    size = ["size", "--model", "tiny-ernie", "--rate", "20", "--storage", url]
    mine = CliRunner().invoke(app, [*size, "--slo", "e2e_p99=1000ms", "--json"])
    assert mine.exit_code == 0, mine.output
    (answer,) = json.loads(mine.stdout)["sizes"]
    assert answer["trial_number"] == 1 and "--max-num-seqs 16" in " ".join(answer["flags"])
    assert answer["gpus"] == math.ceil(20 / 7.5) and answer["capacity"]["median"] == 8.0
    assert any(
        "recommendation, trial #0, has no capacity under the SLO" in n for n in answer["notes"]
    )
    own = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"][0]
    assert own["trial_number"] == 0 and own["gpus"] == 1  # no SLO of its own: the recommendation
    none = CliRunner().invoke(app, [*size, "--slo", "e2e_p99=100ms"])
    assert none.exit_code == 1 and "trial #0" in none.stdout
    assert "none of the study's 2 measured trials meets the SLO" in " ".join(none.stdout.split())
    assert "no measured trial of the studies sized serves 20 req/s within the SLO" in none.stderr


def test_a_confirmed_configuration_is_sized_from_every_launch_of_its_confirmation(
    tmp_path: Path,
) -> None:
    """Sizing read the search's one launch of the recommendation (10 req/s, picked for being
    high) where its confirmation had launched it three times more, at 8, 6 and 7 req/s."""
    url = f"sqlite:///{tmp_path / 'confirmed.db'}"
    seqs = ServingConfig(max_num_seqs=16)
    searched = [(ServingConfig(), [_w(16, r, 600.0) for r in (2.9, 3.0, 3.1)]),
                (seqs, [_w(16, r, 600.0) for r in (9.9, 10.0, 10.1)])]  # fmt: skip
    confirm = [(seqs, [_w(16, r + d, 600.0) for d in (-0.1, 0.0, 0.1)]) for r in (8.0, 6.0, 7.0)]
    _insert_trials(url, searched, confirm)
    size = ["size", "--model", "tiny-ernie", "--rate", "20", "--storage", url]
    (answer,) = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"]
    assert answer["trial_number"] == 1
    assert answer["capacity"]["median"] == pytest.approx(7.0)
    assert answer["capacity"]["low"] == pytest.approx(5.9)
    assert answer["capacity"]["high"] == pytest.approx(8.1)
    assert answer["gpus"] == math.ceil(20 / 5.9)
    assert answer["launches"] == [CONFIRM_NUMBER_BASE + n for n in range(3)]
    assert answer["windows"] == 9
    text = " ".join(CliRunner().invoke(app, size).stdout.split())
    assert "each launch's median: #100000 8, #100001 6, #100002 7;" in text
    assert "range over 9 windows of the confirmation's 3 launches" in text


def test_a_confirmation_launch_that_missed_the_slo_is_named_not_pooled_as_zeros(
    tmp_path: Path,
) -> None:
    """One of three confirmation launches missed the SLO (1,100 ms against 1,000): its zeros
    made the pooled low end 0, and sizing called the recommendation unable to meet the SLO and
    sized vLLM's defaults at 7 GPUs instead of the recommendation at 3."""
    url = f"sqlite:///{tmp_path / 'missed.db'}"
    seqs = ServingConfig(max_num_seqs=16)
    searched = [(ServingConfig(), [_w(16, r, 600.0) for r in (2.9, 3.0, 3.1)]),
                (seqs, [_w(16, r, 600.0) for r in (9.9, 10.0, 10.1)])]  # fmt: skip
    confirm = [(seqs, [_w(16, r + d, ms) for d in (-0.1, 0.0, 0.1)])
               for r, ms in ((8.0, 600.0), (7.0, 600.0), (9.0, 1100.0))]  # fmt: skip
    _insert_trials(url, searched, confirm)
    size = ["size", "--model", "tiny-ernie", "--rate", "20", "--slo", "e2e_p99=1000ms"]
    size += ["--storage", url]
    (answer,) = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"]
    assert answer["trial_number"] == 1 and answer["gpus"] == math.ceil(20 / 6.9)
    assert answer["capacity"]["low"] == pytest.approx(6.9)
    assert answer["launches"] == [CONFIRM_NUMBER_BASE, CONFIRM_NUMBER_BASE + 1]
    assert "#100002 left out: its one load point" in answer["basis"]
    assert "missed the SLO" in answer["basis"]
    assert "1 of the confirmation's 3 launches had no capacity under the SLO" in " ".join(
        answer["notes"]
    )


def _open(concurrency: int, req_s: float, p99_ms: float, rate: float | None) -> WindowMetrics:
    return dataclasses.replace(_w(concurrency, req_s, p99_ms), request_rate=rate)


# Poisson arrivals at 4, 8 and 12 req/s: the server kept up at every rate.
KEPT_UP = tuple(_open(64, r, 800.0, r) for r in (4.0, 8.0, 12.0) for _ in range(3))
TIMED = {"workload_fingerprint": {"arrival": "poisson", "mean_rate": 8.5, "concurrency": 64}}


def test_an_open_loop_load_the_server_kept_up_with_is_only_a_lower_bound() -> None:
    """A trace's arrivals (or Poisson ones) at 10 req/s measured 10 req/s: `tuner size` called
    that the GPU's capacity ("64 streams"), and its GPU count and $/1M an answer."""
    study = _study(gpu="h200", slo={}, spec=TIMED)
    one = tuple(_open(64, r, 800.0, None) for r in (9.0, 10.0, 11.0))
    sized = fleet_size(study, _trial(1, 800.0, windows=one), (), Rate(30.0, REQ))
    assert sized is not None and sized.capacity_is_lower_bound and sized.gpus == 4
    assert "64 streams" not in sized.basis
    assert "Poisson arrivals at the trace's mean rate, at most 64 in flight" in sized.basis
    text = sized.render()
    assert "capacity per GPU: at least 10 req/s" in text and "GPUs for 30 req/s: at most 4" in text
    assert "cost: at most $" in text and "at most $" in text.split("per 1M")[0]
    assert "the capacity is a lower bound" in text and "concurrency_ladder" in text
    # A Poisson rate (recorded in the windows, no fingerprint needed) is open loop too.
    rate = fleet_size(_study(slo={}), _trial(1, 800.0, windows=KEPT_UP[-3:]), (), Rate(30, REQ))
    assert rate is not None and rate.capacity_is_lower_bound
    # A rate ladder whose top point met the SLO never saturated: a lower bound as well; one
    # whose top point missed it brackets the capacity, as a closed loop measures one.
    ladder = fleet_size(_study(slo={}), _trial(1, 800.0, windows=KEPT_UP), (), Rate(30, REQ))
    assert ladder is not None and ladder.capacity_is_lower_bound
    missed = (*KEPT_UP[:6], *(_open(64, 9.0, 5000.0, 12.0) for _ in range(3)))
    bracketed = fleet_size(
        _study(slo={"e2e_p99_ms": 2000.0}), _trial(1, 800.0, windows=missed), (), Rate(30, REQ)
    )
    assert bracketed is not None and not bracketed.capacity_is_lower_bound
    assert "8 req/s" in bracketed.basis and "at least" not in bracketed.render()
    assert not _sized(Rate(30.0, REQ)).capacity_is_lower_bound  # the closed-loop curve


def test_a_client_bound_rung_above_the_capacity_leaves_it_a_lower_bound() -> None:
    """10 req/s kept up, 20 req/s met the SLO but was client-bound: the capacity (10 req/s,
    never the client-bound rung) was said as exact, "5 GPUs for 40 req/s" with no "at least",
    as if the 20 req/s rung had bracketed it, and its $/1M as exact too."""
    from tuner.domain import ClientHealth
    from tuner.load import estimate
    from tuner.results import costs

    client = ClientHealth(1.0, 0.0, 0.0, 1.0, 2, client_bound=True)
    bound = (_open(64, r, 800.0, 20.0) for r in (19.0, 20.0, 21.0))
    windows = (
        *(_open(64, r, 800.0, 10.0) for r in (9.0, 10.0, 11.0)),
        *(dataclasses.replace(w, client=client) for w in bound),
    )
    trial = _trial(1, 800.0, windows=windows)
    sized = fleet_size(_study(slo={"e2e_p99_ms": 2000.0}), trial, (), Rate(40.0, REQ))
    assert sized is not None and "10 req/s" in sized.basis
    assert sized.capacity_is_lower_bound
    text = sized.render()
    assert "capacity per GPU: at least 10 req/s" in text and "GPUs for 40 req/s: at most 5" in text
    # The trial's cost and capacity read alike elsewhere (tuner best, the report, the API).
    metrics = {**trial.metrics, "capacity_load": estimate([10.0]),
               "capacity_output_throughput": estimate([1000.0])}  # fmt: skip
    assert costs.usd_at_most(metrics, windows, {})
    assert costs.capacity_at_least(metrics, windows, {})


def test_tuner_size_says_an_open_loop_capacity_is_a_lower_bound(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'open.db'}"
    insert_measured_study(url, [ServingConfig()], name="poisson", workload="chat-heavy")
    size = ["size", "--model", "tiny-ernie", "--rate", "100", "--storage", url]
    text = CliRunner().invoke(app, size)
    assert text.exit_code == 0, text.output
    assert "capacity per GPU: at least" in text.stdout and ": at most " in text.stdout
    (answer,) = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"]
    assert answer["capacity_is_lower_bound"] is True
    assert any("lower bound" in n for n in answer["notes"])


def test_tuner_size_says_the_ranking_that_picked_it_rests_on_a_lower_bound(
    tmp_path: Path,
) -> None:
    """A capacity study on a rate ladder whose every rung was served ranked its configurations
    by noise: `tuner best` said so, `tuner size` sized its pick labelling only the capacity."""
    url = f"sqlite:///{tmp_path / 'ladder.db'}"
    for objective in ("capacity", "balanced"):
        insert_ladder_study(url, name=objective, objective=objective)
    size = ["size", "--model", "tiny-ernie", "--rate", "10", "--storage", url]
    shown = CliRunner().invoke(app, size)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())
    assert "note: the capacity ranking rests on a lower bound" in text
    assert "add rates above 2 req/s to the rate_ladder" in text
    assert text.count("ranking rests on a lower bound") == 1  # not the balanced study's
    answers = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"]
    notes = {a["study"]: " ".join(a["notes"]) for a in answers}
    assert "the capacity ranking rests on a lower bound" in notes["capacity"]
    assert "ranking rests on" not in notes["balanced"]  # not ranked by throughput


def _bound(window: WindowMetrics) -> WindowMetrics:
    from tuner.domain import ClientHealth

    client = ClientHealth(1.0, 0.0, 0.0, 1.0, 2, client_bound=True)
    return dataclasses.replace(window, client=client)


def test_a_capacity_the_client_bounded_is_not_called_a_missed_slo(tmp_path: Path) -> None:
    """Every window client-bound, in a study with no SLO: `tuner size` said "none can serve it
    (no load point met the SLO)", "none of the study's 2 measured trials meets the SLO" and
    "try a looser --slo", which cannot help. It now says the load generator was the limit and
    how to measure again; a missed SLO still reads as one."""
    url = f"sqlite:///{tmp_path / 'bound.db'}"
    one = [_bound(_w(16, r, 600.0)) for r in (7.5, 8.0, 8.5)]
    curve = [_bound(w) for w in CURVE]
    _insert_trials(url, [(ServingConfig(), one), (ServingConfig(max_num_seqs=16), curve)])
    size = ["size", "--model", "tiny-ernie", "--rate", "20", "--storage", url]
    run = CliRunner().invoke(app, size)
    text = " ".join(run.stdout.split())
    assert run.exit_code == 1, run.output
    assert "no load point met the SLO" not in text and "meets the SLO" not in text
    assert "not sized: the load generator, not the server, was the limit" in text
    assert "no other of the study's 2 measured trials has a capacity under the SLO" in text
    assert "measure it again from a less loaded or faster client machine" in run.stderr
    assert "--slo" not in run.stderr
    (answer,) = json.loads(CliRunner().invoke(app, [*size, "--json"]).stdout)["sizes"]
    assert answer["client_bound"] is True and answer["gpus"] is None
    study = _study()
    trial = dataclasses.replace(_trial(0, 100.0), windows=tuple(curve))
    sized = fleet_size(study, trial, (), Rate(20.0, REQ))
    assert sized is not None and sized.basis == "every load point of the curve client-bound"
    kept_up = dataclasses.replace(trial, windows=CURVE)
    missed = fleet_size(study, kept_up, (), Rate(20.0, REQ), slo=Slo(e2e_p99_ms=1.0))
    assert missed is not None and not missed.client_bound
    assert missed.basis == "no load point of the curve met the SLO"


def test_defaults_that_served_nothing_are_no_yardstick_for_capacity(tmp_path: Path) -> None:
    """A capacity study whose defaults met its SLO (E2E P99 2 s) at no load point: every other
    trial scored 1.000 against their capacity of 0 (a ratio to nothing reads as neutral), and
    the tie went to the lower trial number: `tuner best` and `tuner size` took #1 (420 tok/s)
    over #2 (1,200 tok/s) and sized 5 GPUs where 2 serve."""
    from sqlalchemy import text

    from tuner.db import make_engine

    url = f"sqlite:///{tmp_path / 'capacity.db'}"
    slo = {"e2e_p99_ms": 2000.0}

    def curve(p99_8: float, p99_16: float, k: float) -> list[WindowMetrics]:
        return [*(_w(8, r * k, p99_8) for r in (4.0, 4.2, 4.4)),
                *(_w(16, r * k, p99_16) for r in (7.5, 8.0, 8.4))]  # fmt: skip

    repo = insert_measured_study(url, [], name="s", gpu="h200", workload="chat",
                                 objective="capacity")  # fmt: skip
    with make_engine(url).begin() as c:
        c.execute(text("update tuner_studies set slo = :s where name = 's'"),
                  {"s": json.dumps(slo)})  # fmt: skip
    shape = get_workload("chat").replace(requests_per_window=8, windows=3)
    trials = [
        (ServingConfig(), curve(3000.0, 5000.0, 1.0)),  # misses the SLO everywhere
        (ServingConfig(max_num_seqs=16), curve(1500.0, 5000.0, 1.0)),  # 8 streams: 420 tok/s
        (ServingConfig(max_num_seqs=32), curve(1500.0, 1800.0, 1.5)),  # 16 streams: 1,200
    ]
    for number, (config, windows) in enumerate(trials):
        result = dataclasses.replace(
            FakeRunner().run(config, shape),
            windows=tuple(windows),
            metrics=trial_metrics(shape, windows, Slo(**slo)),
        )
        values = objective_values(result, memory_ceiling_gib=64.0, objective=Objective.CAPACITY)
        trial_id = repo.start_trial("s", number, config, "search", is_baseline=number == 0)
        repo.finish_trial(trial_id, result, 1.0, values)
    best = CliRunner().invoke(app, ["best", "s", "--storage", url])
    assert best.exit_code == 0, best.output
    assert "trial #2" in best.stdout and "--max-num-seqs 32" in best.stdout
    assert "defaults served nothing within the SLO" in " ".join(best.stdout.split())
    assert "defaults none (no load point met the SLO)" in best.stdout  # not "inf [inf, inf]"
    size = ["size", "--model", "tiny-ernie", "--rate", "20", "--storage", url, "--json"]
    sized = CliRunner().invoke(app, size)
    assert sized.exit_code == 0, sized.output
    (answer,) = json.loads(sized.stdout)["sizes"]
    assert answer["trial_number"] == 2 and answer["gpus"] == 2


def _set_price(url: str, study: str, price: float) -> None:
    from sqlalchemy import text

    from tuner.db import make_engine

    with make_engine(url).begin() as c:
        spec = json.loads(c.execute(text("select spec from tuner_studies where name = :n"),
                                    {"n": study}).scalar_one())  # fmt: skip
        c.execute(text("update tuner_studies set spec = :s where name = :n"),
                  {"s": json.dumps({**spec, "gpu_price": price}), "n": study})  # fmt: skip


def test_a_free_fleet_comes_before_a_paid_one_of_as_many_gpus(tmp_path: Path) -> None:
    """Owned hardware priced at $0/hour sorted after a $4/hour fleet of as many GPUs: the
    sort read a price of 0 as none."""
    url = f"sqlite:///{tmp_path / 'free.db'}"
    configs = [ServingConfig(), ServingConfig(max_num_seqs=64)]
    insert_measured_study(url, configs, name="on-h200", gpu="h200", workload="chat")
    insert_measured_study(url, configs, name="on-h100-free", gpu="h100", workload="chat")
    _set_price(url, "on-h100-free", 0.0)
    sized = CliRunner().invoke(app, ["size", "--model", "tiny-ernie", "--rate", "1",
                                     "--storage", url, "--json"])  # fmt: skip
    assert sized.exit_code == 0, sized.output
    fleets = json.loads(sized.stdout)["sizes"]
    assert [f["gpus"] for f in fleets] == [1, 1]
    assert [f["study"] for f in fleets] == ["on-h100-free", "on-h200"]


def test_a_bad_stored_price_costs_nothing_and_the_rest_still_answers(tmp_path: Path) -> None:
    """A price an older tuner stored (-1 $/hour) turned the dashboard's pages into a JSON 400
    and `tuner best` and `tuner size` into exit 2, where the API's recommendation already
    answered the flags with "no cost"."""
    import html

    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import ApiSettings

    url = f"sqlite:///{tmp_path / 'bad-price.db'}"
    insert_measured_study(url, [ServingConfig(), ServingConfig(max_num_seqs=64)], name="s",
                          gpu="h200", workload="chat")  # fmt: skip
    _set_price(url, "s", -1.0)
    why = "no cost: the study's stored gpu_price -1.0 is no price per GPU-hour"
    best = CliRunner().invoke(app, ["best", "s", "--storage", url])
    assert best.exit_code == 0, best.output
    assert f"{why}; give one with --gpu-price" in best.stdout and "flags:" in best.stdout
    size = CliRunner().invoke(app, ["size", "--model", "tiny-ernie", "--rate", "1", "--storage",
                                    url])  # fmt: skip
    assert size.exit_code == 0, size.output
    assert why in size.stdout and "GPUs for 1 req/s: 1" in size.stdout
    client = TestClient(create_app(ApiSettings(storage=url)))
    for page in ("/ui/", "/ui/studies/s"):
        answer = client.get(page)
        assert answer.status_code == 200, (page, answer.text[:300])
    assert why in html.unescape(client.get("/ui/studies/s").text)
