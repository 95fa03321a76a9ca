"""What a study gives back: the recommendation, datasets (JSON Lines), parameter importances and
the reports drawn from them."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.results.comparisons import comparison_records, comparisons_markdown
    from tuner.results.export import study_records, to_jsonl, trials_markdown
    from tuner.results.recommend import (
        emulated_memory_warning,
        gpu_memory_gib,
        recommendation,
        serve_flags,
    )
    from tuner.results.report import (
        ComparisonReport,
        Distribution,
        StudyReport,
        comparison_report,
        study_report,
    )
    from tuner.results.report.bench_export import bench_files
    from tuner.results.report.curves import (
        StudyCurves,
        TrialCurve,
        any_capacity,
        capacity_bound_note,
        study_curves,
        trial_capacities,
    )
    from tuner.results.report.overview import overview
    from tuner.results.report.study import ParetoPoint
    from tuner.results.sizing import Rate, parse_rate, size

__all__ = [
    "ComparisonReport",
    "Distribution",
    "ParetoPoint",
    "Rate",
    "StudyCurves",
    "StudyReport",
    "TrialCurve",
    "any_capacity",
    "bench_files",
    "capacity_bound_note",
    "comparison_records",
    "comparison_report",
    "comparisons_markdown",
    "emulated_memory_warning",
    "gpu_memory_gib",
    "overview",
    "parse_rate",
    "recommendation",
    "serve_flags",
    "size",
    "study_curves",
    "study_records",
    "study_report",
    "to_jsonl",
    "trial_capacities",
    "trials_markdown",
]

__getattr__, __dir__ = face(__name__)
