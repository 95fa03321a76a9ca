"""Study specs: TOML files and CLI options turned into one validated StudySpec."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.spec.configs import (
        DEFAULTS,
        check_confidence,
        configs_in,
        knob_table,
        parse_config_spec,
        parse_search,
        parse_workload_overrides,
        with_overrides,
    )
    from tuner.spec.fields import Fail, find_line, read_toml, typed_value, workload_field
    from tuner.spec.resume import (
        FINGERPRINT,
        check_same_requests,
        kept_cap,
        resumed_spec,
        stored_spec,
    )
    from tuner.spec.study import (
        API_SOURCE,
        DEFAULT_SPEC_PATH,
        NO_SLO,
        TRIALS_MAX,
        StudySpec,
        check_flags,
        load_spec,
        spec_from_mapping,
    )

__all__ = [
    "API_SOURCE",
    "DEFAULTS",
    "DEFAULT_SPEC_PATH",
    "FINGERPRINT",
    "NO_SLO",
    "TRIALS_MAX",
    "Fail",
    "StudySpec",
    "check_confidence",
    "check_flags",
    "check_same_requests",
    "configs_in",
    "find_line",
    "kept_cap",
    "knob_table",
    "load_spec",
    "parse_config_spec",
    "parse_search",
    "parse_workload_overrides",
    "read_toml",
    "resumed_spec",
    "spec_from_mapping",
    "stored_spec",
    "typed_value",
    "with_overrides",
    "workload_field",
]

__getattr__, __dir__ = face(__name__)
