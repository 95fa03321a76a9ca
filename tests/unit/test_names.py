"""One rule for study names (tuner.db.names), and every place that makes a name follows it."""

from __future__ import annotations

import re

import pytest

from api import spec_body
from tuner.db.names import (
    STUDY_NAME_MAX,
    STUDY_NAME_PATTERN,
    check_study_name,
    check_suffix,
    name_problem,
)
from tuner.errors import SpecError, UsageError
from tuner.spec.study import StudySpec, spec_from_mapping

GOOD = ["ernie-h200-chat", "a", "_models_x-cpu-smoke-balanced", "v0.32.0_run-2", "x" * 255]
BAD = ["", "../x <script>", "a/b", ".hidden", "-rf", "x y", "a\nb", "a\x00", "x" * 256, "é"]


@pytest.mark.parametrize("name", GOOD)
def test_good_names(name: str) -> None:
    assert name_problem(name) is None and check_study_name(name, where="--study") == name
    assert re.fullmatch(STUDY_NAME_PATTERN.strip("^$"), name)


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_saying_why(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None
    with pytest.raises(UsageError) as refused:
        check_study_name(name, where="--study")
    assert refused.value.message.startswith("--study: study name") and problem in str(refused.value)
    assert "\n" not in refused.value.message.replace(repr(name), "")


def test_the_api_schema_states_the_same_rule() -> None:
    assert spec_body.NAME_PATTERN is STUDY_NAME_PATTERN
    assert STUDY_NAME_MAX == 255


def test_a_spec_file_name_and_every_derived_name_follow_it() -> None:
    body = {"study": {"name": "../x <script>", "model": "tiny-ernie", "gpu": "cpu"}}
    with pytest.raises(SpecError, match=re.escape("s.toml:2: study.name '../x <script>' is not")):
        spec_from_mapping(body, '[study]\nname = "../x <script>"\n', "s.toml")
    for model in ("tiny-ernie", "Qwen/Qwen2.5-0.5B", "/models/my model", "./m", "../../m", "-m"):
        for workload in ("chat", "trace:../t <x>.jsonl"):
            name = StudySpec(model=model, workload=workload).study_name()
            assert name_problem(name) is None, name


def test_suffixes() -> None:
    assert check_suffix("  --h200") == "h200"
    for bad in ("", "-", "../<x> y", "a b"):
        with pytest.raises(UsageError, match="not a usable suffix"):
            check_suffix(bad)
    with pytest.raises(UsageError, match="of 255 characters leaves no room"):
        check_suffix("x" * 255)
