"""The nouns of tuner: frozen records and small enums, no I/O.

Every other module speaks in these types. They are plain dataclasses so that they can be
built in tests without any machinery, compared by value and turned into JSON with
:func:`to_jsonable`. They live in a module per kind (:mod:`.kinds`, :mod:`.config`,
:mod:`.workload`, :mod:`.measurements`, :mod:`.jsonable`) and are all importable from here.
"""

from tuner.domain.config import GpuProfile, Knobs, ModelSpec, ServingConfig, typed_knobs
from tuner.domain.jsonable import to_jsonable
from tuner.domain.kinds import FailureClass, Objective, Regime, TrialStatus
from tuner.domain.measurements import (
    ClientHealth,
    Estimate,
    LatencyStats,
    MemoryUsage,
    Provenance,
    RequestRecord,
    ServerInfo,
    TrialResult,
    WindowEnergy,
    WindowMetrics,
    interrupted,
    stopped_early,
)
from tuner.domain.workload import SEED_MAX, SLO_METRICS, Slo, TraceRequest, Workload

__all__ = [
    "SEED_MAX",
    "SLO_METRICS",
    "ClientHealth",
    "Estimate",
    "FailureClass",
    "GpuProfile",
    "Knobs",
    "LatencyStats",
    "MemoryUsage",
    "ModelSpec",
    "Objective",
    "Provenance",
    "Regime",
    "RequestRecord",
    "ServerInfo",
    "ServingConfig",
    "Slo",
    "TraceRequest",
    "TrialResult",
    "TrialStatus",
    "WindowEnergy",
    "WindowMetrics",
    "Workload",
    "interrupted",
    "stopped_early",
    "to_jsonable",
    "typed_knobs",
]
