"""vLLM as tuner reads it, without running it: the flags a version ships and how a knob is spelt
on its command line (``flags``, ``flagvalues``, ``argv``, ``flaghelp``), which version an
interpreter has (``version``), its compile caches (``caches``) and the language of its logs
(``logparse``). Starting and stopping the process is ``tuner.runner``'s."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.vllm.caches import CacheDir, cache_dir, cache_key
    from tuner.vllm.flags import (
        PROBE,
        PROBE_MARK,
        PROBE_TIMEOUT_S,
        Flag,
        FlagCatalog,
        cache_path,
        knob_spelling,
        shipped,
        shipped_union,
        shipped_versions,
        spelling_key,
        spelt_like_a_flag,
    )
    from tuner.vllm.flagvalues import knob_flag, knob_key, typed_value
    from tuner.vllm.logparse import classify_start_failure, start_failed
    from tuner.vllm.version import VllmInstall, parse_version

__all__ = [
    "PROBE",
    "PROBE_MARK",
    "PROBE_TIMEOUT_S",
    "CacheDir",
    "Flag",
    "FlagCatalog",
    "VllmInstall",
    "cache_dir",
    "cache_key",
    "cache_path",
    "classify_start_failure",
    "knob_flag",
    "knob_key",
    "knob_spelling",
    "parse_version",
    "shipped",
    "shipped_union",
    "shipped_versions",
    "spelling_key",
    "spelt_like_a_flag",
    "start_failed",
    "typed_value",
]

__getattr__, __dir__ = face(__name__)
