"""tuner's home ($TUNER_HOME): created when missing, refused with a message (not a traceback
from the first write under it) when it cannot be a writable directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.compose import tuner_home, writable_home
from tuner.errors import EnvironmentProblem


def test_a_missing_home_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "a" / "b"))
    assert tuner_home() == tmp_path / "a" / "b" and not (tmp_path / "a").exists()  # only read
    assert writable_home() == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()


def test_a_home_that_cannot_be_a_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "file"))
    with pytest.raises(EnvironmentProblem, match="is a file") as refused:
        writable_home()
    assert "TUNER_HOME" in refused.value.hint
    monkeypatch.setenv("TUNER_HOME", str(tmp_path / "file" / "under"))
    with pytest.raises(EnvironmentProblem, match="cannot be created"):
        writable_home()
