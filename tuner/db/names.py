"""One rule for the name of a new study, wherever one is made: ``tuner run --study``, a spec
file's ``[study] name``, the name a spec derives from its model, GPU and workload, the body of
``POST /v1/studies`` (its JSON Schema states :data:`STUDY_NAME_PATTERN`), and the names
``tuner db merge --rename-suffix`` gives.

A name starts with a letter, a digit or ``_`` (never ``.`` or ``-``: no ``..``, nothing a
command takes for an option), goes on with letters, digits, ``_``, ``.`` and ``-``, and fits
the ``tuner_studies.name`` column: it is a path segment of the API and the dashboards
(``/v1/studies/{name}``), part of file names, and a word a shell reads without quotes. Names an
older tuner stored are read as they are (they can still be listed, exported and merged as the
same study); only names being given to a study are checked, where they are given: the study
loop itself takes the name it is handed, and :meth:`StudySpec.study_name` derives only names
that follow the rule.
"""

from __future__ import annotations

import re

from tuner.db.models import StudyModel
from tuner.errors import UsageError

STUDY_NAME_MAX: int = StudyModel.__table__.c.name.type.length  # type: ignore[attr-defined]
_WORD = r"[A-Za-z0-9_][A-Za-z0-9_.-]"
STUDY_NAME_PATTERN = rf"^{_WORD}{{0,{STUDY_NAME_MAX - 1}}}$"
_NAME = re.compile(STUDY_NAME_PATTERN)
_SUFFIX = re.compile(rf"^{_WORD}*$")
_ALLOWED = "a letter, digit or '_', then letters, digits, '_', '.' or '-'"


def name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a new study's name, or None when nothing is."""
    if _NAME.fullmatch(name):
        return None
    if not name:
        return "is empty"
    if len(name) > STUDY_NAME_MAX:
        return f"is longer than {STUDY_NAME_MAX} characters"
    return f"is not {_ALLOWED}"


def check_study_name(name: str, *, where: str, hint: str = "") -> str:
    """``name`` when it is a good new study name, else UsageError naming ``where`` it came
    from (``--study``, ``study.name``)."""
    problem = name_problem(name)
    if problem is not None:
        raise UsageError(
            f"{where}: study name {name!r} {problem}",
            hint=hint or "pick a name such as ernie-h200-chat (letters, digits, _ . -)",
        )
    return name


def check_suffix(text: str) -> str:
    """A merge's rename suffix (``NAME-SUFFIX``): leading blanks and dashes dropped, then a
    word of the name's alphabet short enough to leave room for a name; else UsageError."""
    suffix = text.strip().lstrip("-")
    hint = "pass a short word such as the host's name: --rename-suffix h200"
    if len(suffix) >= STUDY_NAME_MAX - 1:
        raise UsageError(
            f"--rename-suffix of {len(suffix)} characters leaves no room for a study's name: "
            f"give fewer than {STUDY_NAME_MAX - 1}",
            hint=hint,
        )
    if not _SUFFIX.fullmatch(suffix):
        raise UsageError(
            f"--rename-suffix {text!r} is not a usable suffix: it must be {_ALLOWED}", hint=hint
        )
    return suffix
