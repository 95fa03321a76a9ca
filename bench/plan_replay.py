"""Issue 31's acceptance benchmark: GPU-time until a configuration within 5 % of the best is
evaluated, for tuner's lever plan (defaults, diagnosis, one screening trial per planned knob,
then TPE over the kept knobs) against random search over the full space (the card's knobs and
every single-GPU lever that keeps the model's outputs), on a replay of a committed H200 study.

The surface. A configuration the table measured (``bench.replay.load_table``) has its
table value: the geometric mean of its launches. Any other configuration is *modelled*: each
metric's log is the defaults' plus one effect per knob value that differs from the defaults,
the effects fitted by weighted least squares (weight: the row's launches) on the measured rows,
minimum-norm where the rows do not separate two effects (a row that changed two knobs splits
its effect between them). A knob set to the value vLLM resolves it to anyway (``levers.
vllm_default`` with the shipped flag list's defaults: async scheduling on vLLM 0.26.0 on a GPU)
is the same server as the knob unset, in the fit and in the lookup. A knob value no row measured
has no effect (or, with ``--prior-sd``, an effect drawn once per seed from a normal prior).
Every evaluation is flagged measured or modelled and the counts are printed: on the heavy table
nearly everything random search evaluates is modelled.

An evaluation's observed output tok/s is the surface's value times ``exp(N(0, launch_sd))``
(``--launch-sd``, default the H200's 0.068 of ``docs/results/noise-h200.md``, as
``tuner.study.plan.DEFAULT_LAUNCH_SD``); the other metrics are the surface's. It costs the
seconds of one of the row's recorded launches (start-up, warm-up, windows), or for a modelled
configuration the median over the table's launches. The study's first launch (its defaults')
started on cold compile caches, whatever its configuration: its start-up beyond the median of
the others is charged to no configuration but once to every search, on its first launch. Other
launches cost what they took: a configuration that compiles something new starts slower
anywhere. A configuration the space's rules refuse
costs nothing (the study prunes it before launch). "Found" is the first evaluated configuration
whose surface value stands within ``--target`` of the best of the surface by the ranking rule,
whatever its noisy launch showed.

The diagnosis is ``tuner.scoring.regime.diagnose`` of the defaults' stored trial. Where the
stored telemetry cannot name a regime (the committed H200 data predates ``api_server_cpu`` and
the GPU's utilization), ``--regime`` is used instead (default ``frontend-bound``: 256 streams
of a 0.3B model, where ``docs/results/ernie-0.3b-h200-heavy.md`` found stream_interval's gain),
and the output says so.

    OMP_NUM_THREADS=1 .venv/bin/python bench/plan_replay.py --seeds 50 --json-out plan.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from scipy import stats

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from replay_report import quantile  # noqa: E402
from search_replay import DATASETS as SEARCH_DATASETS  # noqa: E402

from bench.replay import METRICS, Launch, Table, load_table  # noqa: E402
from tuner.catalog import levers  # noqa: E402
from tuner.catalog.gpus import get_gpu  # noqa: E402
from tuner.catalog.models import resolve_model  # noqa: E402
from tuner.db.repository import Repository  # noqa: E402
from tuner.db.session import make_engine  # noqa: E402
from tuner.domain import Objective, Regime, ServingConfig, TrialResult  # noqa: E402
from tuner.errors import UsageError  # noqa: E402
from tuner.load import get_workload  # noqa: E402
from tuner.scoring import objectives as scoring  # noqa: E402
from tuner.scoring.ranking import Standing  # noqa: E402
from tuner.scoring.regime import Diagnosis, diagnose  # noqa: E402
from tuner.space import SearchSpace  # noqa: E402
from tuner.study.plan import (  # noqa: E402
    DEFAULT_LAUNCH_SD,
    RECIPE,
    Plan,
    declared_defaults,
    make_plan,
    predict,
    screen_configs,
    screened,
    space_of,
)
from tuner.study.sampling import Untried  # noqa: E402
from tuner.vllm.flags import FlagCatalog, shipped  # noqa: E402

THROUGHPUT = "output_throughput"
MEMORY = "memory_gib"
MEMORY_FLOOR = 0.01  # a fitted memory effect below 1 % is a reading's rounding, not the knob's
STRATEGIES = ("plan", "random", "random-defaults-first")
__all__ = ["METRICS", "Account", "Bench", "Surface", "run_plan", "run_random", "shipped", "spaces"]
Key = frozenset[tuple[str, Any]]

DATASETS = {
    **SEARCH_DATASETS,
    # The lever plan's own H200 run (docs/results/plan-h200.md): the defaults, the recipe and
    # its leave-one-out trials, with the telemetry the diagnosis reads.
    "h200-plan": ("studies/results/plan-h200/2026-12-03/tuner-plan.db", "plan-ernie-256"),
}


def config_key(config: ServingConfig, resolved: Mapping[str, Any] | None = None) -> Key:
    """A configuration as the set of its set knobs, vLLM's defaults left out: a knob unset, and
    one set to the value vLLM resolves it to anyway (``resolved``, e.g. async scheduling on
    vLLM 0.26.0 on a GPU), are the same server."""
    same = resolved or {}
    return frozenset(
        (k, _hashable(v))
        for k, v in config.to_dict().items()
        if v is not None and not (k in same and v == same[k])
    )


def resolved_defaults(card: SearchSpace) -> dict[str, Any]:
    """What the card's vLLM resolves each lever to on its GPU when no flag sets it, where
    tuner knows (``tuner.catalog.levers.vllm_default``, the rule the plan screens by)."""
    declared = declared_defaults(card)
    found = {k: levers.vllm_default(k, card.gpu, card.given_fixed, declared) for k in levers.LEVERS}
    return {k: v for k, v in found.items() if v is not None}


def _hashable(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v


# -- the surface --------------------------------------------------------------------------


class Surface:
    """Every configuration's true numbers: the table's where it measured them, else the
    additive model's (see the module docstring). ``prior``: the effect of a knob value that no
    row measured (called once per value, cached); None gives no effect. ``resolved``: the
    values vLLM gives knobs no flag sets (``resolved_defaults``); setting one changes nothing."""

    def __init__(
        self,
        table: Table,
        prior: Callable[[tuple[str, Any]], float] | None = None,
        resolved: Mapping[str, Any] | None = None,
    ) -> None:
        self.table, self._prior, self.resolved = table, prior, dict(resolved or {})
        self.base = self._values(table.baseline.config)
        self._base_logs = np.log([table.baseline.center(m) for m in METRICS])
        self._error = table.baseline.center("error_rate")
        measured = [r for r in table.rows if r.launches]
        self._rows = {self.key(r.config): r for r in table.rows}
        feats = sorted(
            {f for r in measured for f in self._features(r.config)}, key=lambda f: repr(f)
        )
        self.features: tuple[tuple[str, Any], ...] = tuple(feats)
        self.effects: dict[tuple[str, Any], np.ndarray] = {}
        if feats:
            x = np.array([[f in self._features(r.config) for f in feats] for r in measured], float)
            y = np.log([[r.center(m) for m in METRICS] for r in measured]) - self._base_logs
            w = np.sqrt([len(r.launches) for r in measured])[:, None]
            coef = np.linalg.lstsq(x * w, y * w, rcond=None)[0]
            self.effects = {f: coef[i] for i, f in enumerate(feats)}
        mem = METRICS.index(MEMORY)
        # The memory vLLM reserves is gpu_memory_utilization's share of the GPU: a fitted
        # effect below MEMORY_FLOOR is a reading's rounding (the cold first launch's 0.1 GiB),
        # and would make the defaults look best on memory to a three-objective sampler.
        self._memory_moves = {f for f, e in self.effects.items() if abs(e[mem]) >= MEMORY_FLOOR}
        self._drawn: dict[tuple[str, Any], float] = {}

    def key(self, config: ServingConfig) -> Key:
        return config_key(config, self.resolved)

    def _values(self, config: ServingConfig) -> dict[str, Any]:
        return {k: v for k, v in self.key(config)}

    def _features(self, config: ServingConfig) -> set[tuple[str, Any]]:
        values = self._values(config)
        names = set(values) | set(self.base)
        return {(k, values.get(k)) for k in names if values.get(k) != self.base.get(k)}

    def effect_of(self, feature: tuple[str, Any]) -> np.ndarray:
        """The log change of every metric that ``feature`` makes (fitted, or the prior's)."""
        if feature in self.effects:
            return self.effects[feature]
        if self._prior is None:
            return np.zeros(len(METRICS))
        if feature not in self._drawn:
            self._drawn[feature] = self._prior(feature)
        out = np.zeros(len(METRICS))
        out[METRICS.index(THROUGHPUT)] = self._drawn[feature]
        return out

    def numbers(self, config: ServingConfig) -> tuple[dict[str, float] | None, bool]:
        """(metrics or None for a finding, whether the table measured it)."""
        row = self._rows.get(self.key(config))
        feats = self._features(config)
        if row is not None:
            if row.finding is not None:
                return None, True
            out = {m: row.center(m) for m in (*METRICS, "error_rate")}
        else:
            logs = self._base_logs + sum((self.effect_of(f) for f in feats), np.zeros(len(METRICS)))
            out = {
                **dict(zip(METRICS, np.exp(logs).tolist(), strict=True)),
                "error_rate": self._error,
            }
        if not feats & self._memory_moves:
            out[MEMORY] = self.table.baseline.center(MEMORY)
        return out, row is not None

    def standing(self, config: ServingConfig) -> Standing:
        metrics, _ = self.numbers(config)
        return self.table.standing(metrics)

    def best(self, space: SearchSpace) -> tuple[ServingConfig, Standing, bool]:
        """The top of the surface over ``space``: each knob at its value of the largest score
        effect (the model is additive in the log), or a measured row if one stands higher."""
        w = np.array([_score_weight(self.table.objective, m) for m in METRICS])
        values: dict[str, Any] = {}
        for knob in space.searched:
            options = [c for c in space.choices[knob]]
            gains = []
            for c in options:
                probe = space.config_from({knob: c}, where="the surface")
                gains.append(
                    float(
                        w
                        @ sum(
                            (self.effect_of(f) for f in self._features(probe)),
                            np.zeros(len(METRICS)),
                        )
                    )
                )
            values[knob] = options[int(np.argmax(gains))]
        candidates = [space.config_from(values, where="the surface")]
        candidates += [r.config for r in self.table.rows]
        valid = [c for c in candidates if not space.violations(c)]
        top = max(valid, key=lambda c: self.standing(c).key())
        return top, self.standing(top), self.key(top) in self._rows


def _score_weight(objective: Objective, metric: str) -> float:
    """How the log of ``metric`` enters the log of the objective's score (zero if not)."""
    w_thr, w_lat, w_mem = scoring.WEIGHTS[objective]
    return {THROUGHPUT: w_thr, "e2e_p99_ms": -w_lat, "memory_gib": -w_mem}.get(metric, 0.0)


# -- one evaluation, and a search's account -------------------------------------------------


@dataclass
class Account:
    """What one search spent and found."""

    strategy: str
    seed: int
    trials: int = 0
    spent_s: float = 0.0
    found_s: float | None = None
    found_trials: int | None = None
    modelled: int = 0
    pruned: int = 0
    repeats: int = 0  # configurations the sampler drew again, not launched (--repeats skip)
    plan: dict[str, Any] = field(default_factory=dict)


class Bench:
    """A table's surface, the spaces, the diagnosis and the plan, and the evaluation rule."""

    def __init__(self, table: Table, card: SearchSpace, full: SearchSpace, args: Any) -> None:
        self.table, self.card, self.full, self.args = table, card, full, args
        self.launch_sd = float(args.launch_sd)
        # Each launch's log noise: output tok/s at launch_sd, the latencies at the table's own
        # launch SDs; memory and the error rate as the surface has them.
        noise = table.noise().launch
        self.sd = {m: noise[m] for m in ("e2e_p99_ms", "ttft_p99_ms", "itl_p99_ms")}
        self.sd[THROUGHPUT] = self.launch_sd
        first = min((r for r in table.rows if r.launches), key=lambda r: r.number).launches[0]
        others = [ln.startup_s for r in table.rows for ln in r.launches if ln is not first]
        warm_start = statistics.median(others) if others else first.startup_s
        self.first, self.cold_extra_s = first, max(0.0, first.startup_s - warm_start)
        seconds = [self.warm(ln) for r in table.rows for ln in r.launches]
        self.modelled_s = float(args.trial_s or statistics.median(seconds))

    def warm(self, launch: Launch) -> float:
        """``launch``'s seconds, the study's first launch without its cold caches."""
        return launch.seconds - (self.cold_extra_s if launch is self.first else 0.0)

    def surface(self, seed: int) -> Surface:
        resolved = resolved_defaults(self.card)
        if not self.args.prior_sd:
            return Surface(self.table, resolved=resolved)
        sd = float(self.args.prior_sd)

        def prior(feature: tuple[str, Any]) -> float:
            rng = np.random.default_rng([seed, zlib.crc32(repr(feature).encode())])
            return float(rng.normal(0.0, sd))

        return Surface(self.table, prior, resolved)

    def evaluate(
        self,
        surface: Surface,
        config: ServingConfig,
        target: Callable[[Standing], bool],
        rng: np.random.Generator,
        acc: Account,
    ) -> tuple[list[float], list[float], dict[str, float] | None]:
        """Launch ``config`` once on the replay: charge it to ``acc`` and return what Optuna
        is told (values, constraints) and the observed numbers (None: nothing served)."""
        acc.trials += 1
        penalty = [0.0, self.table.memory_ceiling_gib, scoring.PENALTY_LATENCY_MS]
        if self.full.violations(config):
            acc.pruned += 1
            return penalty, [scoring.VIOLATED] * 4, None
        metrics, measured = surface.numbers(config)
        acc.modelled += not measured
        row = surface._rows.get(surface.key(config))
        if acc.spent_s == 0.0:  # the search's first launch: cold compile caches
            acc.spent_s += self.cold_extra_s
        if row is not None and row.launches:
            acc.spent_s += self.warm(row.launches[int(rng.integers(len(row.launches)))])
        elif row is not None:
            acc.spent_s += float(rng.choice(row.failed_s))
        else:
            acc.spent_s += self.modelled_s
        if acc.found_s is None and target(self.table.standing(metrics)):
            acc.found_s, acc.found_trials = acc.spent_s, acc.trials
        if metrics is None:
            return penalty, [scoring.VIOLATED] * 4, None
        seen = {k: v * math.exp(rng.normal(0.0, self.sd.get(k, 0.0))) for k, v in metrics.items()}
        return self.table.values_of(seen), self.table.constraints(seen), seen


def _target(best: Standing, share: float) -> Callable[[Standing], bool]:
    def hit(s: Standing) -> bool:
        return s.feasible == best.feasible and (s.score or 0.0) >= (1 - share) * (best.score or 0.0)

    return hit


def _tell(
    study: optuna.Study, trial: optuna.Trial, told: tuple[list[float], list[float], Any]
) -> None:
    """As the study loop tells a measured trial: the SLO as constraints, three objectives."""
    values, constraints, _ = told
    for name, value in zip(scoring.CONSTRAINT_NAMES, constraints, strict=True):
        trial.set_constraint(name, value)
    study.tell(trial, values)


def _tpe(seed: int, trials: int, sampler: str = "untried") -> optuna.samplers.BaseSampler:
    """tuner's sampler, as ``tuner.study.sampling.open_optuna_study`` configures it (``sampler``
    "tpe": TPE alone, as the loop drew before it gave a configuration drawn again an untried
    one, :class:`tuner.study.sampling.Untried`)."""
    tpe = optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        n_startup_trials=max(3, trials // 3),
        constant_liar=True,
    )
    return Untried(tpe, seed) if sampler == "untried" else tpe


def run_plan(bench: Bench, plan: Plan | None, seed: int, predicted: Plan | None = None) -> Account:
    """The predicted regime's recipe (when ``predicted`` has knobs), the defaults, the plan's
    screening trials (its recipe not again when the prediction measured it), then TPE over
    the kept knobs, in one study, as ``tuner.study.planning`` orders them."""
    surface, rng, acc = bench.surface(seed), _rng(seed, "plan"), Account("plan", seed)
    _, best, _ = surface.best(bench.full)
    hit = _target(best, bench.args.target)
    study = optuna.create_study(
        directions=scoring.DIRECTIONS, sampler=_tpe(seed, bench.args.trials, bench.args.sampler)
    )
    first: tuple[ServingConfig, list[float]] | None = None
    launched: set[ServingConfig] = set()  # what the search launched (see --repeats)
    if predicted is not None and predicted.knobs:
        (_, recipe), *_ = screen_configs(predicted, bench.card)
        ahead = space_of(bench.card, [k.knob for k in predicted.knobs])
        study.enqueue_trial(ahead.params_for(recipe))
        trial = study.ask()
        told = bench.evaluate(surface, ahead.suggest(trial), hit, rng, acc)
        _tell(study, trial, told)
        first = (recipe, told[0])
        launched.add(recipe)
    study.enqueue_trial(bench.card.baseline_params())
    trial = study.ask()
    told = bench.evaluate(surface, bench.card.suggest(trial), hit, rng, acc)
    _tell(study, trial, told)
    reference = told[0]
    launched.add(bench.card.baseline())
    if plan is None or not plan.knobs:
        space = bench.card
    else:
        planned = space_of(bench.card, plan.searched)
        scores: dict[str, float] = {}
        for knob, config in screen_configs(plan, bench.card):
            if knob == RECIPE and first is not None and first[0] == config:
                scores[knob] = scoring.score_values(first[1], bench.table.objective, reference)
                continue
            study.enqueue_trial(planned.params_for(config))
            trial = study.ask()
            told = bench.evaluate(surface, planned.suggest(trial), hit, rng, acc)
            _tell(study, trial, told)
            scores[knob] = scoring.score_values(told[0], bench.table.objective, reference)
            launched.add(config)
        judged = screened(plan, scores, None, "")
        acc.plan = {"effects": dict(judged.effects), "kept": list(judged.kept or ())}
        space = space_of(bench.card, judged.searched)
    while acc.found_s is None and acc.trials < bench.args.budget:
        trial = study.ask()
        config = space.suggest(trial)
        if bench.args.repeats == "skip" and config in launched and space.exhausted_by(launched):
            # As the study loop does since 2026-12-06: a drawn configuration a trial measured
            # is not launched again once the space has none untried; the trial counts, FAIL.
            acc.trials, acc.repeats = acc.trials + 1, acc.repeats + 1
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        _tell(study, trial, bench.evaluate(surface, config, hit, rng, acc))
        launched.add(config)
    return acc


def run_random(bench: Bench, seed: int, defaults_first: bool) -> Account:
    """Uniform draws over the full space (the defaults first when ``defaults_first``)."""
    name = "random-defaults-first" if defaults_first else "random"
    surface, rng, acc = bench.surface(seed), _rng(seed, name), Account(name, seed)
    _, best, _ = surface.best(bench.full)
    hit = _target(best, bench.args.target)
    sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(directions=scoring.DIRECTIONS, sampler=sampler)
    if defaults_first:
        study.enqueue_trial(bench.full.baseline_params())
    while acc.found_s is None and acc.trials < bench.args.budget:
        trial = study.ask()
        _tell(study, trial, bench.evaluate(surface, bench.full.suggest(trial), hit, rng, acc))
    return acc


def _rng(seed: int, strategy: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(strategy.encode())])


# -- the dataset: table, spaces, diagnosis --------------------------------------------------


def baseline_trial(path: Path, study: str) -> TrialResult | None:
    """The defaults' stored search trial, read from a copy of the database (never in place)."""
    with tempfile.TemporaryDirectory(prefix="tuner-plan-replay-") as tmp:
        copy = Path(tmp) / "replay.db"
        shutil.copyfile(path, copy)
        engine = make_engine(f"sqlite:///{copy}")
        try:
            rows = Repository(engine).list_trials(study, limit=None)
        finally:
            engine.dispose()
    base = [t for t in sorted(rows, key=lambda t: t.number) if t.is_baseline and t.windows]
    return base[0].to_result() if base else None


def spaces(
    model: str, gpu: str, workload: str, fixed: Mapping[str, Any], flags: FlagCatalog
) -> tuple[SearchSpace, SearchSpace]:
    """The card (a study with no space of its own) and the full space: the card's knobs plus
    every lever searchable on one GPU of this kind that keeps the model's outputs."""
    m, g, w = resolve_model(model), get_gpu(gpu), get_workload(workload)
    card = SearchSpace(m, g, w, fixed=fixed, flags=flags)
    names = [
        k
        for k, lv in levers.LEVERS.items()
        if lv.candidates(g) and not lv.multi_gpu and not lv.changes_outputs and k not in fixed
    ]
    searchable = []
    for k in names:
        try:
            SearchSpace(m, g, w, params=[k], fixed=fixed, flags=flags)
            searchable.append(k)
        except UsageError:  # not in this vLLM's flag list (or not here): not in the space
            continue
    full = SearchSpace(m, g, w, fixed=fixed, search={k: [] for k in searchable}, flags=flags)
    return card, full


def prediction_of(args: argparse.Namespace, card: SearchSpace) -> Diagnosis | None:
    """The regime predicted before launch: ``tuner.study.plan.predict`` on the catalog's facts
    (``--prediction auto``, what a study does), none (``none``: the order before predictions),
    or a regime forced (to price a wrong prediction)."""
    if args.prediction == "none":
        return None
    if args.prediction == "auto":
        return predict(card.model, card.gpu, card.workload)
    return Diagnosis(Regime(args.prediction), ("forced by --prediction",), {}, None)


def diagnosis_of(result: TrialResult | None, regime: str) -> tuple[Diagnosis, str]:
    """The defaults' diagnosis and where it came from (stored telemetry, or ``regime``)."""
    if result is not None:
        found = diagnose(result)
        if found.regime is not Regime.UNKNOWN:
            return found, "from the defaults' stored telemetry"
        keys = ", ".join(sorted(result.server_metrics)) or "none"
        why = (
            f"assumed {regime}: the defaults' stored telemetry ({keys}) predates the keys the "
            "diagnosis reads (api_server_cpu, engine_core_cpu, gpu_utilization_mean)"
        )
        return Diagnosis(Regime(regime), (f"assumed ({why})",), found.figures, found.streams), why
    return Diagnosis(Regime(regime), ("assumed",)), f"assumed {regime}: no stored defaults' trial"


# -- summaries ------------------------------------------------------------------------------


def _times(accounts: Sequence[Account]) -> np.ndarray:
    return np.array([math.inf if a.found_s is None else a.found_s / 60 for a in accounts])


def _median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The lower median of each resample (a censored, infinite run never averaged)."""
    arr = np.sort(np.asarray(x, dtype=float), axis=axis)
    n = arr.shape[axis]
    return np.asarray(np.take(arr, max(0, math.ceil(0.5 * n) - 1), axis=axis))


def _ratio_of_medians(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    ma, mb = _median(a, axis), _median(b, axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isinf(ma) & np.isinf(mb), np.inf, ma / mb)


def _interval(samples: tuple[np.ndarray, ...], statistic: Any, level: float) -> list[float | None]:
    res = stats.bootstrap(
        samples,
        statistic,
        n_resamples=4000,
        confidence_level=level,
        method="percentile",
        vectorized=True,
        paired=False,
        random_state=np.random.default_rng(0),
    )
    return [_json(res.confidence_interval.low), _json(res.confidence_interval.high)]


def summarise(accounts: Sequence[Account], budget: int, level: float) -> dict[str, Any]:
    t = _times(accounts)
    trials = sum(a.trials for a in accounts)
    return {
        "runs": len(accounts),
        "never_within_budget": int(np.isinf(t).sum()),
        "gpu_min_to_target": {
            "median": _json(float(_median(t))),
            "ci": _interval((t,), _median, level),
        },
        "trials_to_target_median": _json(
            quantile(
                [math.inf if a.found_trials is None else a.found_trials for a in accounts], 0.5
            )
        ),
        "evaluations": trials,
        "modelled": sum(a.modelled for a in accounts),
        "pruned": sum(a.pruned for a in accounts),
        "budget_trials": budget,
    }


def _json(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")  # experimental TPE options, independent sampling
    path, study = DATASETS[args.dataset]
    table = load_table(REPO_ROOT / path, study, args.dataset)
    if study is None:
        study = table.study
    result = baseline_trial(REPO_ROOT / path, table.study)
    fixed = {k: v for k, v in table.baseline.config.to_dict().items() if v is not None}
    flags = shipped(args.vllm)
    if flags is None:
        raise SystemExit(f"no shipped flag list for vLLM {args.vllm}")
    card, full = spaces(args.model, args.gpu, args.workload, fixed, flags)
    bench = Bench(table, card, full, args)
    diagnosis, source = diagnosis_of(result, args.regime)
    plan = make_plan(diagnosis, card, table.objective)
    guess = prediction_of(args, card)
    predicted = make_plan(guess, card, table.objective) if guess is not None else None
    runs: dict[str, list[Account]] = {s: [] for s in STRATEGIES}
    for seed in range(args.seeds):
        runs["plan"].append(run_plan(bench, plan, seed, predicted))
        runs["random"].append(run_random(bench, seed, defaults_first=False))
        runs["random-defaults-first"].append(run_random(bench, seed, defaults_first=True))
    surface = bench.surface(0)
    best_config, best, best_measured = surface.best(full)
    kept = [tuple(a.plan.get("kept", ())) for a in runs["plan"]]
    out: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "json_out"},
        "table": {
            "dataset": args.dataset,
            "study": table.study,
            "path": path,
            "objective": table.objective.value,
            "rows": len(table.rows),
            "launches": sum(len(r.launches) for r in table.rows),
            "fitted_effects": {
                f"{k}={v}": round(float(e[METRICS.index(THROUGHPUT)]), 4)
                for (k, v), e in surface.effects.items()
            },
            "modelled_trial_s": bench.modelled_s,
            "first_launch_cold_extra_s": bench.cold_extra_s,
            "launch_sd": bench.launch_sd,
        },
        "space": {
            "card": list(card.searched),
            "full": list(full.searched),
            "full_points": math.prod(len(c) for c in full.choices.values()),
        },
        "best": {
            "config": best_config.to_dict(),
            "score": best.score,
            "measured": best_measured,
            "seed": 0 if args.prior_sd else None,
        },
        "diagnosis": {"regime": diagnosis.regime.value, "source": source},
        "prediction": {
            "asked": args.prediction,
            "regime": guess.regime.value if guess is not None else None,
            "summary": guess.summary() if guess is not None else None,
            "recipe_first": bool(predicted is not None and predicted.knobs),
        },
        "plan": plan.as_dict() if plan is not None else None,
        "kept": {",".join(k) or "(none)": kept.count(k) for k in sorted(set(kept))},
        "strategies": {s: summarise(a, args.budget, args.level) for s, a in runs.items()},
        "per_seed": {
            s: [{"seed": a.seed, "trials": a.trials, "gpu_min": _json(_times([a])[0])} for a in acc]
            for s, acc in runs.items()
        },
    }
    p, r = _times(runs["plan"]), _times(runs["random"])
    out["ratio_plan_random"] = {
        "median_ratio": _json(float(_ratio_of_medians(p, r))),
        "ci": _interval((p, r), _ratio_of_medians, args.level),
        "goal": 0.5,
    }
    return out


def report(out: dict[str, Any]) -> str:
    t, level = out["table"], out["args"]["level"]
    pct = f"{100 * level:.0f} %"
    lines = [
        f"dataset {t['dataset']} ({t['path']}, study {t['study']}, objective {t['objective']}): "
        f"{t['rows']} measured configurations, {t['launches']} launches",
        f"diagnosis: {out['diagnosis']['regime']} ({out['diagnosis']['source']})",
        f"prediction ({out['prediction']['asked']}): {out['prediction']['summary'] or 'none'}"
        + (": its recipe first" if out["prediction"]["recipe_first"] else ""),
    ]
    if out["plan"] is not None:
        lines += [f"  {line}" for line in out["plan"]["text"][1:2]]
    lines += [
        f"fitted log-throughput effects: {t['fitted_effects']} (others: "
        + (f"prior N(0, {out['args']['prior_sd']}))" if out["args"]["prior_sd"] else "none)"),
        f"full space: {len(out['space']['full'])} knobs, {out['space']['full_points']:,} points "
        f"(before the rules); modelled trial {t['modelled_trial_s']:.0f} s (warm); each "
        f"search's first launch +{t['first_launch_cold_extra_s']:.0f} s (cold caches); "
        f"launch SD {t['launch_sd']}",
        f"best of the surface: {out['best']['config']} score {out['best']['score']:.3f} "
        f"({'measured' if out['best']['measured'] else 'MODELLED'})",
        f"plan kept (seeds): {out['kept']}",
        "",
        f"| strategy | GPU-min to within {100 * out['args']['target']:.0f} %, median [{pct} CI] | "
        "trials, median | never within budget | evaluations modelled | pruned by the rules |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in out["strategies"].items():
        g = s["gpu_min_to_target"]
        lines.append(
            f"| {name} | {_fmt(g['median'])} [{_fmt(g['ci'][0])}-{_fmt(g['ci'][1])}] | "
            f"{_fmt(s['trials_to_target_median'], '.0f')} | "
            f"{s['never_within_budget']}/{s['runs']} | "
            f"{s['modelled']}/{s['evaluations']} | {s['pruned']} |"
        )
    r = out["ratio_plan_random"]
    met = r["ci"][1] is not None and r["ci"][1] <= r["goal"]
    point = r["median_ratio"] is not None and r["median_ratio"] <= r["goal"]
    verdict = (
        "met (the interval's top too)"
        if met
        else ("point met, interval not" if point else "NOT met")
    )
    lines.append("")
    lines.append(
        f"plan / random, ratio of median GPU-time: {_fmt(r['median_ratio'], '.3f')} "
        f"[{_fmt(r['ci'][0], '.3f')}-{_fmt(r['ci'][1], '.3f')}] ({pct} bootstrap); "
        f"goal <= {r['goal']}: {verdict}"
    )
    return "\n".join(lines)


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "censored" if x is None else format(x, spec)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=sorted(DATASETS), default="h200-heavy")
    p.add_argument("--model", default="ernie-0.3b")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--workload", default="throughput-256")
    p.add_argument("--vllm", default="0.26.0", help="the shipped flag list of this vLLM")
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--budget", type=int, default=40, help="trials per search before censoring")
    p.add_argument("--trials", type=int, default=16, help="the study's trials (TPE start-up)")
    p.add_argument("--target", type=float, default=0.05, help="within this of the best score")
    p.add_argument("--launch-sd", type=float, default=DEFAULT_LAUNCH_SD)
    p.add_argument("--prior-sd", type=float, default=0.0, help="unmeasured knob values' effects")
    p.add_argument("--trial-s", type=float, default=0.0, help="a modelled trial's seconds")
    p.add_argument("--regime", default=Regime.FRONTEND.value, choices=[r.value for r in Regime])
    p.add_argument(
        "--prediction",
        default="auto",
        choices=["auto", "none", *(r.value for r in Regime)],
        help="the regime predicted before launch: as a study predicts it, none, or forced",
    )
    p.add_argument(
        "--sampler",
        default="untried",
        choices=["untried", "tpe"],
        help="the study's sampler (untried: a draw of a configuration tried already becomes an "
        "untried one; tpe: TPE alone, as studies drew before 2026-12-06)",
    )
    p.add_argument(
        "--repeats",
        default="skip",
        choices=["skip", "launch"],
        help="a configuration TPE draws again with none of the space untried: not launched, "
        "the trial counted (skip, the study loop since 2026-12-06), or launched (launch)",
    )
    p.add_argument("--level", type=float, default=0.95, help="bootstrap confidence level")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    out = run_bench(args)
    print(report(out))
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
