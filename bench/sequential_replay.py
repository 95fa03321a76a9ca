"""Launches per decision: sequential confirmation against the fixed three-a-side design, with
Welch's interval and with a rank-based (Hodges-Lehmann) one, on the recorded launch noise.

Each simulated comparison launches the defaults (A) and a candidate (B) in turns; a launch's
score is the side's true score times log-normal noise with the launch-to-launch spread of the
study's score (``bench.replay``: pooled over its repeated launches). Scenarios: B/A
truly 1 (no difference), 1.15, 1.30, and the table's own best row against its defaults; each
clean and with one outlying launch (one of the first three launches of a random side scaled by
``--outlier``, as a launch that another process disturbed).

Designs (``tuner.scoring.sequential``): the fixed design (three a side, 95 %, as a study
confirms today) and the sequential one (from two a side, one pair per look, up to ``--cap``
a side, equivalence within ``--margin``), each with Welch's interval and Hodges-Lehmann's.
A sequential design looks several times, so its per-look confidence is calibrated: the lowest
of ``--confidences`` whose false decisions (better or worse when B/A is 1, clean noise) are no
more frequent than the fixed Welch design's, on the same draws.

    .venv/bin/python bench/sequential_replay.py --reps 1000 --json-out /tmp/sequential.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.replay import SCORE, load_table  # noqa: E402
from bench.robust import hodges_lehmann_interval, screened_interval  # noqa: E402
from tuner.scoring.sequential import (  # noqa: E402
    EQUIVALENT,
    Interval,
    SequentialPlan,
    run_sequential,
)
from tuner.scoring.significance import BETTER, WORSE, ratio_interval  # noqa: E402

DATASETS = {
    "h200-chat": ("studies/results/ernie-0.3b-h200/tuner-gpu.db", "ernie-0.3b-h200-chat"),
    "h200-heavy": ("studies/results/ernie-0.3b-h200-heavy/heavy-h200.db", "ernie-0.3b-h200-heavy"),
}


def intervals(sigma: float, k: float) -> dict[str, Interval]:
    """The intervals compared: Welch's, Hodges-Lehmann's, Welch's on screened launches."""
    return {
        "welch": ratio_interval,
        "hl": hodges_lehmann_interval,
        "screened": screened_interval(sigma, k),
    }


@dataclass(frozen=True)
class Scenario:
    name: str
    ratio: float  # true B/A
    outlier: float | None  # the factor of one outlying launch, None: clean


class Launches:
    """One comparison's launches: log-normal around each side's truth, one maybe an outlier."""

    def __init__(self, sc: Scenario, sigma: float, rng: np.random.Generator) -> None:
        self.truth = {"a": 1.0, "b": sc.ratio}
        self.sigma, self.rng = sigma, rng
        self.count = {"a": 0, "b": 0}
        self.outlier_at = None
        if sc.outlier is not None:
            self.outlier_at = ("a" if rng.random() < 0.5 else "b", int(rng.integers(3)))
        self.factor = sc.outlier or 1.0

    def __call__(self, side: str) -> float:
        i = self.count[side]
        self.count[side] += 1
        value = self.truth[side] * math.exp(self.sigma * float(self.rng.standard_normal()))
        return value * self.factor if self.outlier_at == (side, i) else value


def simulate(
    sc: Scenario, sigma: float, plan: SequentialPlan, interval: Interval, reps: int, seed: int
) -> dict[str, Any]:
    verdicts: Counter[str] = Counter()
    launches = []
    for rep in range(reps):
        rng = np.random.default_rng([seed, rep, zlib.crc32(sc.name.encode())])
        step = run_sequential(Launches(sc, sigma, rng), plan, interval)
        verdicts[step.verdict] += 1
        launches.append(step.n_a + step.n_b)
    return {
        "verdicts": {k: v / reps for k, v in sorted(verdicts.items())},
        "launches_mean": statistics.fmean(launches),
        "launches_p90": float(np.quantile(launches, 0.9)),
        "correct": _rate(verdicts, sc, reps, correct=True),
        "wrong": _rate(verdicts, sc, reps, correct=False),
    }


def _rate(verdicts: Counter[str], sc: Scenario, reps: int, *, correct: bool) -> float:
    """No difference: correct = equivalent, wrong = better or worse. A real difference:
    correct = better, wrong = worse or equivalent."""
    if sc.ratio == 1.0:
        keys = (EQUIVALENT,) if correct else (BETTER, WORSE)
    else:
        keys = (BETTER,) if correct else (WORSE, EQUIVALENT)
    return sum(verdicts[k] for k in keys) / reps


def calibrate(
    interval: Interval,
    null: Scenario,
    sigma: float,
    args: argparse.Namespace,
    budget: float,
    seed: int,
) -> tuple[float, list[dict[str, float]]]:
    """The lowest per-look confidence whose false-decision rate on ``null`` (the same draws
    as the fixed design's) is within ``budget``."""
    tried = []
    for confidence in sorted(args.confidences):
        plan = _seq_plan(args, confidence)
        wrong = simulate(null, sigma, plan, interval, args.reps, seed)["wrong"]
        tried.append({"confidence": confidence, "null_wrong": wrong})
        if wrong <= budget:
            return confidence, tried
    return max(args.confidences), tried


def _fixed(n: int, args: argparse.Namespace) -> SequentialPlan:
    return SequentialPlan(first=n, cap=n, confidence=0.95, margin=args.margin)


def _seq_plan(args: argparse.Namespace, confidence: float) -> SequentialPlan:
    return SequentialPlan(first=args.first, cap=args.cap, confidence=confidence, margin=args.margin)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json_out"}}
    out["datasets"] = {}
    fixed = _fixed(3, args)
    for label, (path, study) in DATASETS.items():
        if args.dataset and label not in args.dataset:
            continue
        table = load_table(REPO_ROOT / path, study, label)
        sigma = table.noise().launch[SCORE]
        best = table.truth(table.best()).score or 1.0
        scenarios = [
            Scenario(f"{kind}-x{ratio:.3f}", ratio, None if kind == "clean" else args.outlier)
            for ratio in (1.0, 1.15, 1.30, round(best, 3))
            for kind in ("clean", "outlier")
        ]
        seed = zlib.crc32(label.encode())
        null = simulate(scenarios[0], sigma, fixed, ratio_interval, args.reps, seed)
        kinds = intervals(sigma, args.screen_k)
        designs = {f"fixed-3-{name}": (fixed, iv) for name, iv in kinds.items()}
        for n in range(4, args.cap + 1):  # what more launches buy a fixed design
            designs[f"fixed-{n}-welch"] = (_fixed(n, args), ratio_interval)
        calibration = {}
        for name, iv in kinds.items():
            confidence, tried = calibrate(iv, scenarios[0], sigma, args, null["wrong"], seed)
            calibration[name] = {"confidence": confidence, "tried": tried}
            designs[f"sequential-{name}"] = (_seq_plan(args, confidence), iv)
        results = {
            d: {sc.name: simulate(sc, sigma, plan, iv, args.reps, seed) for sc in scenarios}
            for d, (plan, iv) in designs.items()
        }
        out["datasets"][label] = {
            "launch_sd_of_score": sigma,
            "best_vs_defaults": best,
            "fixed_null_wrong": null["wrong"],
            "calibration": calibration,
            "designs": {
                d: {"confidence": p.confidence, "cap": p.cap} for d, (p, _) in designs.items()
            },
            "results": results,
        }
        print(f"[sequential] {label}: done", file=sys.stderr, flush=True)
    return out


def report(out: dict[str, Any]) -> str:
    lines = []
    for label, data in out["datasets"].items():
        scen = list(next(iter(data["results"].values())))
        lines += [
            f"{label}: launch-to-launch SD of the score {data['launch_sd_of_score']:.3f} (log), "
            f"fixed design's false decisions at B/A = 1: {data['fixed_null_wrong']:.1%}",
            "",
            "| design | per-look confidence | "
            + " | ".join(f"{s}: launches / correct / wrong" for s in scen)
            + " |",
            "|---|---|" + "---|" * len(scen),
        ]
        for d, res in data["results"].items():
            cells = [
                f"{r['launches_mean']:.1f} / {r['correct']:.0%} / {r['wrong']:.1%}"
                for r in res.values()
            ]
            conf = data["designs"][d]["confidence"]
            lines.append(f"| {d} | {conf:g} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", action="append", default=[], choices=sorted(DATASETS))
    p.add_argument("--reps", type=int, default=1000)
    p.add_argument("--first", type=int, default=2, help="launches a side at the first look")
    p.add_argument("--cap", type=int, default=6, help="launches a side at most")
    p.add_argument("--screen-k", type=float, default=3.0, help="screen: spreads from the median")
    p.add_argument("--margin", type=float, default=0.10, help="equivalence margin on B/A")
    p.add_argument("--outlier", type=float, default=0.6, help="one launch's score factor")
    p.add_argument(
        "--confidences",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.95, 0.955, 0.96, 0.965, 0.97, 0.975, 0.98, 0.985, 0.99, 0.995],
    )
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    out = run_bench(args)
    print(report(out))
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
