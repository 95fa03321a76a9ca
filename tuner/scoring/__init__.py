"""From measurements to judgements: objectives and SLO constraints, the one ranking rule,
launch-to-launch significance and the caveats on a number."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.scoring.caveats import (
        Disagreement,
        Drift,
        WindowFlags,
        arm_window_note,
        beyond_disagreement,
        disagreement,
        disagreement_verdict,
        drift,
        stored_drift,
        stored_drift_note,
        stored_window_note,
        window_flags,
    )
    from tuner.scoring.cost import CAPACITY, trial_cost, usd_per_million
    from tuner.scoring.early_stop import StopPolicy, meets_slo_within_noise
    from tuner.scoring.noise import (
        Components,
        Launch,
        NoiseKey,
        NoiseProfile,
        components,
        launch_value,
        pooled_ratio_interval,
        profile_of,
        trend_ratio_interval,
        trend_taken_out,
    )
    from tuner.scoring.objectives import GIB
    from tuner.scoring.ranking import Standing, best_first, canary_broken
    from tuner.scoring.regime import Diagnosis, diagnose
    from tuner.scoring.sequential import (
        BUDGET,
        CONTINUE,
        MAX_LAUNCHES,
        MIN_EFFECT,
        PRECISE,
        SIGNIFICANT,
        SequentialPlan,
        Step,
        half_width_at,
        launches_for,
        next_step,
    )
    from tuner.scoring.significance import (
        BETTER,
        INCONCLUSIVE,
        NO_DIFFERENCE,
        WORSE,
        RatioInterval,
        is_inconclusive,
        logs,
        ratio_interval,
        ratio_text,
        t_quantile,
        welch,
    )

__all__ = [
    "BETTER",
    "BUDGET",
    "CAPACITY",
    "CONTINUE",
    "GIB",
    "INCONCLUSIVE",
    "MAX_LAUNCHES",
    "MIN_EFFECT",
    "NO_DIFFERENCE",
    "PRECISE",
    "SIGNIFICANT",
    "WORSE",
    "Components",
    "Diagnosis",
    "Disagreement",
    "Drift",
    "Launch",
    "NoiseKey",
    "NoiseProfile",
    "RatioInterval",
    "SequentialPlan",
    "Standing",
    "Step",
    "StopPolicy",
    "WindowFlags",
    "arm_window_note",
    "best_first",
    "beyond_disagreement",
    "canary_broken",
    "components",
    "diagnose",
    "disagreement",
    "disagreement_verdict",
    "drift",
    "half_width_at",
    "is_inconclusive",
    "launch_value",
    "launches_for",
    "logs",
    "meets_slo_within_noise",
    "next_step",
    "pooled_ratio_interval",
    "profile_of",
    "ratio_interval",
    "ratio_text",
    "stored_drift",
    "stored_drift_note",
    "stored_window_note",
    "t_quantile",
    "trend_ratio_interval",
    "trend_taken_out",
    "trial_cost",
    "usd_per_million",
    "welch",
    "window_flags",
]

__getattr__, __dir__ = face(__name__)
