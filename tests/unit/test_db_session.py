"""URL defaults and the translation of database errors into StorageError."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from tuner.db.migrate import check_integrity
from tuner.db.session import default_url, make_engine, safe_url, storage_error
from tuner.errors import StorageError


def test_default_url_is_tuner_db_in_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_url() == f"sqlite:///{tmp_path / 'tuner.db'}"
    monkeypatch.setenv("TUNER_DB_URL", "  ")
    assert default_url() == f"sqlite:///{tmp_path / 'tuner.db'}"


def test_default_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_DB_URL", "postgresql+psycopg://u:p@db/tuner")
    assert default_url() == "postgresql+psycopg://u:p@db/tuner"


def test_safe_url_masks_the_password() -> None:
    assert "secret" not in safe_url("postgresql+psycopg://u:secret@db/tuner")
    assert safe_url("not a url") == "not a url"


def test_malformed_url_is_a_storage_error_with_an_example() -> None:
    with pytest.raises(StorageError) as err:
        make_engine("tuner.db")
    assert "not a database URL" in err.value.message
    assert "sqlite:///" in err.value.hint
    # The options tuner has: --storage (and $TUNER_DB_URL); there is no --db.
    assert "--storage" in err.value.hint and "--db" not in err.value.hint


def test_unknown_backend_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="cannot use database"):
        make_engine("nosuchdb://host/x")


def test_sqlite_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "t.db"
    engine = make_engine(f"sqlite:///{target}")
    engine.dispose()
    assert target.parent.is_dir()


@pytest.mark.parametrize(
    ("message", "hint_part"),
    [
        ("no such table: tuner_studies", "tuner db upgrade"),
        ('relation "tuner_studies" does not exist', "tuner db upgrade"),
        ("database is locked", "retry"),
        ("unable to open database file", "writable"),
        ("could not connect to server", "reachable"),
        ("database disk image is malformed", "damaged: restore it from a copy"),
        ("file is not a database", "damaged"),
    ],
)
def test_storage_error_hints(message: str, hint_part: str) -> None:
    error = sa_exc.OperationalError("SELECT 1", {}, Exception(message))
    translated = storage_error(error, "postgresql+psycopg://u:secret@db/tuner")
    assert isinstance(translated, StorageError)
    assert message in translated.message
    assert "secret" not in translated.message
    assert hint_part in translated.hint
    assert translated.exit_code == 3


def test_a_file_that_is_not_a_sqlite_database_is_not_called_damaged(tmp_path: Path) -> None:
    """SQLite says "file is not a database" of a text file and of a damaged header alike: a
    file without SQLite's header was never a database, so nothing is to be restored."""
    text = tmp_path / "notes.db"
    text.write_text("hello\n")
    error = sa_exc.OperationalError("PRAGMA", {}, Exception("file is not a database"))
    translated = storage_error(error, f"sqlite:///{text}")
    assert f"file {text} is not a SQLite database" in translated.message
    assert "damaged" not in translated.hint and "--storage" in translated.hint
    with pytest.raises(StorageError, match="is not a SQLite database"):
        check_integrity(f"sqlite:///{text}")
    # A SQLite file (its header intact) that SQLite refuses is still damaged.
    real = tmp_path / "real.db"
    real.write_bytes(b"SQLite format 3\x00" + b"\xff" * 100)
    assert "damaged" in storage_error(error, f"sqlite:///{real}").hint
