"""Search efficiency on a tabular replay of measured trials: GPU-time until a configuration
within 5 % of the best known is found, for tuner's sampler against a grid, random search and
Optuna's other samplers; and what early stopping saves on the same paths.

The tables are the committed studies (``bench.replay``): every measured configuration
with its launches' numbers, start-up and measurement seconds. A replayed launch of a row draws
its numbers around the row's value with the launch-to-launch noise the study's repeated
launches measured (log-normal, with the metrics' covariance), and costs the seconds of one of
the row's recorded launches. The space holds only the knob values the table measured;
combinations it never measured take their nearest row's numbers, flagged (``--space table``
excludes them instead; ``bench.replay_space`` explains both).

Samplers, each told what a study tells Optuna (three objectives, the SLO as constraints,
penalties for a configuration that cannot run), vLLM's defaults enqueued as trial 0:

- ``tpe``: tuner's, exactly as ``tuner.study.sampling.open_optuna_study`` configures it:
  ``TPESampler(multivariate=True, n_startup_trials=max(3, trials // 3))``;
- ``tpe-score``: the same sampler on a single objective, the preset's score (relative to trial
  0, as the study's ranking scores), with the same constraints: what the study's ranking asks
  for, where the three objectives make the sampler spread over the whole Pareto front;
- ``random``: ``RandomSampler``;
- ``grid``: the nested loops of vLLM's auto_tune.sh over every knob's values, defaults first;
- ``nsga2``: ``NSGAIISampler(population_size=max(4, trials // 3))`` (its default of 50 would
  make every generation this study reaches a random one);
- ``gp``: ``GPSampler(n_startup_trials=max(3, trials // 3))`` (needs torch and scipy, left out
  with a note when they are missing). ``QMCSampler`` is not run: it samples categorical
  parameters with its independent (random) sampler, so on this space it is random search.

"Found" is the first trial whose row's table value stands within ``--target`` of the best row
by the ranking rule (SLO-feasible, then the score): what the sampler evaluated, whatever the
noisy launch showed it. A run that has not found it after ``--max-trials`` is censored there.

Early stopping (``tuner.scoring.early_stop``) is applied afterwards to the same paths, for each
``--stop-z``: a trial whose first window is below the best-so-far's first window by more than
the noise allowance costs only its start-up, warm-up and first window, counts as not found, and
is no reference for later trials (the sampler was told the full numbers in both accounts, so
the paths are the same and the difference is the rule's alone).

    .venv/bin/python bench/search_replay.py --seeds 20 --json-out /tmp/search-replay.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from replay_report import add_ratio_intervals, report, stopping, summarise  # noqa: E402

from bench.replay import METRICS, SCORE, Noise, Row, Table, load_table  # noqa: E402
from bench.replay_space import ReplaySpace  # noqa: E402
from tuner.domain import Slo  # noqa: E402
from tuner.scoring import objectives as scoring  # noqa: E402
from tuner.scoring.early_stop import StopPolicy, early_stop, meets_slo_within_noise  # noqa: E402
from tuner.scoring.ranking import Standing  # noqa: E402

DATASETS = {
    "h200-chat": ("studies/results/ernie-0.3b-h200/tuner-gpu.db", "ernie-0.3b-h200-chat"),
    "h200-heavy": ("studies/results/ernie-0.3b-h200-heavy/heavy-h200.db", "ernie-0.3b-h200-heavy"),
    "cpu": ("studies/results/tiny-ernie-cpu-replay/replay-cpu.db", "tiny-ernie-cpu-replay"),
}
SAMPLERS = ("tpe", "tpe-score", "random", "grid", "nsga2", "gp")
SCALAR = frozenset({"tpe-score"})  # told the preset's score, not the three objectives


# -- replayed launches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    row: Row
    imputed: bool
    target: bool  # the row's table value is within the target of the best
    seconds: float  # the launch in full
    stopped_seconds: float  # the launch stopped after its first window
    values: list[float]  # Optuna's objective values
    constraints: list[float]
    full: Standing
    first: dict[str, float] | None  # the first window's numbers (None: it never served)
    first_score: float | None


def _root(cov: Sequence[Sequence[float]]) -> np.ndarray:
    """A matrix M with M M^T = cov (cov positive semi-definite, maybe singular)."""
    vals, vecs = np.linalg.eigh(np.asarray(cov, dtype=float))
    return np.asarray(vecs * np.sqrt(np.clip(vals, 0.0, None)))


class Replayer:
    """Draws launches of a table's rows with its recorded noise."""

    def __init__(self, table: Table, noise: Noise, target: float) -> None:
        self.table, self.noise = table, noise
        self._launch = _root(noise.launch_cov)
        self._first = _root(noise.first_cov)
        self._bias = np.array([noise.first_bias[m] for m in METRICS])
        best = table.truth(table.best())
        self.best_score = float(best.score or 0.0)
        self._target = {
            r.number: (t := table.truth(r)).feasible == best.feasible
            and (t.score or 0.0) >= (1.0 - target) * self.best_score
            for r in table.rows
        }

    def is_target(self, row: Row) -> bool:
        return self._target[row.number]

    def observe(self, row: Row, imputed: bool, rng: np.random.Generator) -> Observation:
        t = self.table
        if row.finding is not None:
            cost = float(rng.choice(row.failed_s))
            values = [0.0, t.memory_ceiling_gib, scoring.PENALTY_LATENCY_MS]
            return Observation(
                row, imputed, False, cost, cost, values, [scoring.VIOLATED] * 4,
                t.standing(None, row.number), None, None,
            )  # fmt: skip
        launch = row.launches[int(rng.integers(len(row.launches)))]
        center = np.log([row.center(m) for m in METRICS])
        logs = center + self._launch @ rng.standard_normal(len(METRICS))
        first_logs = logs + self._bias + self._first @ rng.standard_normal(len(METRICS))
        err = row.center("error_rate")
        full = {**dict(zip(METRICS, np.exp(logs).tolist(), strict=True)), "error_rate": err}
        first = {**dict(zip(METRICS, np.exp(first_logs).tolist(), strict=True)), "error_rate": err}
        return Observation(
            row=row,
            imputed=imputed,
            target=self.is_target(row),
            seconds=launch.seconds,
            stopped_seconds=launch.seconds - sum(launch.window_s[1:]),
            values=t.values_of(full),
            constraints=t.constraints(full),
            full=t.standing(full, row.number),
            first=first,
            first_score=t.score(first),
        )


# -- accounts: without and with early stopping ------------------------------------------------


@dataclass
class Account:
    policy: StopPolicy | None
    slo: Slo
    spent: float = 0.0
    found_s: float | None = None
    found_trials: int | None = None
    stopped: int = 0
    stopped_targets: int = 0
    saved: float = 0.0
    _best: Observation | None = None

    def add(self, obs: Observation, index: int) -> None:
        stop = False
        if self.policy is not None and index > 0 and obs.first is not None:
            margin = self.policy.margin
            partial = Standing(meets_slo_within_noise(obs.first, self.slo, margin), obs.first_score)
            ref = self._best
            reference = None if ref is None else Standing(ref.full.feasible, ref.first_score)
            stop = early_stop(partial, reference, self.policy).stop
        self.spent += obs.stopped_seconds if stop else obs.seconds
        if stop:
            self.stopped += 1
            self.stopped_targets += obs.target
            self.saved += obs.seconds - obs.stopped_seconds
            return
        if self._best is None or obs.full.key() > self._best.full.key():
            self._best = obs
        if obs.target and self.found_s is None:
            self.found_s, self.found_trials = self.spent, index + 1


# -- one replayed search ---------------------------------------------------------------------


def make_sampler(name: str, seed: int, trials: int) -> optuna.samplers.BaseSampler:
    startup = max(3, trials // 3)
    if name in ("tpe", "tpe-score"):  # as tuner.study.sampling.open_optuna_study
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=startup)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, trials // 3))
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    raise ValueError(f"unknown sampler {name!r}")


def gp_missing() -> str | None:
    """Why GPSampler cannot run here, or None."""
    for module in ("torch", "scipy"):
        try:
            __import__(module)
        except ImportError:
            return f"GPSampler needs {module}, which is not installed"
    return None


@dataclass
class Run:
    sampler: str
    seed: int
    trials: int = 0
    imputed: int = 0
    accounts: dict[str, Account] = field(default_factory=dict)
    wall_s: float = 0.0


def replay(
    space: ReplaySpace, rep: Replayer, sampler: str, seed: int, args: argparse.Namespace
) -> Run:
    rng = np.random.default_rng(
        [seed, zlib.crc32(sampler.encode()), zlib.crc32(rep.table.name.encode())]
    )
    policies = {"none": None} | {
        f"z={z:g}": StopPolicy(rep.noise.launch[SCORE], rep.noise.first[SCORE], z)
        for z in args.stop_z
    }
    slo = rep.table.slo
    run = Run(sampler, seed, accounts={k: Account(p, slo) for k, p in policies.items()})
    started = time.perf_counter()
    for index, _ in enumerate(_evaluations(space, sampler, seed, args, rep, rng, run)):
        run.trials = index + 1
        if all(a.found_s is not None for a in run.accounts.values()):
            break
        if sampler != "grid" and index + 1 >= args.max_trials:
            break
    run.wall_s = time.perf_counter() - started
    return run


def _evaluations(
    space: ReplaySpace,
    sampler: str,
    seed: int,
    args: argparse.Namespace,
    rep: Replayer,
    rng: np.random.Generator,
    run: Run,
) -> Iterator[Observation]:
    """Evaluate one configuration after another (the caller decides when to stop)."""

    def evaluate(index: int, config: Any) -> Observation:
        point = space.lookup(config)
        obs = rep.observe(point.row, point.imputed, rng)
        run.imputed += point.imputed
        for account in run.accounts.values():
            account.add(obs, index)
        return obs

    if sampler == "grid":
        for index, config in enumerate(space.grid()):
            yield evaluate(index, config)
        return
    scalar = sampler in SCALAR
    directions = ["maximize"] if scalar else list(scoring.DIRECTIONS)
    study = optuna.create_study(
        directions=directions, sampler=make_sampler(sampler, seed, args.trials)
    )
    study.enqueue_trial(space.params_of(rep.table.baseline.config))
    reference: list[float] | None = None  # trial 0's numbers, as the study scores against
    index = 0
    while True:
        trial = study.ask()
        obs = evaluate(index, space.suggest(trial))
        reference = reference or obs.values
        for name, value in zip(scoring.CONSTRAINT_NAMES, obs.constraints, strict=True):
            trial.set_constraint(name, value)
        if scalar:
            study.tell(trial, scoring.score_values(obs.values, rep.table.objective, reference))
        else:
            study.tell(trial, obs.values)
        index += 1
        yield obs


def describe(table: Table, space: ReplaySpace, rep: Replayer) -> dict[str, Any]:
    noise = rep.noise
    best = table.best()
    return {
        "study": table.study,
        "objective": table.objective.value,
        "rows": len(table.rows),
        "findings": sum(r.finding is not None for r in table.rows),
        "launches": sum(len(r.launches) for r in table.rows),
        "faults_left_out": table.skipped,
        "space": space.mode,
        "space_size": len(space.grid()),
        "knobs": {k: [str(v) for v in vs] for k, vs in space.choices.items()},
        "best": {"trial": best.number, "config": best.config.to_dict(), "score": rep.best_score},
        "targets": [r.number for r in table.rows if rep.is_target(r)],
        "noise": {
            "launch_sd": dict(noise.launch),
            "first_window_sd": dict(noise.first),
            "first_window_bias": dict(noise.first_bias),
            "repeated_configs": noise.repeated,
            "dof": noise.dof,
        },
    }


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")  # experimental samplers, independent sampling of a knob
    samplers = list(args.samplers)
    notes = []
    if "gp" in samplers and (why := gp_missing()):
        samplers.remove("gp")
        notes.append(why + ": the gp sampler was left out")
    out: dict[str, Any] = {"args": _args_json(args), "notes": notes, "datasets": {}}
    for label, path, study in _datasets(args):
        table = load_table(
            REPO_ROOT / path if not Path(path).is_absolute() else Path(path), study, label
        )
        space = ReplaySpace(table, args.space)
        noise = table.noise()
        rep = Replayer(table, noise, args.target)
        data: dict[str, Any] = {"table": describe(table, space, rep), "samplers": {}}
        for sampler in samplers:
            runs = [replay(space, rep, sampler, seed, args) for seed in range(args.seeds)]
            data["samplers"][sampler] = {
                "search": summarise(runs),
                "stopping": {k: stopping(runs, k) for k in runs[0].accounts if k != "none"},
                "per_seed": [
                    {
                        "seed": r.seed,
                        "trials": r.trials,
                        "gpu_s_to_target": r.accounts["none"].found_s,
                    }
                    for r in runs
                ],
            }
            print(f"[replay] {label} {sampler}: done", file=sys.stderr, flush=True)
        add_ratio_intervals(data["samplers"])
        out["datasets"][label] = data
    return out


def _datasets(args: argparse.Namespace) -> list[tuple[str, str, str | None]]:
    if not args.dataset:
        return [(k, p, s) for k, (p, s) in DATASETS.items()]
    out = []
    for item in args.dataset:
        if item in DATASETS:
            out.append((item, *DATASETS[item]))
            continue
        path, _, study = item.partition(":")
        out.append((Path(path).stem + (f":{study}" if study else ""), path, study or None))
    return out


def _args_json(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k != "json_out"}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = ", ".join(DATASETS)
    p.add_argument(
        "--dataset", action="append", default=[], help=f"{known}, or FILE.db[:STUDY]; repeatable"
    )
    p.add_argument("--samplers", type=lambda s: s.split(","), default=list(SAMPLERS))
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--trials", type=int, default=16, help="the study's trials (startup sizes)")
    p.add_argument("--max-trials", type=int, default=120, help="censor a run after this many")
    p.add_argument("--target", type=float, default=0.05, help="within this of the best score")
    p.add_argument("--space", choices=("nearest", "table"), default="nearest")
    p.add_argument("--stop-z", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 2.0])
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    results = run_bench(args)
    print(report(results))
    for note in results["notes"]:
        print(f"note: {note}")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
