"""A study's measured trials as a table, for replaying searches offline (``bench/``).

One row per distinct configuration of the study: every fresh launch of it (search and
confirmation alike) with its numbers, its start-up seconds and the seconds the rest of the
trial took (warm-up, canary, the measurement windows); or, for a configuration that could not
run here (a finding: did not fit, unsupported), the seconds its failed launch cost. Faults
(interrupted, timed out, a stranger on the port) say nothing about the configuration and are
left out. The table's value of a configuration is the geometric mean of its launches.

The launch-to-launch noise comes from the configurations launched more than once (the
baseline and the confirmed candidates): the pooled covariance of the log metrics (a slow launch
is slow in every metric) and the pooled standard deviation of the study's score. The first
window's noise (against its launch's median) comes from every launch, with its mean offset (a
warm-up effect): what an early-stopping rule sees after one window.

The committed SQLite files are never opened in place: :func:`load_table` reads a copy (they
are in WAL mode, so any connection would leave -wal and -shm files beside them).
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.abtest.profile import wall_s
from tuner.catalog import get_gpu
from tuner.db import Repository, TrialRow, make_engine
from tuner.domain import (
    Estimate,
    Objective,
    ServingConfig,
    Slo,
    TrialStatus,
    WindowMetrics,
)
from tuner.errors import UsageError
from tuner.scoring import Standing, launch_value
from tuner.scoring import objectives as scoring

# The numbers a launch is replayed with: the three objectives and what the SLO reads.
METRICS = ("output_throughput", "memory_gib", "e2e_p99_ms", "ttft_p99_ms", "itl_p99_ms")
SCORE = "score"
CPU_MEMORY_CEILING_GIB = 1024.0  # as the study loop penalises a finding on cpu


@dataclass(frozen=True)
class Launch:
    """One fresh server launch of a configuration."""

    metrics: Mapping[str, float]  # METRICS (medians over windows) and error_rate
    windows: tuple[Mapping[str, float], ...]  # per window: the same keys
    window_s: tuple[float, ...]  # each window's duration
    startup_s: float
    measure_s: float  # the trial's wall time after start-up: warm-up, canary, windows

    @property
    def seconds(self) -> float:
        return self.startup_s + self.measure_s


@dataclass(frozen=True)
class Row:
    """A configuration of the table: its launches, or the finding that it cannot run."""

    config: ServingConfig
    number: int  # the first trial of the study that ran it
    launches: tuple[Launch, ...] = ()
    finding: str | None = None  # the failure class of a configuration that cannot run
    failed_s: tuple[float, ...] = ()  # GPU seconds of its failed launches

    def center(self, metric: str) -> float:
        """The geometric mean over launches (NaN for a finding)."""
        values = [launch.metrics[metric] for launch in self.launches]
        value = launch_value(values)
        return value if value is not None else (math.nan if not values else 0.0)


@dataclass(frozen=True)
class Noise:
    """Log-scale spreads, per metric (:data:`METRICS`) and for the study's :data:`SCORE`.

    ``launch``: the SD across launches of one configuration (pooled over the configurations
    launched more than once), ``launch_cov`` the covariance of the metrics (a slow launch is
    slow in every metric: the score's spread depends on it). ``first``: the SD of the first
    window around its launch's median, ``first_bias`` its mean (a warm-up effect),
    ``first_cov`` the covariance. ``repeated``: configurations with more than one launch;
    ``dof``: the degrees of freedom of the launch spread.
    """

    launch: Mapping[str, float]
    first: Mapping[str, float]
    first_bias: Mapping[str, float]
    launch_cov: tuple[tuple[float, ...], ...]
    first_cov: tuple[tuple[float, ...], ...]
    repeated: int
    dof: int


@dataclass(frozen=True)
class Table:
    name: str  # the dataset's label (file and study)
    study: str
    objective: Objective
    slo: Slo
    memory_ceiling_gib: float
    knobs: tuple[str, ...]  # the knobs whose values differ between rows, in the study's order
    rows: tuple[Row, ...]
    baseline: Row
    skipped: int  # launches left out: faults, not properties of a configuration

    def values_of(self, metrics: Mapping[str, float]) -> list[float]:
        """Optuna's objective values for a launch's numbers."""
        return [metrics["output_throughput"], metrics["memory_gib"], metrics["e2e_p99_ms"]]

    def reference(self) -> list[float]:
        return self.values_of({m: self.baseline.center(m) for m in METRICS})

    def score(self, metrics: Mapping[str, float]) -> float:
        return scoring.score_values(self.values_of(metrics), self.objective, self.reference())

    def constraints(self, metrics: Mapping[str, float]) -> list[float]:
        """Optuna's constraint values for a launch's numbers (the study's SLO rule)."""
        estimates = {k: Estimate(v, v, v, (v,)) for k, v in metrics.items()}
        return scoring.metric_constraints(estimates, self.slo, self.objective)

    def standing(self, metrics: Mapping[str, float] | None, number: int = 0) -> Standing:
        """Where numbers stand by the ranking rule; None (a finding) stands last."""
        if metrics is None:
            return Standing(False, None, number=number)
        feasible = scoring.is_feasible(self.constraints(metrics))
        return Standing(feasible, self.score(metrics), number=number)

    def truth(self, row: Row) -> Standing:
        """A row's standing on its table values (the geometric means of its launches)."""
        if row.finding is not None:
            return self.standing(None, row.number)
        centers = {m: row.center(m) for m in (*METRICS, "error_rate")}
        return self.standing(centers, row.number)

    def best(self) -> Row:
        """The top of the ranking rule on the table's values."""
        return max(self.rows, key=lambda r: self.truth(r).key())

    def noise(self) -> Noise:
        keys = (*METRICS, SCORE)
        launch_dev: list[list[float]] = []  # per launch: log deviation from its config's mean
        first_dev: list[list[float]] = []  # per launch: log first window - log launch median
        dof = repeated = 0
        for row in self.rows:
            logs = [[_log(_value(self, ln.metrics, k)) for k in keys] for ln in row.launches]
            if len(logs) > 1:
                repeated += 1
                dof += len(logs) - 1
                means = [statistics.fmean(col) for col in zip(*logs, strict=True)]
                launch_dev += [[x - m for x, m in zip(r, means, strict=True)] for r in logs]
            for ln, center in zip(row.launches, logs, strict=True):
                if ln.windows:
                    first = [_log(_value(self, ln.windows[0], k)) for k in keys]
                    first_dev.append([f - c for f, c in zip(first, center, strict=True)])
        launch_cov = _cov(launch_dev, dof, center=False)
        first_cov = _cov(first_dev, len(first_dev) - 1, center=True)
        bias = [statistics.fmean(col) for col in zip(*first_dev, strict=True)] if first_dev else []
        return Noise(
            launch={k: math.sqrt(launch_cov[i][i]) for i, k in enumerate(keys)},
            first={k: math.sqrt(first_cov[i][i]) for i, k in enumerate(keys)},
            first_bias={k: bias[i] if bias else 0.0 for i, k in enumerate(keys)},
            launch_cov=tuple(tuple(r[: len(METRICS)]) for r in launch_cov[: len(METRICS)]),
            first_cov=tuple(tuple(r[: len(METRICS)]) for r in first_cov[: len(METRICS)]),
            repeated=repeated,
            dof=dof,
        )


def load_table(path: Path, study: str | None = None, name: str | None = None) -> Table:
    """The table of ``study`` (the only one in the file when None) in the SQLite file ``path``."""
    with tempfile.TemporaryDirectory(prefix="tuner-replay-") as tmp:
        copy = Path(tmp) / "replay.db"
        shutil.copyfile(path, copy)
        engine = make_engine(f"sqlite:///{copy}")
        try:
            repo = Repository(engine)
            studies = [s.name for s in repo.list_studies()]
            if study is None and len(studies) != 1:
                raise UsageError(f"{path} holds studies {studies}: name one")
            study = study or studies[0]
            row = repo.get_study(study)
            if row is None:
                raise UsageError(f"no study {study!r} in {path} (it holds {studies})")
            trials = repo.list_trials(study, limit=None)
        finally:
            engine.dispose()
    objective = Objective(row.objective)
    if objective is Objective.CAPACITY:
        raise UsageError("the replay scores single-load trials; capacity studies are not replayed")
    gpu = get_gpu(row.gpu)
    ceiling = CPU_MEMORY_CEILING_GIB if gpu.is_cpu else gpu.memory_gib
    rows, skipped = _rows(trials, objective, ceiling)
    base = next((t.config for t in sorted(trials, key=lambda t: t.number) if t.is_baseline), None)
    baselines = [r for r in rows if r.config == base and r.launches]
    if not baselines:
        raise UsageError(f"study {study!r} has no measured baseline: nothing to score against")
    spec_order = [*(row.spec.get("params") or []), *(row.spec.get("search") or {})]
    return Table(
        name=name or f"{path.name}:{study}",
        study=study,
        objective=objective,
        slo=Slo(**row.slo),
        memory_ceiling_gib=ceiling,
        knobs=_varying_knobs(rows, spec_order),
        rows=tuple(rows),
        baseline=baselines[0],
        skipped=skipped,
    )


def _rows(
    trials: Sequence[TrialRow], objective: Objective, ceiling: float
) -> tuple[list[Row], int]:
    launches: dict[ServingConfig, list[Launch]] = {}
    failed: dict[ServingConfig, tuple[str, list[float]]] = {}
    first: dict[ServingConfig, int] = {}
    skipped = 0
    for t in sorted(trials, key=lambda t: t.number):
        seconds = wall_s(t)
        if t.status is TrialStatus.COMPLETE and seconds is not None and t.windows:
            first.setdefault(t.config, t.number)
            launches.setdefault(t.config, []).append(_launch(t, objective, ceiling, seconds))
        elif t.failure is not None and t.failure.is_finding and seconds is not None:
            first.setdefault(t.config, t.number)
            failed.setdefault(t.config, (t.failure.value, []))[1].append(seconds)
        elif t.status is not TrialStatus.RUNNING:
            skipped += 1
    rows = [Row(c, first[c], tuple(ls)) for c, ls in launches.items()]
    rows += [
        Row(c, first[c], finding=f, failed_s=tuple(s))
        for c, (f, s) in failed.items()
        if c not in launches
    ]
    return sorted(rows, key=lambda r: r.number), skipped


def _launch(t: TrialRow, objective: Objective, ceiling: float, wall: float) -> Launch:
    thr, mem, p99 = scoring.objective_values(t, memory_ceiling_gib=ceiling, objective=objective)
    metrics = {
        "output_throughput": thr,
        "memory_gib": mem,
        "e2e_p99_ms": p99,
        "ttft_p99_ms": t.metrics["ttft_p99_ms"].median,
        "itl_p99_ms": t.metrics["itl_p99_ms"].median,
        "error_rate": t.metrics["error_rate"].median,
    }
    startup = t.server.startup_s if t.server is not None and t.server.startup_s else 0.0
    return Launch(
        metrics=metrics,
        windows=tuple(_window(w, mem) for w in t.windows),
        window_s=tuple(w.duration_s for w in t.windows),
        startup_s=startup,
        measure_s=max(0.0, wall - startup),
    )


def _window(w: WindowMetrics, memory_gib: float) -> dict[str, float]:
    return {
        "output_throughput": w.output_throughput,
        "memory_gib": memory_gib,  # memory is read over the whole launch, not per window
        "e2e_p99_ms": w.e2e_ms.p99,
        "ttft_p99_ms": w.ttft_ms.p99,
        "itl_p99_ms": w.itl_ms.p99,
        "error_rate": w.error_rate,
    }


def _varying_knobs(rows: Sequence[Row], spec_order: Sequence[str]) -> tuple[str, ...]:
    """The knobs set to more than one value (vLLM's default, None, being one) across rows."""
    names = {k for row in rows for k in row.config.to_dict()}
    varying = {k for k in names if len({knob_value(r.config, k) for r in rows}) > 1}
    order = [k for k in dict.fromkeys(spec_order) if k in varying]
    return (*order, *sorted(varying - set(order)))


def knob_value(config: ServingConfig, knob: str) -> object:
    """``config``'s value of ``knob``, None where it leaves vLLM's default."""
    return config.to_dict().get(knob)


def _cov(devs: Sequence[Sequence[float]], dof: int, *, center: bool) -> list[list[float]]:
    """The covariance matrix of deviation vectors over ``dof`` degrees of freedom (zeros when
    there are none); ``center``: subtract the mean first (the launch deviations already are)."""
    size = len(METRICS) + 1
    if dof <= 0 or not devs:
        return [[0.0] * size for _ in range(size)]
    means = [statistics.fmean(col) for col in zip(*devs, strict=True)] if center else [0.0] * size
    out = [[0.0] * size for _ in range(size)]
    for d in devs:
        c = [x - m for x, m in zip(d, means, strict=True)]
        for i in range(size):
            for j in range(size):
                out[i][j] += c[i] * c[j] / dof
    return out


def _value(table: Table, metrics: Mapping[str, float], key: str) -> float:
    return table.score(metrics) if key == SCORE else metrics[key]


def _log(x: float) -> float:
    return math.log(x) if x > 0 and math.isfinite(x) else 0.0
