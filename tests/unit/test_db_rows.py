"""tuner.db.rows: what a study's stored trial rows say about its trial budget."""

from __future__ import annotations

from tests.unit.test_report_study import _study, _trial
from tuner.db.rows import TrialPhase, budget_free
from tuner.domain import FailureClass, ServingConfig, TrialStatus

RULED_OUT = FailureClass.INVALID_CONFIG


def test_an_interrupted_trial_and_a_first_ruled_out_draw_use_no_place_in_the_budget() -> None:
    """As the study loop counts them: a configuration the space's rules rule out is free the
    first time it is drawn, not the second; an interrupted trial never uses a place; a
    confirmation launch is no trial of the budget at all. The page said "6 of 4 search
    trials" of such a study."""
    bad, other = ServingConfig(max_num_seqs=64), ServingConfig(max_num_seqs=8)
    pruned = TrialStatus.PRUNED
    rows = [
        _trial(0, 100.0),
        _trial(4, config=bad, failure=RULED_OUT, status=pruned),  # drawn again: it counts
        _trial(1, config=bad, failure=RULED_OUT, status=pruned),  # the first draw (by number)
        _trial(2, failure=FailureClass.INTERRUPTED),
        _trial(3, config=other, failure=RULED_OUT, status=pruned),  # another configuration's
        _trial(5, failure=FailureClass.MEMORY_EXCEEDED),  # a finding: it counts
        _trial(6, failure=FailureClass.INTERRUPTED, phase=TrialPhase.CONFIRM),
    ]
    free = budget_free(rows)
    assert free == {RULED_OUT: 2, FailureClass.INTERRUPTED: 1}
    study = _study(trial_counts={TrialStatus.COMPLETE: 1, pruned: 3, TrialStatus.FAILED: 2})
    assert study.n_budget_trials == 6 and study.free_label == ""
    study = _study(trial_counts=study.trial_counts, free_counts=free)
    assert study.n_budget_trials == 3 and study.n_trials == 6
    assert study.free_label == "2 ruled out before launch, 1 interrupted"
