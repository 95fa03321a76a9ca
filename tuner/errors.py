"""One exception tree for tuner. Foreign exceptions are translated into it once, at the edge
where they happen (process launch, HTTP, NVML, SQL), and the CLI and API map it to messages.

::

    TunerError                      message + ``hint`` (what to do next) + ``exit_code``
    ├── UsageError                  bad input from the user: exit 2, nothing written
    │   ├── SpecError               a study spec file is wrong (carries file and line)
    │   └── HardwareMismatch        --gpu names hardware this machine does not have
    ├── EnvironmentProblem          vLLM missing, interpreter broken, NVML unusable: exit 3
    ├── StorageError                database unreachable or at the wrong revision: exit 3
    └── TrialFailure                a trial could not be measured; carries a FailureClass
        ├── ServerFailure           the vLLM process: did not start, timed out, crashed,
        │                           or a stranger answered its port
        └── LoadFailure             the load generator saw too many errors

``TrialFailure`` never reaches the user as an exception: the runner turns it into a FAILED
:class:`tuner.domain.TrialResult` and the study goes on.
"""

from __future__ import annotations

from tuner.domain import FailureClass


class TunerError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class UsageError(TunerError):
    exit_code = 2


class SpecError(UsageError):
    def __init__(self, message: str, *, path: str, line: int | None = None, hint: str = "") -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}", hint=hint)
        self.path = path
        self.line = line


class HardwareMismatch(UsageError):
    pass


class AmbiguousModel(UsageError):
    """A model's name fits several models measured here (two hub ids' last part): which one
    is the caller's choice (the API answers 409)."""


class EnvironmentProblem(TunerError):
    exit_code = 3


class StorageError(TunerError):
    exit_code = 3


class TrialFailure(TunerError):
    def __init__(self, failure: FailureClass, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.failure = failure
        self.log_tail = log_tail


class ServerFailure(TrialFailure):
    pass


class LoadFailure(TrialFailure):
    pass
