"""tuner.db.rows: what a study's stored trial rows say about its trial budget."""

from __future__ import annotations

from tests.unit.test_report_study import _study, _trial
from tuner.db.rows import FREE_NOTE, USED_NOTE, TrialPhase, TrialRow, budget_free
from tuner.domain import FailureClass, ServingConfig, TrialStatus

RULED_OUT = FailureClass.INVALID_CONFIG


def test_an_interrupted_trial_and_a_first_ruled_out_draw_use_no_place_in_the_budget() -> None:
    """As the study loop counted them: a configuration the space's rules rule out is free the
    first time it is drawn (the loop's note says so), not the second; an interrupted trial
    never uses a place; a confirmation launch is no trial of the budget at all. The page said
    "6 of 4 search trials" of such a study. A ruled-out draw stored before the loop marked
    free ones (no note) used a place, as the loop counts it on a resume: the pages called it
    free, and a resume of "3 of 4" launched nothing."""
    bad, other = ServingConfig(max_num_seqs=64), ServingConfig(max_num_seqs=8)
    pruned = TrialStatus.PRUNED

    def ruled(number: int, config: ServingConfig, note: str) -> TrialRow:
        detail = f"max_num_batched_tokens < max_num_seqs{note}"
        return _trial(number, config=config, failure=RULED_OUT, status=pruned,
                      failure_detail=detail)  # fmt: skip

    rows = [
        _trial(0, 100.0),
        ruled(4, bad, f" ({USED_NOTE})"),  # drawn again: it counts
        ruled(1, bad, f" ({FREE_NOTE})"),  # the first draw
        _trial(2, failure=FailureClass.INTERRUPTED),
        ruled(3, other, f" ({FREE_NOTE})"),  # another configuration's
        _trial(5, failure=FailureClass.MEMORY_EXCEEDED),  # a finding: it counts
        _trial(6, failure=FailureClass.INTERRUPTED, phase=TrialPhase.CONFIRM),
    ]
    free = budget_free(rows)
    assert free == {RULED_OUT: 2, FailureClass.INTERRUPTED: 1}
    old = budget_free([*rows, ruled(7, ServingConfig(max_num_seqs=2), "")])
    assert old == free
    study = _study(trial_counts={TrialStatus.COMPLETE: 1, pruned: 3, TrialStatus.FAILED: 2})
    assert study.n_budget_trials == 6 and study.free_label == ""
    study = _study(trial_counts=study.trial_counts, free_counts=free)
    assert study.n_budget_trials == 3 and study.n_trials == 6
    assert study.free_label == "2 ruled out before launch, 1 interrupted"
