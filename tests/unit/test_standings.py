"""tuner.study.standings from rows alone: one study's standings and the picks across studies."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.test_report_study import _study, _trial
from tuner.db.rows import TrialPhase
from tuner.domain import FailureClass, Objective, ServingConfig, Slo
from tuner.results.recommend import recommendation
from tuner.scoring.significance import BETTER, NO_DIFFERENCE
from tuner.study.confirm import DEFAULTS_LABEL, Confirmed
from tuner.study.standings import baseline, best_across, standings

FAST = ServingConfig(max_num_seqs=64)
BROKEN = ServingConfig(max_num_seqs=8)


def test_standings_score_against_the_search_baseline_and_leave_out_canary_failures() -> None:
    rows = [
        _trial(0, 100.0),
        _trial(1, 150.0, config=FAST),
        _trial(2, 300.0, config=BROKEN),
        _trial(3, config=BROKEN, failure=FailureClass.CANARY_FAILED, phase=TrialPhase.CONFIRM),
        _trial(4, 500.0, phase=TrialPhase.CONFIRM),  # a confirmation launch is not ranked
        _trial(5, 200.0, p99=1e4, config=ServingConfig(max_num_seqs=32)),  # misses the SLO
    ]
    assert baseline(rows) is rows[0]
    table = standings(rows, Objective.THROUGHPUT, Slo(e2e_p99_ms=1000.0))
    assert [(r.number, r.score, r.feasible) for r in table] == [
        (1, 1.5, True),
        (0, 1.0, True),
        (5, 2.0, False),
    ]
    assert table[0].row is rows[1] and all(r.relative for r in table)
    assert not standings(rows[1:2], Objective.THROUGHPUT, Slo())[0].relative  # no defaults


def test_best_across_takes_each_studys_pick_and_gives_a_tie_to_the_newer_study() -> None:
    rows = [_trial(0, 100.0), _trial(1, 150.0, config=FAST)]
    old, new = _study("old", updated_at=1.0), _study("new", updated_at=2.0)
    picks = best_across(
        [(old, rows, Objective.THROUGHPUT, None), (new, rows, Objective.THROUGHPUT, None)]
    )
    assert [(s.name, r.number) for s, r in picks] == [("new", 1), ("old", 1)]

    defaults = Confirmed(ServingConfig(), DEFAULTS_LABEL, NO_DIFFERENCE, 1.0, 1.0, 1.0, None, ())
    picks = best_across(
        [(old, rows, Objective.THROUGHPUT, None), (new, rows, Objective.THROUGHPUT, defaults)]
    )
    assert [(s.name, r.number) for s, r in picks] == [("old", 1), ("new", 0)]
    winner = Confirmed(FAST, "#1", BETTER, 1.5, 1.2, 1.9, 3, ())
    assert best_across([(new, rows, Objective.THROUGHPUT, winner)])[0][1].number == 1
    assert best_across([(new, [], Objective.THROUGHPUT, None)]) == []


def test_a_tie_across_studies_goes_to_a_confirmed_pick_before_a_newer_study() -> None:
    """Two studies whose picks tie (both vLLM's defaults, 1.000): the one whose confirmation
    decided it is recommended over a newer study's single unconfirmed launch."""
    rows = [_trial(0, 100.0)]
    confirmed, newer = _study("confirmed", updated_at=1.0), _study("newer", updated_at=2.0)
    defaults = Confirmed(ServingConfig(), DEFAULTS_LABEL, NO_DIFFERENCE, 1.0, 1.0, 1.0, None, ())
    picks = best_across(
        [
            (confirmed, rows, Objective.THROUGHPUT, defaults),
            (newer, rows, Objective.THROUGHPUT, None),
        ]
    )
    assert [(s.name, r.number, r.score) for s, r in picks] == [
        ("confirmed", 0, 1.0),
        ("newer", 0, 1.0),
    ]


class _Repo:
    """The reads :func:`tuner.results.recommend.recommendation` makes, from rows in memory."""

    def __init__(self, study: Any, rows: list[Any]) -> None:
        self.study, self.rows = study, rows

    def get_study(self, name: str) -> Any:
        return self.study

    def list_trials(self, name: str, limit: int | None = 100) -> list[Any]:
        return self.rows

    def list_comparisons(self, name: str) -> list[Any]:
        return []


def test_the_recommendations_defaults_are_the_baseline_its_score_is_against() -> None:
    """The sampler measured the defaults twice (#0, then #2, faster): ``tuner best`` shows
    the numbers of #0, the score's reference, not those of the better-ranked #2."""
    rows = [_trial(0, 100.0, mem_gib=9.0), _trial(1, 150.0, config=FAST), _trial(2, 120.0)]
    rows[2] = dataclasses.replace(rows[2], is_baseline=True)
    rec = recommendation(_Repo(_study(), rows), "s")  # type: ignore[arg-type]
    assert rec is not None and rec.trial_number == 1 and rec.score == 1.5
    assert rec.baseline_metrics is not None
    assert rec.baseline_metrics["output_throughput"].median == 100.0
    assert rec.baseline_memory_gib == 9.0
    assert "defaults 100 [" in rec.render()


def test_the_recommendations_flags_line_is_shell_quoted_as_its_serve_line() -> None:
    odd = ServingConfig(extra={"code_revision": "p|q\nr"})
    rows = [_trial(0, 100.0), _trial(1, 150.0, config=odd)]
    rec = recommendation(_Repo(_study(), rows), "s")  # type: ignore[arg-type]
    assert rec is not None
    assert "  flags: --code-revision 'p|q\nr'\n" in rec.render()
    assert "vllm serve m --code-revision 'p|q\nr'" in rec.serve_command


def test_the_page_recommends_the_trial_tuner_best_names_when_the_defaults_are_kept(
    monkeypatch: Any,
) -> None:
    """The sampler measured the defaults twice (#0, then #2, faster) and the confirmation kept
    the defaults: `tuner best` named #2 (the best-ranked defaults trial) while the study page
    marked #0 (the first). Both now take :func:`tuner.study.standings.pick`."""
    from api.dashboards.charts import study_charts
    from tuner.results.report import study as report_study
    from tuner.study.standings import pick

    rows = [_trial(0, 100.0), _trial(1, 90.0, config=FAST), _trial(2, 120.0)]
    rows[2] = dataclasses.replace(rows[2], is_baseline=True)
    kept = Confirmed(ServingConfig(), DEFAULTS_LABEL, NO_DIFFERENCE, 1.0, 1.0, 1.0, None, ())
    chosen = pick(_study(), rows, kept)
    assert chosen is not None and chosen.number == 2
    monkeypatch.setattr(report_study, "choose", lambda _rows, _objective: kept)
    report = report_study.study_report(_study(), rows)
    assert report.recommended == 2
    marked = study_charts(report)["pareto"]["recommended"]
    assert marked is not None and report.pareto[marked].number == 2
    assert (
        recommendation(_Repo(_study(), rows), "s").trial_number == pick(_study(), rows, None).number
    )  # type: ignore[arg-type,union-attr]
