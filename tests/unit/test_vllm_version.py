"""Version parsing (pure); detection through an interpreter lives in tests/integration."""

from __future__ import annotations

import pytest
from packaging.version import Version

from tuner.errors import EnvironmentProblem
from tuner.vllm.version import VllmInstall, parse_version


@pytest.mark.parametrize(
    ("text", "release", "local"),
    [
        ("0.32.0+cpu", (0, 32, 0), "cpu"),
        ("0.26.0", (0, 26, 0), None),
        ("v0.13.0", (0, 13, 0), None),
        ("0.11.2.dev5+g1234abc", (0, 11, 2), "g1234abc"),
        (" 0.8.5.post1 ", (0, 8, 5), None),
    ],
)
def test_parse_version_tolerates_local_and_prefixed(
    text: str, release: tuple[int, ...], local: str | None
) -> None:
    version = parse_version(text)
    assert version.release == release
    assert version.local == local


def test_local_build_sorts_with_its_release() -> None:
    assert parse_version("0.32.0+cpu") > Version("0.26.0")
    assert parse_version("0.13.0+cpu").release >= (0, 13)


@pytest.mark.parametrize("text", ["dev", "", "not-a-version"])
def test_unreadable_version_is_an_environment_problem(text: str) -> None:
    with pytest.raises(EnvironmentProblem, match="cannot read the vLLM version"):
        parse_version(text)


def test_install_record_is_frozen() -> None:
    install = VllmInstall(python="/py", version="0.32.0", location="/site/vllm")
    with pytest.raises(AttributeError):
        install.version = "1"  # type: ignore[misc]
