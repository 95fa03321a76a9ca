"""The decision design against today's fixed three-a-side Welch, on simulations from the
committed H200 launches: false decisions at B/A = 1, power at x1.2, launches and GPU-minutes
per decision, and the coverage of the reported interval.

The noise is fitted from the committed launches on one key (H200, vLLM 0.26.0, ernie-0.3b,
throughput-256, 3 windows a launch): the `tuner compare` launches of 2026-12-02
(``studies/results/h200-compare-2026-12-02/launches.jsonl``) and the heavy study's launches
(``studies/results/ernie-0.3b-h200-heavy/heavy-h200.db``), each configuration of each run
around its own mean (:func:`tuner.scoring.noise.components`). A simulated launch of a side
draws a launch effect and three window effects on the log scale, either

- ``parametric``: normal, with the fitted launch and window SDs, or
- ``resample``: the observed launch residuals (a launch's mean log minus its configuration's)
  and window residuals (a window's log minus its launch's), drawn with replacement and scaled
  up for the degrees of freedom their means took,

and, in the ``outlier`` scenarios, one of the first three launches of a random side has all its
windows at ``--outlier`` (0.6) of their value, as a launch that another process disturbed.
``--drift D`` adds a machine that drifts: a launch's log value moves by ``D`` for each launch
before it, in the order the design launches the sides (``--order``: ``counterbalanced``, A B,
B A, ..., as :func:`tuner.abtest.compare.run_interleaved` launches them, or ``alternating``,
A B, A B, ..., as it launched them before 2026-12-06). ``--step S`` moves every launch from
position ``--step-at`` on (0 first) by ``S`` instead: a machine that changed once.
Each comparison first has a calibration (``--calibration`` launches of the defaults drawn the
same way, fresh for each comparison: the profile's own uncertainty is part of the result).

Designs (every verdict through tuner's own code: :func:`tuner.abtest.compare.compare` for
today's design, :func:`tuner.abtest.decide.judge_look` for the new one):

- ``fixed-3-welch``: three launches a side, launch medians, Welch at 95 % (today);
- ``fixed-3-pooled``: three a side with the calibrated profile's pooled interval;
- ``seq-welch``: the decision design without a profile (Welch on its own launches);
- ``seq-pooled``: the decision design (3 to ``--cap`` a side, Pocock boundary for 95 %
  overall, stop within ±``--min-effect``) with the calibrated profile.

A wrong decision is "better" or "worse" at B/A = 1, and "worse" at B/A > 1; "inconclusive"
(the disagreement guard) is counted apart. Coverage: the final interval holds the true ratio.
GPU-minutes: the launches' wall times drawn from the observed warm launches (the calibration's
launches are not charged to the decision: a profile serves every later comparison on its key).

    .venv/bin/python bench/decision_replay.py --reps 2000 --json-out decision.json
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tuner.abtest.compare import HEADLINE, Arm, compare  # noqa: E402
from tuner.abtest.decide import Design, judge_look  # noqa: E402
from tuner.db import ComparisonRow  # noqa: E402
from tuner.db.codec import decode_memory, decode_result  # noqa: E402
from tuner.domain import (  # noqa: E402
    MemoryUsage,
    Objective,
    ServingConfig,
    TrialResult,
    TrialStatus,
)
from tuner.load import estimate  # noqa: E402
from tuner.scoring import noise as noise_model  # noqa: E402
from tuner.scoring.noise import (  # noqa: E402
    Components,
    Launch,
    components,
    launch_value,
    logs,
    trend_ratio_interval,
)
from tuner.scoring.significance import BETTER, INCONCLUSIVE, NO_DIFFERENCE, WORSE  # noqa: E402

LATENCY = "e2e_p99_ms"  # the balanced objective's latency, beside the output throughput
COMPARE_LOG = "studies/results/h200-compare-2026-12-02/launches.jsonl"
HEAVY_DB = "studies/results/ernie-0.3b-h200-heavy/heavy-h200.db"
WINDOWS = 3
COLD_S = 180.0  # a launch whose start-up took longer was a cold start
A_ARM = Arm("defaults", ServingConfig())
B_ARM = Arm("B", ServingConfig(max_num_seqs=128))


@dataclass(frozen=True)
class Observed:
    """A committed launch: its run and configuration, window values, wall and start-up s."""

    group: str
    windows: tuple[float, ...]
    wall_s: float | None
    startup_s: float | None
    e2e: tuple[float, ...] = ()  # the windows' P99 E2E ms (the balanced objective's latency)
    memory_bytes: int | None = None  # the launch's headline memory


def load_observed(root: Path = REPO_ROOT) -> list[Observed]:
    """The committed launches of the throughput-256 key (see the module docstring)."""
    out = []
    for line in (root / COMPARE_LOG).read_text().splitlines():
        r = decode_result(json.loads(line)["result"])
        out.append(_observed(f"compare:{r.config.label()}", r))
    db = sqlite3.connect(f"file:{root / HEAVY_DB}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT config_label, metrics, started_at, finished_at, server, memory "
            "FROM tuner_trials WHERE status = 'complete' AND workload = 'throughput-256' "
            "ORDER BY number"
        ).fetchall()
    finally:
        db.close()
    for label, metrics, started, finished, server, memory in rows:
        m = json.loads(metrics)
        startup = (json.loads(server) or {}).get("startup_s") if server else None
        wall = finished - started if started and finished else None
        mem = decode_memory(json.loads(memory)).headline_bytes if memory else None
        values, e2e = tuple(m[HEADLINE]["values"]), tuple(m[LATENCY]["values"])
        out.append(Observed(f"heavy:{label}", values, wall, startup, e2e, mem))
    return out


def _observed(group: str, r: TrialResult) -> Observed:
    wall = r.finished_at - r.started_at if r.started_at and r.finished_at else None
    startup = r.server.startup_s if r.server is not None else None
    values, e2e = tuple(r.metrics[HEADLINE].values), tuple(r.metrics[LATENCY].values)
    return Observed(group, values, wall, startup, e2e, r.memory.headline_bytes)


def fit(observed: Sequence[Observed]) -> Components:
    found = components([Launch.of(o.group, o.windows) for o in observed], WINDOWS)
    if found is None:
        raise SystemExit("the committed launches give no variance components")
    return found


def residuals(observed: Sequence[Observed]) -> tuple[list[float], list[float]]:
    """Launch residuals (launch mean log - configuration mean) and window residuals (window log
    - launch mean), each scaled by sqrt(n / (n - 1)) for the mean it was taken from; the
    launch residuals have the window noise's share of their spread taken out."""
    groups: dict[str, list[list[float]]] = {}
    for o in observed:
        ls = logs(o.windows)
        if len(ls) == WINDOWS:
            groups.setdefault(o.group, []).append(ls)
    launch_res, window_res = [], []
    for runs in groups.values():
        means = [sum(ls) / WINDOWS for ls in runs]
        for ls, m in zip(runs, means, strict=True):
            window_res += [(y - m) * math.sqrt(WINDOWS / (WINDOWS - 1)) for y in ls]
        if len(runs) >= 2:
            grand = sum(means) / len(means)
            launch_res += [(m - grand) * math.sqrt(len(runs) / (len(runs) - 1)) for m in means]
    wv = statistics.fmean(x * x for x in window_res)
    lv = statistics.fmean(x * x for x in launch_res)
    # A launch mean carries window noise / m; shrink the launch residuals to the launch share.
    shrink = math.sqrt(max(0.0, lv - wv / WINDOWS) / lv) if lv > 0 else 0.0
    return [x * shrink for x in launch_res], window_res


Draw = Callable[[np.random.Generator], tuple[float, np.ndarray]]


def parametric(c: Components) -> Draw:
    window_sd = c.window_sd or 0.0

    def draw(rng: np.random.Generator) -> tuple[float, np.ndarray]:
        return float(rng.normal(0, c.launch_sd)), rng.normal(0, window_sd, WINDOWS)

    return draw


def resampled(launch_res: Sequence[float], window_res: Sequence[float]) -> Draw:
    lr, wr = np.asarray(launch_res), np.asarray(window_res)

    def draw(rng: np.random.Generator) -> tuple[float, np.ndarray]:
        return float(rng.choice(lr)), rng.choice(wr, WINDOWS)

    return draw


@dataclass(frozen=True)
class Scenario:
    name: str
    ratio: float
    outlier: float | None
    drift: float = 0.0  # log change a launch, in launch order
    step: float = 0.0  # log change of every launch from position step_at on (0 first)
    step_at: int = 0
    order: str = "counterbalanced"
    noisier: float = 1.0  # the comparison's noise (launch and window SD) over the calibration's


def position(side: str, i: int, order: str) -> int:
    """Where side's ``i``-th launch runs among both sides' launches (0 first): in round ``i``,
    A first, or, counterbalanced, B first in every other round."""
    first = "b" if order == "counterbalanced" and i % 2 else "a"
    return 2 * i + (0 if side == first else 1)


class Drawn:
    """The launches of one simulated comparison, drawn as a design asks for them; a subclass
    says how one launch is drawn."""

    def __init__(self, walls: Sequence[float], rng: np.random.Generator) -> None:
        self.walls, self.rng = walls, rng
        self.runs: dict[str, list[TrialResult]] = {"a": [], "b": []}

    order = "counterbalanced"

    def launch(self, side: str) -> TrialResult:
        raise NotImplementedError

    def clock(self, side: str, wall: float) -> dict[str, float]:
        """When the side's next launch started and ended: launches start a longest wall apart
        in the design's order, so they end in that order at uneven spacing (their walls)."""
        start = 1.8e9 + position(side, len(self.runs[side]), self.order) * max(self.walls)
        return {"started_at": start, "finished_at": start + wall}

    def upto(self, n: int) -> tuple[list[TrialResult], list[TrialResult]]:
        for side in ("a", "b"):
            while len(self.runs[side]) < n:
                self.launch(side)
        return self.runs["a"], self.runs["b"]


class Sides(Drawn):
    """Launches of the output throughput alone, with an outlying launch in outlier scenarios."""

    def __init__(
        self,
        sc: Scenario,
        draw: Draw,
        walls: Sequence[float],
        rng: np.random.Generator,
    ) -> None:
        super().__init__(walls, rng)
        self.sc, self.draw, self.order = sc, draw, sc.order
        self.outlier_at = None
        if sc.outlier is not None:
            self.outlier_at = ("a" if rng.random() < 0.5 else "b", int(rng.integers(3)))

    def launch(self, side: str) -> TrialResult:
        i = len(self.runs[side])
        mu = math.log(15000.0) + (math.log(self.sc.ratio) if side == "b" else 0.0)
        at = position(side, i, self.sc.order)
        mu += self.sc.drift * at + (self.sc.step if self.sc.step and at >= self.sc.step_at else 0)
        effect, window = self.draw(self.rng)
        values = np.exp(mu + self.sc.noisier * (effect + window))
        if self.outlier_at == (side, i):
            values = values * (self.sc.outlier or 1.0)
        wall = float(self.rng.choice(self.walls))
        result = TrialResult(
            config=(A_ARM if side == "a" else B_ARM).config,
            status=TrialStatus.COMPLETE,
            metrics={HEADLINE: estimate(values.tolist())},
            **self.clock(side, wall),
        )
        self.runs[side].append(result)
        return result


def calibrated(draw: Draw, launches: int, rng: np.random.Generator) -> Components | None:
    runs = []
    for _ in range(launches):
        effect, window = draw(rng)
        runs.append(Launch("defaults", tuple(float(x) for x in window + effect)))
    return components(runs, WINDOWS)


@dataclass(frozen=True)
class Outcome:
    verdict: str
    launches: int
    covered: bool | None
    gpu_minutes: float
    half_width: float | None


def run_design(
    name: str,
    sides: Sides,
    profile: Components | None,
    first: int,
    cap: int,
    min_effect: float,
) -> Outcome:
    if name in ("fixed-3-welch", "fixed-4-welch"):
        a, b = sides.upto(int(name[6]))
        c = compare(A_ARM, a, B_ARM, b, 0.95).metric(HEADLINE)
        return _outcome(c.verdict, c.low, c.high, sides, a, b)
    if name in ("fixed-3-trend", "fixed-4-trend"):
        a, b = sides.upto(int(name[6]))
        verdict, low, high = trend_adjusted(a, b, sides.sc.order)
        return _outcome(verdict, low, high, sides, a, b)
    design = tuner_design(name, first, cap, min_effect)
    prof = profile if name.removesuffix("-trend") in ("fixed-3-pooled", "seq-pooled") else None
    n = design.first
    while True:
        a, b = sides.upto(n)
        look = judge_look(A_ARM, a, B_ARM, b, design, _as_profile(prof))
        if look.done or n >= design.cap:
            found = look.step.interval
            return _outcome(
                look.step.verdict,
                found.low if found else None,
                found.high if found else None,
                sides,
                a,
                b,
            )
        n += 1


def tuner_design(name: str, first: int, cap: int, min_effect: float) -> Design:
    """tuner's design of that name: one look of 3 a side (``fixed-3-pooled``) or the sequential
    one, with the trend over the launches' times taken out where the name ends in ``-trend``."""
    trend = name.endswith("-trend")
    if name.removesuffix("-trend") == "fixed-3-pooled":
        return Design.fixed_launches(3, trend=trend)
    return Design.sequential(first, cap, 0.95, min_effect, trend=trend)


def trend_adjusted(
    a: Sequence[TrialResult], b: Sequence[TrialResult], order: str
) -> tuple[str, float, float]:
    """Bench-only: tuner's trend-fitted interval (:func:`tuner.scoring.noise.
    trend_ratio_interval`, no profile) at 95 %, one look, on the launches' order as their time
    (a minute apart), as the bench asked before tuner's design fitted it on their times."""
    points = {
        side: [
            (60.0 * position(side, i, order), launch_value(r.metrics[HEADLINE].values))
            for i, r in enumerate(runs)
        ]
        for side, runs in (("a", a), ("b", b))
    }
    found = trend_ratio_interval(points["a"], points["b"], 0.95, None)
    assert found is not None  # six launches or more, spread over minutes
    return found.verdict(True), found.low, found.high


def _as_profile(c: Components | None) -> Any:
    if c is None:
        return None
    from tuner.scoring.noise import NoiseKey, NoiseProfile

    key = NoiseKey("sim", "NVIDIA H200", "0.26.0", "ernie-0.3b", "throughput-256", WINDOWS)
    return NoiseProfile(key, {HEADLINE: c}, c.launches)


def _outcome(
    verdict: str,
    low: float | None,
    high: float | None,
    sides: Sides,
    a: Sequence[TrialResult],
    b: Sequence[TrialResult],
) -> Outcome:
    covered = None if low is None or high is None else low <= sides.sc.ratio <= high
    wall = sum((r.finished_at or 0.0) - (r.started_at or 0.0) for r in (*a, *b))
    hw = None
    if low and high and low > 0 and math.isfinite(high):
        hw = math.expm1((math.log(high) - math.log(low)) / 2)
    return Outcome(verdict, len(a) + len(b), covered, wall / 60.0, hw)


DESIGNS = ("fixed-3-welch", "fixed-3-pooled", "seq-welch", "seq-pooled")
# Bench-only designs, asked for by --designs: four a side, and the trend-adjusted interval.
EXTRA_DESIGNS = ("fixed-4-welch", "fixed-3-trend", "fixed-4-trend")
# tuner's designs with the trend over the launches' times taken out (Design.trend).
TREND_DESIGNS = ("fixed-3-pooled-trend", "seq-welch-trend", "seq-pooled-trend")


def simulate(
    design: str,
    sc: Scenario,
    draw: Draw,
    walls: Sequence[float],
    args: argparse.Namespace,
    seed: int,
) -> dict[str, Any]:
    verdicts: Counter[str] = Counter()
    launches, minutes, covered, widths = [], [], [], []
    for rep in range(args.reps):
        # The same draws for every design: common random numbers.
        rng = np.random.default_rng([seed, rep, zlib.crc32(sc.name.encode())])
        profile = calibrated(draw, args.calibration, rng)
        sides = Sides(sc, draw, walls, rng)
        out = run_design(design, sides, profile, args.first, args.cap, args.min_effect)
        kind = INCONCLUSIVE if out.verdict.startswith(INCONCLUSIVE) else out.verdict
        verdicts[kind] += 1
        launches.append(out.launches)
        minutes.append(out.gpu_minutes)
        if out.covered is not None:
            covered.append(out.covered)
        if out.half_width is not None:
            widths.append(out.half_width)
    n = args.reps
    wrong = (verdicts[BETTER] + verdicts[WORSE]) if sc.ratio == 1.0 else verdicts[WORSE]
    return {
        "verdicts": {k: v / n for k, v in sorted(verdicts.items())},
        "false_decisions": wrong / n,
        "better": verdicts[BETTER] / n,
        "no_difference": verdicts[NO_DIFFERENCE] / n,
        "inconclusive": verdicts[INCONCLUSIVE] / n,
        "launches_median": float(np.median(launches)),
        "launches_mean": statistics.fmean(launches),
        "gpu_minutes_median": float(np.median(minutes)),
        "coverage": statistics.fmean(covered) if covered else None,
        "half_width_median": float(np.median(widths)) if widths else None,
    }


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    observed = load_observed()
    c = fit(observed)
    warm = [o.wall_s for o in observed if o.wall_s and (o.startup_s or 0) < COLD_S]
    draws = {"parametric": parametric(c), "resample": resampled(*residuals(observed))}
    scenarios = [
        Scenario(
            f"x{r:g}{'-outlier' if o else ''}",
            r,
            o,
            args.drift,
            step=args.step,
            step_at=args.step_at,
            noisier=args.noisier,
            order=args.order,
        )
        for r in args.ratios
        for o in (None, args.outlier)
    ]
    plan = Design.sequential(args.first, args.cap, 0.95).plan
    out: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json_out"},
        "fitted": c.to_dict(),
        "warm_wall_s": {"median": statistics.median(warm), "n": len(warm)},
        "per_look_confidence": plan.confidence,
        # an interval on the comparison's own launches alone (the -trend designs, no profile)
        "per_look_confidence_own": plan.own_confidence,
        "results": {},
    }
    for noise in args.noise:
        draw = draws[noise]
        for design in args.designs:
            for sc in scenarios:
                res = simulate(design, sc, draw, warm, args, zlib.crc32(noise.encode()))
                out["results"].setdefault(noise, {}).setdefault(design, {})[sc.name] = res
        print(f"[decision] {noise}: done", file=sys.stderr, flush=True)
    return out


def report(out: dict[str, Any]) -> str:
    f = out["fitted"]
    lines = [
        f"fitted on {f['launches']} launches of {f['configurations']} configurations "
        f"({f['df']} df): launch SD {f['launch_sd']:.3f}, window SD {f['window_sd']:.3f} "
        f"(log), a launch's value {f['launch_value_sd']:.3f}; warm launch "
        f"{out['warm_wall_s']['median']:.0f} s (median of {out['warm_wall_s']['n']}); "
        f"per-look confidence {out['per_look_confidence']:.4f}",
        "",
    ]

    def cell(r: dict[str, Any]) -> str:
        cov = "-" if r["coverage"] is None else f"{r['coverage']:.1%}"
        return (
            f"{r['false_decisions']:.1%} / {r['better']:.0%} / {r['launches_median']:g} / "
            f"{r['gpu_minutes_median']:.1f} / {cov} / {r['inconclusive']:.1%}"
        )

    caption = (
        "false decisions / better / launches (median) / GPU-min (median) / coverage / inconclusive"
    )
    return "\n".join(lines + tables(out["results"], caption, cell))


def tables(
    results: dict[str, dict[str, dict[str, dict[str, Any]]]],
    caption: str,
    cell: Callable[[dict[str, Any]], str],
) -> list[str]:
    """A markdown table per noise model: a row per design, a column per scenario."""
    lines: list[str] = []
    for noise, designs in results.items():
        scen = list(next(iter(designs.values())))
        lines += [
            f"{noise} noise: {caption}",
            "",
            "| design | " + " | ".join(scen) + " |",
            "|---|" + "---|" * len(scen),
        ]
        for design, res in designs.items():
            lines.append(f"| {design} | " + " | ".join(cell(r) for r in res.values()) + " |")
        lines.append("")
    return lines


# The balanced objective's verdict --------------------------------------------------------------
# A study's confirmation stops on the objective's deciding metric (the output throughput for
# balanced), and its verdict (tuner.study.confirm.choose) asks more of a winner: no weighed
# metric worse (P99 E2E, memory) and the composite score's point estimate above 1. The deciding
# metric's error control is the design's; these conditions can only take "better" verdicts
# away. This mode measures how many: launches carry the throughput and the P99 E2E drawn
# jointly (their correlation within a launch and within a window kept) and the memory of a
# committed launch; each simulated confirmation is judged by judge_look and then by choose,
# exactly as the study does.

JointDraw = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
JOINT = (HEADLINE, LATENCY)
BALANCED_DESIGNS = ("fixed-3-pooled", "seq-pooled")


def joint_residuals(observed: Sequence[Observed]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`residuals` for the output throughput and the P99 E2E together: rows of launch
    residuals and of window residuals, one column a metric, each column shrunk as
    :func:`residuals` shrinks its one."""
    groups: dict[str, list[np.ndarray]] = {}
    for o in observed:
        if len(o.windows) == len(o.e2e) == WINDOWS and min(o.windows + o.e2e) > 0:
            groups.setdefault(o.group, []).append(np.log(np.column_stack([o.windows, o.e2e])))
    launch_res: list[np.ndarray] = []
    window_res: list[np.ndarray] = []
    for runs in groups.values():
        means = [ls.mean(axis=0) for ls in runs]
        for ls, m in zip(runs, means, strict=True):
            window_res.extend((ls - m) * math.sqrt(WINDOWS / (WINDOWS - 1)))
        if len(runs) >= 2:
            grand = np.mean(means, axis=0)
            launch_res += [(m - grand) * math.sqrt(len(runs) / (len(runs) - 1)) for m in means]
    lr, wr = np.array(launch_res), np.array(window_res)
    lv, wv = (lr**2).mean(axis=0), (wr**2).mean(axis=0)
    shrink = np.sqrt(np.clip(lv - wv / WINDOWS, 0.0, None) / lv)
    return lr * shrink, wr


def joint_draws(lr: np.ndarray, wr: np.ndarray) -> dict[str, JointDraw]:
    """``parametric``: normal launch and window effects with the residuals' covariance;
    ``resample``: a launch residual row and three window residual rows, with replacement."""
    lcov, wcov = lr.T @ lr / len(lr), wr.T @ wr / len(wr)
    zero = np.zeros(len(JOINT))

    def parametric(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return rng.multivariate_normal(zero, lcov), rng.multivariate_normal(zero, wcov, WINDOWS)

    def resample(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return lr[rng.integers(len(lr))], wr[rng.integers(len(wr), size=WINDOWS)]

    return {"parametric": parametric, "resample": resample}


@dataclass(frozen=True)
class Balanced:
    """B's true ratios to the defaults: output throughput and P99 E2E (memory: the same)."""

    name: str
    throughput: float
    e2e: float
    outlier: float | None = None  # one of the first three launches of a side runs this slow


BALANCED_SCENARIOS = (
    Balanced("x1", 1.0, 1.0),
    Balanced("x1.2, E2E /1.2", 1.2, 1 / 1.2),  # a closed loop's gain: same streams, less time
    Balanced("x1.2, E2E x1", 1.2, 1.0),
    Balanced("x1.2, E2E x1.1", 1.2, 1.1),  # the gain bought with latency
    Balanced("x1, E2E x1.2", 1.0, 1.2),  # a latency regression alone
    # One launch of either side at 0.6 of its throughput and 1/0.6 of its P99 E2E (a slow
    # launch in a closed loop), as the throughput mode's outlier scenarios.
    Balanced("x1, one launch x0.6", 1.0, 1.0, 0.6),
    Balanced("x1.2, E2E /1.2, one launch x0.6", 1.2, 1 / 1.2, 0.6),
)


class JointSides(Drawn):
    """Launches that carry the balanced objective's three numbers."""

    def __init__(
        self,
        sc: Balanced,
        draw: JointDraw,
        memories: Sequence[int],
        walls: Sequence[float],
        rng: np.random.Generator,
    ) -> None:
        super().__init__(walls, rng)
        self.bal, self.joint, self.memories = sc, draw, memories
        self.outlier_at = None
        if sc.outlier is not None:
            self.outlier_at = ("a" if rng.random() < 0.5 else "b", int(rng.integers(3)))

    def launch(self, side: str) -> TrialResult:
        mu = np.log([15000.0, 6000.0])
        if side == "b":
            mu = mu + np.log([self.bal.throughput, self.bal.e2e])
        if self.outlier_at == (side, len(self.runs[side])):
            mu = mu + np.log([self.bal.outlier or 1.0, 1 / (self.bal.outlier or 1.0)])
        effect, window = self.joint(self.rng)
        values = np.exp(mu + effect + window)  # a row a window, a column a metric
        metrics = {name: estimate(values[:, j].tolist()) for j, name in enumerate(JOINT)}
        memory = MemoryUsage(gpu_peak_bytes={"sim": int(self.rng.choice(self.memories))})
        result = TrialResult(
            config=(A_ARM if side == "a" else B_ARM).config,
            status=TrialStatus.COMPLETE,
            metrics=metrics,
            memory=memory,
            **self.clock(side, float(self.rng.choice(self.walls))),
        )
        self.runs[side].append(result)
        return result


def joint_profile(draw: JointDraw, launches: int, rng: np.random.Generator) -> Any:
    """The calibration (``launches`` of the defaults) as the noise profile of both metrics."""
    from tuner.scoring.noise import NoiseKey, NoiseProfile

    runs = [draw(rng) for _ in range(launches)]
    found = {}
    for j, name in enumerate(JOINT):
        launched = [Launch("defaults", tuple(float(x) for x in w[:, j] + e[j])) for e, w in runs]
        c = components(launched, WINDOWS)
        if c is not None:
            found[name] = c
    if not found:
        return None
    key = NoiseKey("sim", "NVIDIA H200", "0.26.0", "ernie-0.3b", "throughput-256", WINDOWS)
    return NoiseProfile(key, found, launches)


def confirm_once(design: Design, sides: JointSides, profile: Any) -> dict[str, Any]:
    """One confirmation as :func:`tuner.study.confirm.run_confirmation` runs its looks, and
    its verdict by :func:`tuner.study.confirm.choose`."""
    from tuner.study.confirm import choose, decision_metric

    metric = decision_metric(Objective.BALANCED)
    n = design.first
    while True:
        a, b = sides.upto(n)
        look = judge_look(A_ARM, a, B_ARM, b, design, profile, metric)
        if design.fixed or look.done or n >= design.cap:
            break
        n += 1
    results = {**look.to_results(), "kind": "confirmation"}
    row = ComparisonRow(0, 0.0, "", "", "", A_ARM.config, B_ARM.config, n, results,
                        look.comparison.to_verdicts(), None, None)  # fmt: skip
    confirmed = choose([row], Objective.BALANCED)
    assert confirmed is not None
    verdicts = {m["metric"]: m["verdict"] for m in results["metrics"]}
    return {
        "deciding": look.step.verdict,
        "balanced": confirmed.verdict,
        "composite_interval_above_1": confirmed.score_low > 1.0,
        "score_above_1": confirmed.score > 1.0,
        "latency_worse": verdicts.get(LATENCY) == WORSE,
        "memory_worse": verdicts.get("memory_gib") == WORSE,
        "launches": len(a) + len(b),
    }


def simulate_balanced(
    design_name: str,
    sc: Balanced,
    draw: JointDraw,
    memories: Sequence[int],
    walls: Sequence[float],
    args: argparse.Namespace,
    seed: int,
) -> dict[str, Any]:
    design = tuner_design(design_name, args.first, args.cap, args.min_effect)
    outs = []
    for rep in range(args.reps):
        rng = np.random.default_rng([seed, rep, zlib.crc32(sc.name.encode())])
        profile = joint_profile(draw, args.calibration, rng)
        sides = JointSides(sc, draw, memories, walls, rng)
        outs.append(confirm_once(design, sides, profile))
    n = len(outs)
    deciding = [o for o in outs if o["deciding"] == BETTER]
    kept = [o for o in deciding if o["balanced"] == BETTER]
    lost = [o for o in deciding if o["balanced"] != BETTER]
    return {
        "deciding_better": len(deciding) / n,
        "balanced_better": sum(o["balanced"] == BETTER for o in outs) / n,
        "composite_interval_better": sum(o["composite_interval_above_1"] for o in outs) / n,
        "kept_of_deciding": len(kept) / len(deciding) if deciding else None,
        "lost_to": {
            "latency worse": sum(o["latency_worse"] for o in lost) / n,
            "memory worse": sum(o["memory_worse"] for o in lost) / n,
            "score not above 1": sum(not o["score_above_1"] for o in lost) / n,
        },
        "launches_median": float(np.median([o["launches"] for o in outs])),
    }


def run_balanced(args: argparse.Namespace) -> dict[str, Any]:
    observed = load_observed()
    lr, wr = joint_residuals(observed)
    draws = joint_draws(lr, wr)
    memories = [o.memory_bytes for o in observed if o.memory_bytes]
    warm = [o.wall_s for o in observed if o.wall_s and (o.startup_s or 0) < COLD_S]
    lcorr = float(np.corrcoef(lr.T)[0, 1])
    wcorr = float(np.corrcoef(wr.T)[0, 1])
    out: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json_out"},
        "objective": "balanced",
        "joint": {
            "launch_residuals": len(lr),
            "window_residuals": len(wr),
            "launch_sd": [float(x) for x in np.sqrt((lr**2).mean(axis=0))],
            "window_sd": [float(x) for x in np.sqrt((wr**2).mean(axis=0))],
            "launch_correlation": lcorr,
            "window_correlation": wcorr,
            "memories": len(memories),
            "memory_spread": (max(memories) - min(memories)) / min(memories),
        },
        "results": {},
    }
    for noise in args.noise:
        asked = [d for d in args.designs if d.removesuffix("-trend") in BALANCED_DESIGNS]
        for design in asked or BALANCED_DESIGNS:
            for sc in BALANCED_SCENARIOS:
                res = simulate_balanced(
                    design, sc, draws[noise], memories, warm, args, zlib.crc32(noise.encode())
                )
                out["results"].setdefault(noise, {}).setdefault(design, {})[sc.name] = res
        print(f"[balanced] {noise}: done", file=sys.stderr, flush=True)
    return out


def report_balanced(out: dict[str, Any]) -> str:
    j = out["joint"]
    lines = [
        f"joint noise of output tok/s and P99 E2E: {j['launch_residuals']} launch and "
        f"{j['window_residuals']} window residuals; launch SD {j['launch_sd'][0]:.3f} / "
        f"{j['launch_sd'][1]:.3f}, window SD {j['window_sd'][0]:.3f} / {j['window_sd'][1]:.3f} "
        f"(log), correlation {j['launch_correlation']:+.2f} (launches) / "
        f"{j['window_correlation']:+.2f} (windows); memory of {j['memories']} launches, "
        f"spread {j['memory_spread']:.2%}",
        "",
    ]

    def cell(r: dict[str, Any]) -> str:
        lost = r["lost_to"]
        return (
            f"{r['deciding_better']:.1%} / {r['balanced_better']:.1%} / "
            f"{r['composite_interval_better']:.1%}; {r['launches_median']:g}; "
            f"{lost['latency worse']:.1%}, {lost['memory worse']:.1%}, "
            f"{lost['score not above 1']:.1%}"
        )

    caption = (
        "'better' by the deciding metric / by the balanced verdict / by the composite's own "
        "interval; launches (median); lost to E2E worse, memory worse, score <= 1"
    )
    return "\n".join(lines + tables(out["results"], caption, cell))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=2000)
    p.add_argument("--first", type=int, default=3, help="launches a side at the first look")
    p.add_argument("--cap", type=int, default=6, help="launch budget a side")
    p.add_argument("--min-effect", type=float, default=0.05)
    p.add_argument("--calibration", type=int, default=5, help="launches of the calibration")
    p.add_argument("--outlier", type=float, default=0.6, help="one launch's factor")
    p.add_argument("--ratios", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 1.2])
    p.add_argument("--noise", action="append", choices=["parametric", "resample"])
    p.add_argument("--designs", type=lambda s: s.split(","), default=list(DESIGNS))
    p.add_argument("--drift", type=float, default=0.0, help="log change a launch (-0.08)")
    p.add_argument("--step", type=float, default=0.0, help="log change from --step-at on")
    p.add_argument("--step-at", type=int, default=3, help="launch position (0 first)")
    p.add_argument(
        "--noisier",
        type=float,
        default=1.0,
        help="the comparison's noise SD over the calibration's (a noisier day, a noisier B)",
    )
    p.add_argument(
        "--contradicts",
        type=float,
        default=noise_model.CONTRADICTS,
        help="what-if: the profile guard's F-test level (tuner's: tuner.scoring.noise.CONTRADICTS)",
    )
    p.add_argument(
        "--own-floor",
        action="store_true",
        help="what-if: a pooled variance never below the comparison's own (not tuner's rule)",
    )
    p.add_argument("--order", choices=["counterbalanced", "alternating"], default="counterbalanced")
    p.add_argument(
        "--objective",
        choices=["throughput", "balanced"],
        default="throughput",
        help="balanced: the study confirmation's verdict for the balanced objective",
    )
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    args.noise = args.noise or ["parametric", "resample"]
    _what_if_guard(args.contradicts, args.own_floor)
    unknown = set(args.designs) - {*DESIGNS, *EXTRA_DESIGNS, *TREND_DESIGNS}
    if unknown:
        known = ", ".join((*DESIGNS, *EXTRA_DESIGNS, *TREND_DESIGNS))
        p.error(f"unknown design(s) {sorted(unknown)}: {known}")
    if args.objective == "balanced":
        out = run_balanced(args)
        print(report_balanced(out))
    else:
        out = run_bench(args)
        print(report(out))
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _what_if_guard(level: float, own_floor: bool) -> None:
    """Another profile guard for this process: the F test at ``level``, and with
    ``own_floor`` a pooled variance raised to the comparison's own where that is larger. Only
    the bench's comparisons see it; tuner's rule stays :func:`tuner.scoring.noise._pooled`."""
    noise_model.CONTRADICTS = level
    if own_floor:
        pooled = noise_model._pooled

        def floored(own: tuple[float, int] | None, profile: Components) -> tuple[float, int] | str:
            found = pooled(own, profile)
            if isinstance(found, str) or own is None:
                return found
            return max(found[0], own[0]), found[1]

        noise_model._pooled = floored


if __name__ == "__main__":
    raise SystemExit(main())
