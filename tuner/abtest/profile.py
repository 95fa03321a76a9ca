"""Noise profiles from stored launches: every launch of ``tuner calibrate``, ``tuner compare``,
``tuner verify-claims`` and a study's confirmation is summarised in ``tuner_launches`` (the log
of each window value of the compared metrics), and a comparison reads the profile of its key
(:class:`tuner.scoring.noise.NoiseKey`) from all of them, its own launches left out
(:func:`load_profile`); see :mod:`tuner.scoring.noise` for the model.

Also the cost of a decision: :func:`gpu_seconds` sums the wall time of launches (start-up,
canary, warm-up and measurement: from the start of the launch to the end of its last window),
and :func:`launch_walls` names each launch by its start so that a sum over comparisons that
share launches counts each once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tuner.abtest.compare import COMPARED, HEADLINE
from tuner.catalog import model_key
from tuner.domain import ModelSpec, TrialResult, TrialStatus
from tuner.scoring import GIB, Launch, NoiseKey, NoiseProfile, logs, profile_of

if TYPE_CHECKING:
    from tuner.db import Repository


def noise_key(result: TrialResult, model: ModelSpec, workload: str) -> NoiseKey | None:
    """The key of a complete launch: where it ran (its provenance: the GPU's UUID where it has
    one, else the host name; see :class:`tuner.scoring.noise.NoiseKey`), ``model`` (by
    :func:`tuner.catalog.model_key`: two local directories that share their last name are two
    models), ``workload`` (its name, with any changes), its headline metric's windows and its CPU
    placement (as its server recorded it; "off" for launches from before tuner placed them);
    None without provenance."""
    prov, headline = result.provenance, result.metrics.get(HEADLINE)
    windows = len(headline.values) if headline is not None else 0
    if prov is None or result.status is not TrialStatus.COMPLETE or not windows:
        return None
    placed = result.server.placement if result.server is not None else None
    return NoiseKey(
        host=prov.gpu_uuid or prov.hostname,
        gpu=prov.gpu_name,
        vllm_version=prov.vllm_version,
        model=model_key(model.alias, model.source),
        workload=workload,
        windows=windows,
        placement=str((placed or {}).get("mode", "off")),
    )


ONCE_A_LAUNCH = frozenset({"memory_gib"})  # measured once a launch (its peak), not per window


def log_values(result: TrialResult) -> dict[str, list[float]]:
    """Per compared metric, the logs of the launch's window values (peak memory: one value)."""
    out: dict[str, list[float]] = {}
    for name, _label, _higher in COMPARED:
        if name in ONCE_A_LAUNCH:
            mem = result.memory.headline_bytes
            if mem:
                out[name] = [math.log(mem / GIB)]
        elif name in result.metrics:
            ls = logs(result.metrics[name].values)
            if ls:
                out[name] = ls
    return out


def wall_s(result: TrialResult) -> float | None:
    """The launch's wall time: from its start to its end (start-up included)."""
    if result.started_at is None or result.finished_at is None:
        return None
    return max(0.0, result.finished_at - result.started_at)


def launch_walls(results: Iterable[TrialResult]) -> tuple[tuple[float, float], ...]:
    """``(started_at, wall_s)`` of each of ``results`` with a wall time: what names a launch
    where several comparisons read it (a claim group's shared configuration, a confirmation's
    defaults), so that its time is counted once."""
    return tuple(
        (r.started_at, w)
        for r in results
        if r.started_at is not None and (w := wall_s(r)) is not None
    )


def gpu_seconds(results: Iterable[TrialResult]) -> float:
    """The summed wall time of ``results`` (failed launches cost time too)."""
    return sum(w for _, w in launch_walls(results))


def run_tag(command: str, key: str, results: Iterable[TrialResult]) -> str:
    """The tag of one run of a command (stored with each of its launches): the run's key and
    the start of its first complete launch, the same when an interrupted run resumes."""
    starts = [r.started_at for r in results if r.status is TrialStatus.COMPLETE and r.started_at]
    first = min(starts) if starts else 0.0
    return f"{command}:{key}:{first:.3f}"


def record_launch(
    repo: Repository,
    result: TrialResult,
    *,
    model: ModelSpec,
    workload: str,
    is_defaults: bool,
    source: str,
    run: str,
) -> NoiseKey | None:
    """Store the summary of a complete launch (nothing for any other); its key."""
    key = noise_key(result, model, workload)
    if key is None:
        return None
    repo.add_launch(
        key=key.to_dict(),
        config=result.config,
        is_defaults=is_defaults,
        source=source,
        run=run,
        values=log_values(result),
        wall_s=wall_s(result),
        startup_s=result.server.startup_s if result.server is not None else None,
    )
    return key


def load_profile(
    repo: Repository, key: NoiseKey, *, exclude_run: str | None = None
) -> NoiseProfile | None:
    """The profile of ``key`` from its stored launches (without ``exclude_run``'s); None
    when no metric has two launches of one configuration in one run.

    Launches are grouped by configuration *and run*: a comparison's arms run interleaved on
    one card in one run, so the noise it fights is the spread between launches of one run.
    Launches of one configuration from two runs may stand on two cards of one host name (every
    lent GPU machine is called ``vm``), and two H100s differed by 3.3 % where launches on one
    spread by 0.1-0.4 % (docs/results/plan-h200.md §11): pooled as one group, that shift read
    as launch noise."""
    rows = repo.list_launches(key.to_dict(), exclude_run=exclude_run)
    per_metric: dict[str, list[Launch]] = {}
    for row in rows:
        group = repr((row.run, sorted(row.config.to_dict().items())))
        for name, values in row.values.items():
            per_metric.setdefault(name, []).append(Launch(group, tuple(values)))
    profile = profile_of(key, per_metric, len(rows))
    return profile if profile.metrics else None


def launches_profile(
    repo: Repository,
    results: Iterable[TrialResult],
    model: ModelSpec,
    workload: str,
    exclude_run: str | None = None,
) -> NoiseProfile | None:
    """The profile (:func:`load_profile`) of the key of the first complete launch of
    ``results``; None before a launch completed or without a profile."""
    first = next((r for r in results if r.status is TrialStatus.COMPLETE), None)
    key = None if first is None else noise_key(first, model, workload)
    return None if key is None else load_profile(repo, key, exclude_run=exclude_run)


def profile_lines(profile: NoiseProfile | None, metrics: Sequence[str] = (HEADLINE,)) -> list[str]:
    """Lines for people: the key, then each metric's components."""
    if profile is None:
        return ["noise profile: none for this key yet (`tuner calibrate` measures one)"]
    lines = [f"noise profile of {profile.key.text()}: {profile.launches} stored launches"]
    labels = {name: label for name, label, _ in COMPARED}
    for name in metrics:
        c = profile.get(name)
        if c is not None:
            lines.append(
                f"  {labels.get(name, name)}: {c.text(windowed=name not in ONCE_A_LAUNCH)}"
            )
    return lines
