"""Data for the dashboards, first; figures second (drawn by the templates in api/dashboards).

Compute, then draw: the functions here turn repository rows into small frozen objects holding
exactly the numbers a chart or table shows, so they are tested without plotly or a browser.
No I/O: callers read the rows and pass them in.

- :mod:`tuner.results.report.study`: the study page (trials table, optimisation history, Pareto
  front, importances, latency distributions);
- :mod:`tuner.results.report.overview`: the best configuration per model x GPU x workload;
- :mod:`tuner.results.report.compare`: an A/B comparison as a per-metric table.
"""

from tuner.results.report.compare import ComparisonReport, comparison_report
from tuner.results.report.overview import overview
from tuner.results.report.study import Distribution, StudyReport, fallback_importances, study_report

__all__ = [
    "ComparisonReport",
    "Distribution",
    "StudyReport",
    "comparison_report",
    "fallback_importances",
    "overview",
    "study_report",
]
