"""A/B measurements on fresh launches: interleaved runs that resume from their launch logs,
comparisons with intervals, the one pipeline that ``tuner compare`` and ``tuner verify-claims``
run, and published claims judged on it."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.abtest.calibrate import run_calibration
    from tuner.abtest.claims import Claim, load_claims, setup_claims
    from tuner.abtest.claims.facts import Where, machine_flags, runner_passing
    from tuner.abtest.claims.rejudge import rejudge
    from tuner.abtest.claims.verdicts import Outcome, claim_record, verify
    from tuner.abtest.compare import (
        COMPARED,
        FLOORED,
        HEADLINE,
        LAUNCH_VALUES,
        Arm,
        ratio_of,
        run_interleaved,
    )
    from tuner.abtest.decide import (
        UNMEASURED_STOP,
        Design,
        Look,
        judge_look,
        judged_level,
        run_looks,
    )
    from tuner.abtest.launchlog import reusable
    from tuner.abtest.pair import NOT_MEASURED, PairOutcome, run_pair, setup_pair
    from tuner.abtest.pipeline import Watch, open_bench
    from tuner.abtest.profile import (
        launches_profile,
        load_profile,
        log_values,
        noise_key,
        profile_lines,
        record_launch,
    )

__all__ = [
    "COMPARED",
    "FLOORED",
    "HEADLINE",
    "LAUNCH_VALUES",
    "NOT_MEASURED",
    "UNMEASURED_STOP",
    "Arm",
    "Claim",
    "Design",
    "Look",
    "Outcome",
    "PairOutcome",
    "Watch",
    "Where",
    "claim_record",
    "judge_look",
    "judged_level",
    "launches_profile",
    "load_claims",
    "load_profile",
    "log_values",
    "machine_flags",
    "noise_key",
    "open_bench",
    "profile_lines",
    "ratio_of",
    "record_launch",
    "rejudge",
    "reusable",
    "run_calibration",
    "run_interleaved",
    "run_looks",
    "run_pair",
    "runner_passing",
    "setup_claims",
    "setup_pair",
    "verify",
]

__getattr__, __dir__ = face(__name__)
