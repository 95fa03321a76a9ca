"""Parameter importances of a study, computed by Optuna from its own storage.

An exception to the rule that only :mod:`tuner.study.loop` and :mod:`tuner.space` import optuna:
importances are Optuna's algorithm over Optuna's trial records, so the dashboards read them
through this one small function instead of re-implementing it. Nothing here writes.

The evaluator is PED-ANOVA (Optuna's default; fANOVA would need scikit-learn): the importance
of a parameter for reaching the top quantile of scores. With the handful of trials a vLLM study
has, the top quantile is widened so that it holds at least two trials (but never all of them).

The target is tuner's scalar score (:func:`tuner.scoring.objectives.score_values`) for the study's
objective preset, relative to the baseline trial as :func:`tuner.study.standings.rank` scores it.
Only *measured* trials count (Optuna also holds findings, told with penalty values; they would say
"this parameter decides whether the server starts", which the trials table already shows).
"""

from __future__ import annotations

import math
import warnings

import optuna
from sqlalchemy import exc as sa_exc

from tuner.db import optuna_engine_kwargs
from tuner.domain import Objective
from tuner.errors import StorageError, UsageError
from tuner.scoring import objectives as scoring

MIN_TRIALS = 2
_MEASURED = "complete"  # the "tuner_status" user attribute tuner.study.loop sets on every trial


def param_importances(
    storage_url: str, study_name: str, *, objective: Objective = Objective.BALANCED
) -> dict[str, float]:
    """PED-ANOVA importance of each searched parameter for the score, summing to 1, largest first.

    Returns ``{}`` when there is nothing to compute: fewer than :data:`MIN_TRIALS` measured
    trials, no parameter that took two values, or a score that does not vary. Raises
    :class:`UsageError` when the storage holds no Optuna study of that name and
    :class:`StorageError` when the storage cannot be read.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage: optuna.storages.RDBStorage | None = None
    try:
        # skip_table_creation: reading must not add Optuna's tables to a database without them.
        storage = optuna.storages.RDBStorage(
            storage_url,
            engine_kwargs=optuna_engine_kwargs(storage_url),  # a read-only file read-only
            skip_table_creation=True,
        )
        study = optuna.load_study(study_name=study_name, storage=storage)
        trials = study.get_trials(deepcopy=True, states=(optuna.trial.TrialState.COMPLETE,))
    except KeyError as e:
        raise UsageError(
            f"no Optuna study named {study_name!r} in {storage_url}",
            hint="was the study created by `tuner run` against this storage?",
        ) from e
    except (sa_exc.SQLAlchemyError, optuna.exceptions.OptunaError, RuntimeError, ValueError) as e:
        raise StorageError(
            f"cannot read the Optuna storage {storage_url}: {e}",
            hint="check the --storage URL (the one `tuner run` used)",
        ) from e
    finally:
        if storage is not None:
            storage.engine.dispose()
    measured = [
        t for t in trials if t.user_attrs.get("tuner_status") == _MEASURED and t.values is not None
    ]
    if len(measured) < MIN_TRIALS:
        return {}
    reference = next((list(t.values) for t in measured if t.user_attrs.get("baseline")), None)
    scores = {t.number: scoring.score_values(t.values, objective, reference) for t in measured}
    common = set.intersection(*(set(t.params) for t in measured))
    varying = [p for p in sorted(common) if len({repr(t.params[p]) for t in measured}) > 1]
    if not varying or len(set(scores.values())) < 2:
        return {}
    # A single-objective copy of just the measured trials: the evaluator needs one target value
    # and the trials it should learn from, nothing else.
    copy = optuna.create_study(direction="maximize")
    for t in measured:
        copy.add_trial(
            optuna.trial.create_trial(
                params=t.params,
                distributions=t.distributions,
                value=scores[t.number],
            )
        )
    quantile = min(0.5, max(0.1, MIN_TRIALS / len(measured)))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    with warnings.catch_warnings():
        # "importances will be equal" when ties fill the quantile: the zeros say it already.
        warnings.simplefilter("ignore")
        raw = optuna.importance.get_param_importances(copy, evaluator=evaluator, params=varying)
    out = {k: float(v) for k, v in raw.items() if math.isfinite(v)}
    return out if any(v > 0 for v in out.values()) else {}
