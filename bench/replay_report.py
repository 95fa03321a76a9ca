"""Summaries and the printed tables of ``search_replay.py``: medians and quartiles over seeds,
ratios with bootstrap intervals, what early stopping saved."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def quantile(xs: Sequence[float] | np.ndarray, p: float) -> float:
    """The lower empirical quantile (of 20 seeds, the median is the 10th): a censored,
    infinite run is never averaged with a finite one."""
    arr = np.sort(np.asarray(xs, dtype=float))
    return float(arr[min(len(arr) - 1, max(0, math.ceil(p * len(arr)) - 1))])


def _quantiles(xs: Sequence[float]) -> dict[str, float | None]:
    """Median, quartiles and range; a censored run counts as infinite (None in JSON)."""
    qs = {"min": 0.0, "q1": 0.25, "median": 0.5, "q3": 0.75, "max": 1.0}
    return {k: _json(quantile(xs, p)) for k, p in qs.items()}


def summarise(runs: Sequence[Any], key: str = "none") -> dict[str, Any]:
    times = [
        r.accounts[key].found_s if r.accounts[key].found_s is not None else math.inf for r in runs
    ]
    trials = [
        r.accounts[key].found_trials if r.accounts[key].found_trials is not None else math.inf
        for r in runs
    ]
    return {
        "runs": len(runs),
        "found": sum(math.isfinite(t) for t in times),
        "gpu_s_to_target": _quantiles(times),
        "trials_to_target": _quantiles(trials),
        "imputed_share": sum(r.imputed for r in runs) / max(1, sum(r.trials for r in runs)),
        "sampler_wall_s_per_trial": sum(r.wall_s for r in runs)
        / max(1, sum(r.trials for r in runs)),
    }


def stopping(runs: Sequence[Any], key: str) -> dict[str, Any]:
    plain = [r.accounts["none"] for r in runs]
    ruled = [r.accounts[key] for r in runs]
    without = sum(a.spent for a in plain)
    lost = sum(
        p.found_s is not None and s.found_s is None for p, s in zip(plain, ruled, strict=True)
    )
    return {
        "margin": ruled[0].policy.margin if ruled and ruled[0].policy else None,
        "trials": sum(r.trials for r in runs),
        "stopped": sum(a.stopped for a in ruled),
        "stopped_targets": sum(a.stopped_targets for a in ruled),
        "runs_target_lost": lost,
        "gpu_s_saved_share": (sum(a.saved for a in ruled) / without) if without else 0.0,
        "gpu_s_to_target": summarise(runs, key)["gpu_s_to_target"],
    }


def _hours(x: float | None) -> str:
    return "censored" if x is None else f"{x / 3600:.2f}"


def report(results: dict[str, Any]) -> str:
    lines = [
        "| dataset | sampler | found | trials to target, median [IQR] | GPU-h to target, median "
        "[IQR] (min-max) | / grid [90 % CI] | / random [90 % CI] | imputed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ds, data in results["datasets"].items():
        for s, v in data["samplers"].items():
            g, t = v["search"]["gpu_s_to_target"], v["search"]["trials_to_target"]
            lines.append(
                f"| {ds} | {s} | {v['search']['found']}/{v['search']['runs']} | "
                f"{_num(t['median'])} [{_num(t['q1'])}-{_num(t['q3'])}] | "
                f"{_hours(g['median'])} [{_hours(g['q1'])}-{_hours(g['q3'])}] "
                f"({_hours(g['min'])}-{_hours(g['max'])}) | "
                f"{_ci(v, 'grid')} | {_ci(v, 'random')} | {v['search']['imputed_share']:.0%} |"
            )
    lines += [
        "",
        "| dataset | sampler | stop rule | margin | trials stopped | target trials stopped | "
        "runs that lost the target | GPU-s saved | GPU-h to target, median (without) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ds, data in results["datasets"].items():
        for s, v in data["samplers"].items():
            for key, st in v["stopping"].items():
                lines.append(
                    f"| {ds} | {s} | {key} | x{math.exp(-st['margin']):.3f} | "
                    f"{st['stopped']}/{st['trials']} | {st['stopped_targets']} | "
                    f"{st['runs_target_lost']}/{v['search']['runs']} | "
                    f"{st['gpu_s_saved_share']:.1%} | "
                    f"{_hours(st['gpu_s_to_target']['median'])} "
                    f"({_hours(v['search']['gpu_s_to_target']['median'])}) |"
                )
    return "\n".join(lines)


def _ci(res: dict[str, Any], other: str) -> str:
    r = res.get("ratios", {}).get(other)
    if r is None or r["median_ratio"] is None:
        return "n/a"
    hi = "inf" if r["high"] is None else f"{r['high']:.2f}"
    lo = "n/a" if r["low"] is None else f"{r['low']:.2f}"
    return f"{r['median_ratio']:.3f} [{lo}-{hi}]"


def _num(x: float | None) -> str:
    return "censored" if x is None else f"{x:g}"


def _times(res: dict[str, Any]) -> np.ndarray:
    found = [s["gpu_s_to_target"] for s in res["per_seed"]]
    return np.array([math.inf if t is None else t for t in found], dtype=float)


def add_ratio_intervals(samplers: dict[str, Any], draws: int = 4000) -> None:
    """Each sampler's median time over grid's and random's, with a 90 % bootstrap interval
    (the seeds of both resampled independently); None where a median is censored."""
    rng = np.random.default_rng(0)
    for res in samplers.values():
        res["ratios"] = {}
        mine = _times(res)
        for other in ("grid", "random"):
            if other not in samplers:
                continue
            theirs = _times(samplers[other])
            boot = [
                _safe_ratio(
                    quantile(rng.choice(mine, len(mine)), 0.5),
                    quantile(rng.choice(theirs, len(theirs)), 0.5),
                )
                for _ in range(draws)
            ]
            point = _safe_ratio(quantile(mine, 0.5), quantile(theirs, 0.5))
            boot = [math.inf if math.isnan(x) else x for x in boot]  # both censored
            low, high = quantile(boot, 0.05), quantile(boot, 0.95)
            res["ratios"][other] = {
                "median_ratio": _json(point),
                "low": _json(low),
                "high": _json(high),
            }


def _safe_ratio(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b):
        return math.nan
    return a / b if b > 0 else math.inf


def _json(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
