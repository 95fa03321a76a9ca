"""A noise study as report tables, from the launch log ``bench/noise_placement.py`` writes (one
JSON line per launch: ``{"arm": placement, "config", "result": encoded TrialResult}``).

- :func:`launches_table`: every launch in the order run: its placement, whether its compile
  caches were cold, its start-up, its windows' output throughput, their geometric mean (the
  launch's value under :mod:`tuner.scoring.noise`), P99 TTFT, energy per output token and the
  windows tuner flagged (client-bound or disturbed);
- :func:`spread_table`: per placement and metric, the launch and window components of the
  nested model (:func:`tuner.scoring.noise.components`), warm launches only or all of them;
- :func:`self_table`: per placement, the defaults against themselves: the warm launches in
  the order run, split in turns into A and B, with Welch's interval of B/A from those launches
  alone, the half-width three launches a side reach at the measured noise, and the launches a
  side an interval of ±5 % would take.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.db import decode_result
from tuner.domain import TrialResult, TrialStatus
from tuner.scoring import (
    Components,
    Launch,
    components,
    half_width_at,
    launch_value,
    launches_for,
    ratio_interval,
)

METRICS = (("output_throughput", "output tok/s"), ("ttft_p99_ms", "P99 TTFT ms"))


def read_launches(lines: Sequence[Mapping[str, Any]]) -> list[tuple[str, TrialResult]]:
    """(placement, result) per launch-log line, in the order run."""
    return [(str(line["arm"]), decode_result(line["result"])) for line in lines]


def _cold(result: TrialResult) -> bool:
    return result.server is not None and result.server.compile_cache == "cold"


def _values(result: TrialResult, metric: str) -> tuple[float, ...]:
    est = result.metrics.get(metric)
    return est.values if est is not None else ()


def launches_table(lines: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        "| # | placement | caches | start-up s | windows, output tok/s | launch value "
        "| P99 TTFT ms (median) | J / out token (median) | windows flagged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, (mode, r) in enumerate(read_launches(lines), 1):
        if r.status is not TrialStatus.COMPLETE:
            rows.append(f"| {n} | {mode} | | | {r.status.value}: {r.failure_detail} | | | | |")
            continue
        windows = _values(r, "output_throughput")
        value = launch_value(windows)
        ttft = r.metrics.get("ttft_p99_ms")
        energy = r.metrics.get("joules_per_output_token")
        flagged = sum(1 for w in r.windows if w.client_bound or w.disturbed)
        start = r.server.startup_s if r.server is not None else None
        rows.append(
            f"| {n} | {mode} | {'cold' if _cold(r) else 'warm'} "
            f"| {start:.0f} | {', '.join(f'{v / 1000:.1f}k' for v in windows)} "
            f"| {(value or 0) / 1000:.2f}k | {'' if ttft is None else f'{ttft.median:.0f}'} | "
            f"{'' if energy is None else f'{energy.median:.3f}'} | {flagged} of {len(r.windows)} |"
            if start is not None
            else f"| {n} | {mode} | | | | | | | |"
        )
    return "\n".join(rows) + "\n"


def placement_components(
    lines: Sequence[Mapping[str, Any]], metric: str, *, warm_only: bool = True
) -> dict[str, Components | None]:
    """Per placement (in the order first run), the nested-model components of ``metric``."""
    groups: dict[str, list[Launch]] = {}
    for mode, r in read_launches(lines):
        if r.status is TrialStatus.COMPLETE and not (warm_only and _cold(r)):
            groups.setdefault(mode, []).append(Launch.of("defaults", _values(r, metric)))
    return {mode: components(launches) for mode, launches in groups.items()}


def spread_table(lines: Sequence[Mapping[str, Any]], *, warm_only: bool = True) -> str:
    rows = [
        "| placement | metric | launches | launch SD | window SD | a launch's value SD | df |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric, label in METRICS:
        for mode, c in placement_components(lines, metric, warm_only=warm_only).items():
            if c is None:
                rows.append(f"| {mode} | {label} | fewer than 2 | | | | |")
                continue
            window = "" if c.window_sd is None else f"{c.window_sd:.3f}"
            rows.append(
                f"| {mode} | {label} | {c.launches} | {c.launch_sd:.3f} | {window} "
                f"| {c.sd:.3f} | {c.df} |"
            )
    return "\n".join(rows) + "\n"


def per_launch_sd(c: Components, windows: int) -> float:
    """A launch's value SD at ``c``'s components had each launch measured ``windows`` windows."""
    return math.sqrt(c.launch_var + (c.window_var or 0.0) / windows)


def self_table(lines: Sequence[Mapping[str, Any]], more_windows: int = 6) -> str:
    rows = [
        "| placement | A: launches | B: launches | B/A, Welch 95 % (own launches) "
        "| half-width at 3 a side | launches a side for ±5 % "
        f"| the same with {more_windows} windows a launch |",
        "|---|---|---|---|---|---|---|",
    ]
    by_mode: dict[str, list[tuple[int, float]]] = {}
    for n, (mode, r) in enumerate(read_launches(lines), 1):
        value = launch_value(_values(r, "output_throughput"))
        if r.status is TrialStatus.COMPLETE and not _cold(r) and value is not None:
            by_mode.setdefault(mode, []).append((n, value))
    spread = placement_components(lines, "output_throughput")
    for mode, runs in by_mode.items():
        a, b = runs[0::2], runs[1::2]
        ci = ratio_interval([v for _, v in a], [v for _, v in b], 0.95)
        c = spread.get(mode)
        interval = "n/a" if ci is None else f"x{ci.ratio:.3f} [{ci.low:.3f}, {ci.high:.3f}]"
        noise = (
            "| | |"
            if c is None
            else f"±{half_width_at(3, c.sd, 0.95) * 100:.1f} % | {c.launches_for(0.05)} "
            f"| {launches_for(0.05, per_launch_sd(c, more_windows), 0.95)} |"
        )
        rows.append(
            f"| {mode} | {', '.join(f'#{n}' for n, _ in a)} "
            f"| {', '.join(f'#{n}' for n, _ in b)} | {interval} | {noise}"
        )
    return "\n".join(rows) + "\n"
