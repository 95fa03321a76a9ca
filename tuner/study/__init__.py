"""A study end to end: composed from a spec, run as an Optuna loop, confirmed against vLLM's
defaults, or taken from the API's queue by a worker."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.study.confirm import CONFIRM_NUMBER_BASE, Confirmed, choose, is_confirmation
    from tuner.study.loop import refuse_taken, run_study, set_up_study
    from tuner.study.parallel import refuse_sqlite
    from tuner.study.planning import stored_plan
    from tuner.study.sharing import runner_gone
    from tuner.study.standings import best_across, score_reference, study_objective, trial_score
    from tuner.study.worker import join_study, run_worker

__all__ = [
    "CONFIRM_NUMBER_BASE",
    "Confirmed",
    "best_across",
    "choose",
    "is_confirmation",
    "join_study",
    "refuse_sqlite",
    "refuse_taken",
    "run_study",
    "run_worker",
    "runner_gone",
    "score_reference",
    "set_up_study",
    "stored_plan",
    "study_objective",
    "trial_score",
]

__getattr__, __dir__ = face(__name__)
