"""Load: workload shapes and traces, prompts of exact token length, the canary, the streaming
load generator, the statistics of what it measured and ``tuner load``'s measurement."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.load.bench import (
        DEFAULT_CONCURRENCY,
        LoadOptions,
        PointResult,
        workload,
    )
    from tuner.load.benchjson import bench_result, goodput_bounds, percentile_key, summary
    from tuner.load.canary import FULL, QUICK, SHAPES, CanaryReport, run_canary
    from tuner.load.curve import (
        CAPACITY_METRICS,
        FEASIBLE,
        MAX_ERROR_RATE,
        SATURATING,
        LoadPoint,
        capacity,
        capacity_text,
        load_points,
        point_label,
        slo_margins,
        trial_metrics,
        unsaturated,
    )
    from tuner.load.fingerprints import fingerprint
    from tuner.load.generator import (
        FirstPointCheck,
        LoadGenerator,
        LoadReport,
        PhaseCallback,
        api_root,
        first_point_windows,
    )
    from tuner.load.prompts import UNKNOWN_VOCAB_NOTE, PromptFactory
    from tuner.load.selfcheck import LAG_BOUND_MS
    from tuner.load.stats import HIGHER_IS_BETTER, estimate, summarize, window_metrics
    from tuner.load.traces import read_trace, tokenizer_file
    from tuner.load.workloads import (
        MAX_POINT_REQUESTS,
        TRACE_PREFIX,
        WORKLOADS,
        check_overrides,
        check_replay,
        check_shapes,
        check_workload,
        get_workload,
        plan_requests,
        recommended_slo,
    )

__all__ = [
    "CAPACITY_METRICS",
    "DEFAULT_CONCURRENCY",
    "FEASIBLE",
    "FULL",
    "HIGHER_IS_BETTER",
    "LAG_BOUND_MS",
    "MAX_ERROR_RATE",
    "MAX_POINT_REQUESTS",
    "QUICK",
    "SATURATING",
    "SHAPES",
    "TRACE_PREFIX",
    "UNKNOWN_VOCAB_NOTE",
    "WORKLOADS",
    "CanaryReport",
    "FirstPointCheck",
    "LoadGenerator",
    "LoadOptions",
    "LoadPoint",
    "LoadReport",
    "PhaseCallback",
    "PointResult",
    "PromptFactory",
    "api_root",
    "bench_result",
    "capacity",
    "capacity_text",
    "check_overrides",
    "check_replay",
    "check_shapes",
    "check_workload",
    "estimate",
    "fingerprint",
    "first_point_windows",
    "get_workload",
    "goodput_bounds",
    "load_points",
    "percentile_key",
    "plan_requests",
    "point_label",
    "read_trace",
    "recommended_slo",
    "run_canary",
    "slo_margins",
    "summarize",
    "summary",
    "tokenizer_file",
    "trial_metrics",
    "unsaturated",
    "window_metrics",
    "workload",
]

__getattr__, __dir__ = face(__name__)
