"""The H200 noise study (docs/results/noise-h200.md) against its launch log: the tables are
re-derived from it, and the figures the prose quotes follow from the same launches."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.tables.noise import per_launch_sd, placement_components, read_launches
from bench.tables.splice import count_blocks, stale_blocks
from tuner.db.codec import decode_result
from tuner.domain import TrialStatus
from tuner.scoring.noise import launch_value
from tuner.scoring.sequential import launches_for

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "noise-h200"
LOG = DATA / "results" / "noise-placement" / "launches.jsonl"
REPORT = ROOT / "docs" / "results" / "noise-h200.md"


@pytest.fixture(scope="module")
def lines() -> list[dict[str, object]]:
    return [json.loads(x) for x in LOG.read_text().splitlines() if x.strip()]


def test_the_tables_are_derived_from_the_launch_log() -> None:
    text = REPORT.read_text()
    assert count_blocks(text) == 4
    assert stale_blocks(text, ROOT) == []


def test_ten_launches_in_turns_on_one_h200_the_first_one_cold(lines: list[dict]) -> None:
    launches = read_launches(lines)
    assert [mode for mode, _ in launches] == ["off", "pinned"] * 5
    assert all(r.status is TrialStatus.COMPLETE for _, r in launches)
    caches = [r.server.compile_cache for _, r in launches]  # type: ignore[union-attr]
    assert caches == ["cold"] + ["warm"] * 9
    for mode, r in launches:
        assert r.provenance is not None and r.provenance.gpu_name == "NVIDIA H200"
        assert r.provenance.vllm_version == "0.26.0" and r.provenance.model == "ernie-0.3b"
        assert r.provenance.workload == "throughput-256" and r.config.to_dict() == {}
        assert len(r.windows) == 3 and all(w.requests_ok == 1024 for w in r.windows)
        placed = dict(r.server.placement or {})  # type: ignore[union-attr]
        assert placed["mode"] == mode
        if mode == "pinned":  # the engine core was found and moved every time
            assert placed["engine_processes"] == "1" and placed["source"] == "nvml"
            assert (placed["api_server"], placed["engine_core"], placed["load_generator"]) == (
                "0-3", "4-11", "12-15",
            )  # fmt: skip
        # Energy was measured over every window, by the counter.
        assert all(w.energy is not None and w.energy.method == "counter" for w in r.windows)


def test_the_windows_carry_most_of_the_noise_with_or_without_placement(lines: list[dict]) -> None:
    comps = placement_components(lines, "output_throughput")
    off, pinned = comps["off"], comps["pinned"]
    assert off is not None and pinned is not None
    assert (off.launches, pinned.launches) == (4, 5)  # warm launches
    for c in (off, pinned):
        assert c.window_sd is not None and c.window_sd > 2 * c.launch_sd
    assert round(pinned.launch_sd, 3) == 0.028 and round(off.launch_sd, 3) == 0.043
    assert round(pinned.window_sd or 0, 3) == 0.083 and round(off.window_sd or 0, 3) == 0.090
    # The difference of the launch values' variances is far from significant (F 1.5, 3 and 4 df).
    from scipy import stats

    f = (off.sd / pinned.sd) ** 2
    assert round(f, 1) == 1.5 and stats.f(off.df, pinned.df).sf(f) > 0.3
    # Windows: three quarters of a pinned launch value's variance.
    share = (pinned.window_var or 0) / pinned.windows / pinned.launch_mean_var
    assert 0.7 < share < 0.8


def test_the_self_comparison_figures(lines: list[dict]) -> None:
    comps = placement_components(lines, "output_throughput")
    pinned, off = comps["pinned"], comps["off"]
    assert pinned is not None and off is not None
    assert (pinned.launches_for(0.05), off.launches_for(0.05)) == (11, 15)
    six = [launches_for(0.05, per_launch_sd(c, 6), 0.95) for c in (pinned, off)]
    assert six == [7, 11]
    assert per_launch_sd(pinned, 3) == pytest.approx(pinned.sd, rel=0.05)
    # The best number of windows a launch, sqrt(start-up x window var / (window s x launch var)).
    launches = [r for _, r in read_launches(lines) if r.server and r.server.compile_cache == "warm"]
    start = sorted(r.server.startup_s or 0 for r in launches)[len(launches) // 2]  # type: ignore[union-attr]
    window_s = sorted(w.duration_s for r in launches for w in r.windows)[len(launches)]
    best = {
        mode: math.sqrt(start * (c.window_var or 0) / (window_s * c.launch_var))
        for mode, c in comps.items()
        if c is not None
    }
    assert 3.5 < best["off"] < 4.5 and 5.0 < best["pinned"] < 6.5


def test_energy_and_cost_of_the_defaults(lines: list[dict]) -> None:
    launches = [decode_result(line["result"]) for line in lines]  # type: ignore[arg-type]
    joules = [r.metrics["joules_per_output_token"].median for r in launches]
    watts = [r.metrics["gpu_power_w"].median for r in launches]
    assert min(joules) >= 0.014 and max(joules) <= 0.016 + 5e-4
    assert min(watts) >= 200 and max(watts) <= 225
    values = sorted(launch_value(r.metrics["output_throughput"].values) or 0 for r in launches)
    median = (values[4] + values[5]) / 2
    assert round(median / 1000, 1) == 15.0
    per_million = 4.00 / (median * 3600 / 1e6)  # the catalog's H200 price assumption
    assert round(per_million, 3) == 0.074
