"""URL defaults and the translation of database errors into StorageError."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from tuner.db.migrate import check_integrity, ensure_ready, head_revision, upgrade
from tuner.db.repository import Repository
from tuner.db.session import default_url, make_engine, safe_url, storage_error, unwritable
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
    for url in ("tuner.db", "sqlite://tuner.db"):  # the second was a traceback
        with pytest.raises(StorageError) as err:
            make_engine(url)
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


def _study(engine: Engine, name: str) -> None:
    Repository(engine).create_study(
        name, name, "tiny-ernie", None, "cpu", "chat", "balanced", {}, {}, True, None, 3
    )


def _names(engine: Engine) -> set[str]:
    return {s.name for s in Repository(engine).list_studies()}


def _deny_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process see every file and directory as not writable (os.access), as a user
    without write permission does: root passes chmod's bits, so the test fakes them."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: not mode & os.W_OK and real(p, mode))


def test_a_file_tuner_cannot_write_is_opened_read_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The URI chosen: immutable for a closed file (no -wal beside it: nothing is written
    beside it, not even -shm), mode=ro for one a writer holds open (its -wal is read too)."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    upgrade(url)
    writer = make_engine(url)
    _study(writer, "closed")
    writer.dispose()  # the last connection closes: SQLite removes -wal and -shm
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.db"]
    _deny_writes(monkeypatch)
    assert unwritable(tmp_path / "t.db") == f"its directory {tmp_path} is not writable"
    ensure_ready(url, auto_upgrade=False)
    reader = make_engine(url)
    assert _names(reader) == {"closed"}
    with pytest.raises(StorageError) as err:
        _study(reader, "refused")
    reader.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.db"]
    assert err.value.message == (
        f"cannot write database {url}: its directory {tmp_path} is not writable"
    )
    assert "copy the file to a writable directory" in err.value.hint
    assert "--storage or TUNER_DB_URL" in err.value.hint
    monkeypatch.undo()
    # A writer holds it open, its new study still in the -wal: read with locking (mode=ro).
    writer = make_engine(url)
    _study(writer, "open")
    assert (tmp_path / "t.db-wal").exists()
    _deny_writes(monkeypatch)
    reader = make_engine(url)
    assert _names(reader) == {"closed", "open"}
    reader.dispose()
    writer.dispose()


@contextmanager
def _read_only_directory(where: Path) -> Iterator[None]:
    """``where`` made read-only for real: chmod, and for root (which writes through the mode
    bits) the immutable attribute; the test is skipped where root cannot set it."""
    where.chmod(0o555)
    frozen = False
    try:
        if os.geteuid() == 0:
            chattr = shutil.which("chattr")
            frozen = (
                chattr is not None
                and subprocess.run([chattr, "+i", str(where)], capture_output=True).returncode == 0
            )
            if not frozen:
                pytest.skip("root writes through chmod, and chattr +i is not available here")
        yield
    finally:
        if frozen:
            subprocess.run(["chattr", "-i", str(where)], check=True)
        where.chmod(0o755)


def test_reading_commands_work_on_a_database_in_a_read_only_directory(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tuner.cli.app import app

    shared = tmp_path / "shared"
    url = f"sqlite:///{shared / 't.db'}"
    upgrade(url)
    writer = make_engine(url)
    _study(writer, "finished")
    writer.dispose()
    with _read_only_directory(shared):
        assert unwritable(shared / "t.db") == f"its directory {shared} is not writable"
        run = CliRunner().invoke(app, ["studies", "--storage", url])
        assert run.exit_code == 0 and "finished" in run.output, run.output
        run = CliRunner().invoke(app, ["db", "current", "--storage", url])
        assert run.exit_code == 0 and f"at {head_revision()}" in run.output, run.output
        reader = make_engine(url)
        with pytest.raises(StorageError, match=r"its directory .* is not writable"):
            _study(reader, "refused")
        reader.dispose()
        assert sorted(p.name for p in shared.iterdir()) == ["t.db"]


def test_a_reader_that_cannot_write_the_file_sees_what_a_writer_adds_later(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`tuner serve` over a shared folder it cannot write, opened while no study ran: a study
    another user runs later shows up (no immutable connection is kept past its session)."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    upgrade(url)
    writer = make_engine(url)
    _study(writer, "before")
    writer.dispose()
    _deny_writes(monkeypatch)
    reader = make_engine(url)
    assert _names(reader) == {"before"}
    monkeypatch.undo()
    writer = make_engine(url)
    _study(writer, "while")  # in the -wal, the writer open
    _deny_writes(monkeypatch)
    assert _names(reader) == {"before", "while"}
    monkeypatch.undo()
    writer.dispose()  # folded into the file, the -wal gone
    _study(writer, "after")
    writer.dispose()
    _deny_writes(monkeypatch)
    assert _names(reader) == {"before", "while", "after"}
    reader.dispose()


def test_a_database_that_cannot_be_created_is_not_called_readable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    _deny_writes(monkeypatch)
    error = storage_error(
        sa_exc.OperationalError("x", {}, Exception("unable to open database file")), url
    )
    assert (
        error.message == f"cannot create database {url}: its directory {tmp_path} is not writable"
    )
    assert error.hint == (
        f"point --storage or TUNER_DB_URL at a file in a writable directory, or make {tmp_path} "
        "writable"
    )


def test_a_wal_without_its_shm_in_a_read_only_directory_says_how_to_read_it(
    tmp_path: Path,
) -> None:
    """A -wal left beside the file (a writer crashed, or the folder was copied without the
    -shm) is read only through a -shm, which SQLite cannot create there: the reading command
    fails, and says so, not that reading works."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 't.db'}"
    upgrade(url)
    writer = make_engine(url)
    _study(writer, "unfolded")  # in the -wal while the writer is open
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("t.db", "t.db-wal"):
        shutil.copy(tmp_path / name, shared / name)
    writer.dispose()
    copy = f"sqlite:///{shared / 't.db'}"
    with _read_only_directory(shared):
        run = CliRunner().invoke(app, ["studies", "--storage", copy])
    error = run.exception
    assert isinstance(error, StorageError), run.output
    assert error.message.startswith(f"cannot read database {copy}: t.db-wal beside it holds")
    assert "work on it as it is" not in error.hint
    assert error.hint.startswith("copy t.db with t.db-wal to a writable directory")


def test_a_sqlite_path_under_home_opens_the_file_the_checks_look_at(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`sqlite:///~/x.db`: tuner's checks (the missing file, the read-only file) looked at
    $HOME/x.db, SQLAlchemy opened ./~/x.db, and every command failed "unable to open database
    file" beside a file that was there. `tuner db merge` read the source right, so a user had
    merged into the file they then could not read."""
    from typer.testing import CliRunner

    from tests.integration.test_launch_cli import insert_measured_study
    from tuner.cli.app import app

    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    insert_measured_study(f"sqlite:///{home / 'q.db'}", [], name="mine")
    listed = CliRunner().invoke(app, ["studies", "--storage", "sqlite:///~/q.db"])
    assert listed.exit_code == 0, listed.output
    assert "mine" in listed.stdout
    made = CliRunner().invoke(app, ["db", "upgrade", "--storage", "sqlite:///~/new.db"])
    assert made.exit_code == 0, made.output
    assert (home / "new.db").is_file() and not (elsewhere / "~").exists()


def test_an_old_database_tuner_cannot_write_is_told_how_to_upgrade_a_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file at an older revision that this user cannot write: `tuner studies` said "run
    `tuner db upgrade`", which then said the file is not writable and that reading commands
    work on it as it is, which they do not: no way forward was named."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0002")
    _deny_writes(monkeypatch)
    run = CliRunner().invoke(app, ["studies", "--storage", url])
    assert isinstance(run.exception, StorageError), run.output  # main() prints it, exit 2
    said = f"{run.exception.message} hint: {run.exception.hint}"
    assert "at revision 0002" in said and "cannot be upgraded in place: copy it" in said
    assert f"tuner db merge {tmp_path / 'old.db'}" in said
    assert f"`tuner db upgrade --storage {url}`" not in said  # it would refuse this file


def test_the_copy_hint_is_for_an_old_tuner_database_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The hint to upgrade a copy (or merge) of a file tuner cannot write was spliced into the
    hints for a database without tuner's tables too, telling a user to merge a foreign one."""
    import sqlite3

    from tuner.db.migrate import ensure_current

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE theirs (x INTEGER)")
    _deny_writes(monkeypatch)
    with pytest.raises(StorageError) as refused:
        ensure_current(f"sqlite:///{other}")
    assert "cannot be upgraded in place" not in (refused.value.hint or "")
    assert "tuner db merge" not in (refused.value.hint or "")
