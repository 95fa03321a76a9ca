"""Choosing the best measured configuration for a model x GPU x workload across studies.

Every study that measured the combination (real or emulated, never both) takes part. Within a study
each complete trial is scored by the objective (the request's, else the study's) against that
study's own measurement of vLLM's defaults, by :func:`tuner.study.standings.standings`; scores are
ratios to the defaults, so they also compare across studies of the same combination. An SLO in the
request keeps only the trials that meet it (:func:`tuner.scoring.objectives.constraint_values` on
the stored metrics); without one, trials meeting the study's own SLO rank first. Ties go to a pick
its study's confirmation decided, then to the more recently updated study. Where a study ended
with a confirmation phase (fresh interleaved launches against the defaults,
:mod:`tuner.study.confirm`), its verdict decides that study's pick, as it does for ``tuner best``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlencode

from api.errors import not_found
from api.index import StudySnapshot
from api.schemas import (
    BaselineOut,
    ConfirmedOut,
    DecidedOut,
    EstimateOut,
    PriceOut,
    ProvenanceOut,
    RecommendationOut,
    finite,
    from_row,
    metrics_out,
)
from tuner.catalog import check_one_model, model_key
from tuner.db import StudyRow, TrialRow
from tuner.domain import Objective, Slo
from tuner.domain.workload import format_slo
from tuner.results import costs, emulated_memory_warning, gpu_memory_gib, serve_flags
from tuner.scoring import ranking
from tuner.study import Confirmed, study_objective
from tuner.study.standings import Ranked, chosen, standings
from tuner.vllm import argv

_MAX_SUGGESTIONS = 8
_RUN_HINT = "run a study for it: tuner run --model M --gpu G --workload W"


@dataclass(frozen=True)
class Query:
    model: str
    gpu: str
    workload: str
    objective: Objective | None = None
    slo: Slo | None = None
    vllm_version: str | None = None
    emulated: bool = False
    gpu_price: float | None = None  # $ per GPU-hour for the costs (None: the study's)


@dataclass(frozen=True)
class Pick:
    snapshot: StudySnapshot
    ranked: Ranked
    objective: Objective
    confirmed: Confirmed | None = None


def is_emulated(study: StudyRow, trial: TrialRow) -> bool:
    return bool(study.emulated or trial.emulated)


def _matches(snap: StudySnapshot, q: Query) -> bool:
    s = snap.study
    if q.model not in (s.model, s.model_source) or q.workload != s.workload_label:
        return False
    wanted = q.gpu.strip().lower()
    return wanted == s.gpu.lower() or any((t.gpu_name or "").lower() == wanted for t in snap.trials)


def ranked(snapshots: Iterable[StudySnapshot], q: Query, *, use_slo: bool = True) -> list[Pick]:
    """Matching trials best first; with ``q.slo`` (and ``use_slo``) only those meeting it.

    A study whose confirmation phase gave a verdict for the objective offers only the trial
    it chose (a search-phase winner the confirmation did not bear out is no recommendation),
    unless that trial misses the SLO (the requested one, else the study's) that another trial
    meets: then its trials compete on their search scores, as
    :func:`tuner.study.confirm.study_pick` has it for `tuner best` and `tuner launch`.
    """
    picks: list[Pick] = []
    for snap in snapshots:
        if not _matches(snap, q):
            continue
        objective = q.objective or study_objective(snap.study)
        strict = q.slo is not None and use_slo
        slo = q.slo if q.slo is not None and strict else Slo(**snap.study.slo)
        # The study's own SLO and preset are judged as `tuner best` judges them (on the load
        # curve where the preset ranks by one); another SLO or objective on the stored metrics:
        # no curve was read with that SLO, and another preset's curve may not exist.
        own = objective is study_objective(snap.study) and slo == Slo(**snap.study.slo)
        table = standings(
            snap.trials,
            objective,
            slo,
            updated_at=snap.study.updated_at,
            by_curve=own,
            reference=snap.reference,
        )
        verdict = snap.confirmed.get(objective)
        mine = [r for r in table if verdict and verdict.chose(r.number, r.is_baseline)][:1]
        if mine and (mine[0].feasible or not any(r.feasible for r in table)):
            table = mine
        else:
            verdict = None
        picks.extend(
            Pick(snap, chosen(r, verdict), objective, verdict)
            for r in table
            if is_emulated(snap.study, r.row) == q.emulated and (r.feasible or not strict)
        )
    return ranking.best_first(picks, lambda p: p.ranked.standing)


def recommend(snapshots: list[StudySnapshot], q: Query) -> RecommendationOut:
    """The best pick as the API's response; raises a 404 ApiError naming what exists instead,
    or a 409 when ``q.model`` names several models measured here (two hub ids' last part)."""
    check_one_model(
        q.model,
        (model_key(s.study.model, s.study.model_source) for s in snapshots if _matches(s, q)),
    )
    picks = ranked(snapshots, q)
    if picks:
        return response(picks[0], q)
    what = f"model {q.model!r} on GPU {q.gpu!r} with workload {q.workload!r}"
    kind = "emulated" if q.emulated else "real (not emulated)"
    if q.slo is not None:
        unconstrained = ranked(snapshots, q, use_slo=False)
        if unconstrained:
            closest = unconstrained[0]
            measured = sum(
                is_emulated(snap.study, t) == q.emulated
                for snap in snapshots
                if _matches(snap, q)
                for t in snap.trials
            )
            raise not_found(
                f"{measured} {kind} trial{'s' if measured != 1 else ''} measured {what}, but "
                f"none meets the SLO {format_slo(q.slo)}",
                "relax the SLO, or run a study with it to search for a configuration that meets it",
                closest={
                    "study": closest.snapshot.study.name,
                    "trial": closest.ranked.number,
                    "metrics": {
                        k: v.model_dump()
                        for k, v in metrics_out(closest.ranked.row.metrics).items()
                    },
                },
            )
    other_kind = dataclasses.replace(q, emulated=not q.emulated)
    hint = _RUN_HINT
    if ranked(snapshots, other_kind, use_slo=False):
        where = "in emulation" if not q.emulated else "for real (not emulated)"
        hint = f"it was measured only {where}: add emulated={str(not q.emulated).lower()} to "
        hint += f"see it; or {_RUN_HINT}"
    tried = sorted(snap.study.name for snap in snapshots if _matches(snap, q))
    if tried and hint == _RUN_HINT:
        names = ", ".join(tried)
        raise not_found(
            f"no trial of {what} completed: {len(tried)} "
            f"{'studies' if len(tried) != 1 else 'study'} tried it ({names})",
            f"`tuner trials {tried[0]} --state failed` (or GET /v1/studies/{tried[0]}/trials?"
            "state=failed) says why each failed",
            studies=tried,
        )
    raise not_found(f"nothing {kind} was measured for {what}", hint, nearest=nearest(snapshots, q))


def nearest(snapshots: Iterable[StudySnapshot], q: Query) -> list[dict[str, object]]:
    """Measured combinations closest to the query: same model and GPU first, then same model,
    then same GPU and workload; each with the query URL that recommends it."""
    combos: dict[tuple[str, str, str], set[str]] = {}
    for snap in snapshots:
        if any(is_emulated(snap.study, t) == q.emulated for t in snap.trials):
            s = snap.study
            combos.setdefault((s.model, s.gpu, s.workload_label), set()).add(s.name)
    gpu = q.gpu.strip().lower()

    def distance(combo: tuple[str, str, str]) -> tuple[int, str, str, str]:
        model, g, workload = combo
        same_model, same_gpu, same_wl = model == q.model, g.lower() == gpu, workload == q.workload
        if same_model and same_gpu:
            rank = 0
        elif same_model and same_wl:
            rank = 1
        elif same_model:
            rank = 2
        elif same_gpu and same_wl:
            rank = 3
        else:
            rank = 4 + (not same_gpu) + (not same_wl)
        return (rank, model, g, workload)

    out: list[dict[str, object]] = []
    for combo in sorted(combos, key=distance)[:_MAX_SUGGESTIONS]:
        found = dict(zip(("model", "gpu", "workload"), combo, strict=True))
        params = {**found, "emulated": "true"} if q.emulated else found
        url = "/v1/recommendations?" + urlencode(params)
        out.append({**found, "studies": sorted(combos[combo]), "url": url})
    return out


def _memory(trial: TrialRow) -> float | None:
    values = trial.objective_values
    return finite(values[1]) if values and len(values) >= 2 else None


def response(pick: Pick, q: Query) -> RecommendationOut:
    snap, trial, study = pick.snapshot, pick.ranked.row, pick.snapshot.study
    version = q.vllm_version or trial.vllm_version or study.vllm_version or "0"
    flags = argv.render_flags(trial.config, version)
    base = snap.baseline(trial.gpu_uuid)  # the defaults the pick's score is a ratio to
    applied = q.slo if q.slo is not None else Slo(**study.slo)
    emulated = is_emulated(study, trial)
    price, no_cost = costs.price_or_why(
        study.gpu, study.spec, q.gpu_price, emulated=emulated, option="gpu_price"
    )

    def cost(row: TrialRow) -> tuple[EstimateOut | None, bool]:
        usd = costs.usd(row.metrics, price)
        bound = usd is not None and costs.usd_at_most(row.metrics, row.windows, study.spec)
        return (None if usd is None else EstimateOut.of(usd)), bound

    usd, usd_bound = cost(trial)
    base_usd, base_bound = cost(base) if base is not None else (None, False)
    caveat = costs.ranked_on_a_bound(pick.objective, trial, snap.trials, study.spec)
    return RecommendationOut(
        model=study.model,
        model_source=study.model_source,
        gpu=study.gpu,
        workload=study.workload_label,
        objective=pick.objective.value,
        study=study.name,
        trial=trial.number,
        config=trial.config.to_dict(),
        flags=list(flags.args),
        env=dict(flags.env),
        serve_command=argv.serve_command(
            study.model_source or study.model, serve_flags(study, flags)
        ),
        extra_args=list(study.extra_args),
        workload_overrides=study.workload_overrides,
        vllm_version=version,
        metrics=metrics_out(trial.metrics),
        memory_gib=_memory(trial),
        score=finite(pick.ranked.score) if pick.ranked.relative else None,
        baseline=None
        if base is None
        else BaselineOut(
            trial=base.number,
            metrics=metrics_out(base.metrics),
            memory_gib=_memory(base),
            cost=base_usd,
            cost_is_upper_bound=base_bound,
            capacity_is_lower_bound=costs.capacity_at_least(base.metrics, base.windows, study.spec),
        ),
        provenance=ProvenanceOut.of(trial, study),
        feasible=pick.ranked.feasible,
        is_baseline=trial.is_baseline,
        slo={k: v for k, v in vars(applied).items() if v is not None},
        confirmed=None if pick.confirmed is None else _confirmed(pick.confirmed),
        warnings=[*_warnings(study, trial), *(w for w in (caveat, no_cost) if w)],
        cost=usd,
        cost_is_upper_bound=usd_bound,
        capacity_is_lower_bound=costs.capacity_at_least(trial.metrics, trial.windows, study.spec),
        price=None if price is None else from_row(PriceOut, price),
    )


def _warnings(study: StudyRow, trial: TrialRow) -> list[str]:
    if not is_emulated(study, trial):
        return []
    warning = emulated_memory_warning(_memory(trial), gpu_memory_gib(study.gpu))
    return [warning] if warning else []


def _confirmed(c: Confirmed) -> ConfirmedOut:
    decided = c.decided_on
    return from_row(
        ConfirmedOut,
        c,
        score=finite(c.score),
        score_low=finite(c.score_low),
        score_high=finite(c.score_high),
        decided_on=None
        if decided is None
        else DecidedOut(
            metric=decided[0],
            ratio=finite(decided[1]),
            low=finite(decided[2]),
            high=finite(decided[3]),
        ),
    )
