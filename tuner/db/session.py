"""Engines and sessions, and the one place SQLAlchemy's errors become :class:`StorageError`.

SQLite is the default store and is shared by several processes (the study, the API, a second
``tuner`` command): engines put it in WAL mode, so readers never block the writer, and give it
a busy timeout, so a writer waits for another instead of failing with "database is locked".
A SQLite file this process cannot write (or whose directory it cannot write, where WAL mode
keeps its ``-wal`` and ``-shm`` files) is opened read-only instead: the commands that only
read work on it, and a write fails with a StorageError that says how to get a writable copy.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from tuner.db.models import VERSION_TABLE
from tuner.errors import StorageError

ENV_URL = "TUNER_DB_URL"
DEFAULT_FILE = "tuner.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000

DAMAGED_HINT = (
    "the database file is damaged: restore it from a copy (`sqlite3 FILE .recover` may save "
    "what is left)"
)
URL_EXAMPLES = "sqlite:///path/to/tuner.db or postgresql+psycopg://user:password@host/dbname"
_URL_HINT = f"pass --storage or set {ENV_URL}, e.g. {URL_EXAMPLES}"


def default_url() -> str:
    """The database URL: ``$TUNER_DB_URL`` if set, else ``./tuner.db`` in the working directory.

    The file path is made absolute now, so that the URL means the same file wherever it is
    used later.
    """
    return os.environ.get(ENV_URL, "").strip() or "sqlite:///" + str(Path.cwd() / DEFAULT_FILE)


def safe_url(url: str | URL) -> str:
    """``url`` for messages: the password masked, or the raw text if it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        return str(url)


def with_storage(command: str, url: str | None) -> str:
    """``command`` as a hint names it: with ``--storage URL`` where the user gave one (the URL
    as given, its password masked, quoted for a shell), else it would read the default one."""
    return f"{command} --storage {shlex.quote(safe_url(url))}" if url else command


def optuna_engine_kwargs(url: str) -> dict[str, Any]:
    """The engine options tuner opens Optuna's storage at ``url`` with (the study loop, the
    merge, the importances): on SQLite, wait up to 30 s for another writer rather than fail,
    and open a file this process cannot write read-only (:func:`unwritable`)."""
    if options := _read_only_options(sqlite_file(url)):
        return options
    return {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}


def unwritable(path: Path) -> str | None:
    """Why this process cannot write SQLite file ``path`` (its directory, where SQLite keeps
    its ``-wal``, ``-shm`` and journal files, or the file itself), in words; None if it can.
    A missing file is judged by its directory; a missing directory is not judged (tuner
    creates it, and says so if it cannot)."""
    where = path.parent
    if where.is_dir() and not os.access(where, os.W_OK | os.X_OK):
        return f"its directory {where} is not writable"
    if path.is_file() and not os.access(path, os.W_OK):
        return f"the file {path} is not writable"
    return None


def read_only(path: Path) -> dict[str, Any]:
    """Engine arguments that open SQLite file ``path`` read-only, without writing anything
    (not even the ``-wal`` / ``-shm`` files or the WAL switch tuner's engines make).

    A file with no ``-wal`` beside it is closed (the file of a finished study, a copy carried
    over, a file on read-only media) and is read as immutable, which needs no ``-shm`` and
    works in a directory nobody may write; one with a ``-wal`` may be in use, so it is read
    with locking (``mode=ro``). Which one is decided at each connection, and no connection is
    kept (NullPool): one opened immutable while no writer had the file open would go on
    reading the file as it was once a writer (another user's study) changes it, its -wal
    unread and its pages cached.
    """
    quoted = "file:" + urllib.parse.quote(str(path))
    wal = path.with_name(path.name + "-wal")

    def connect() -> sqlite3.Connection:
        uri = quoted + ("?mode=ro" if wal.exists() else "?immutable=1")
        return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)

    return {"creator": connect, "poolclass": NullPool}


def _read_only_options(path: Path | None) -> dict[str, Any]:
    """:func:`read_only` for an existing SQLite file this process cannot write; {} otherwise."""
    return read_only(path) if path is not None and path.is_file() and unwritable(path) else {}


def optuna_rdb(url: str, **options: Any) -> Any:
    """Optuna's storage at ``url`` (an ``optuna.storages.RDBStorage``, opened with
    :func:`optuna_engine_kwargs` and ``options``); tables set up by an Optuna at another
    schema are a StorageError that says what to do, not Optuna's RuntimeError."""
    import optuna

    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=optuna_engine_kwargs(url), **options)
    except RuntimeError as exc:  # Optuna's "no longer compatible with the table schema"
        text = str(exc).strip()
        if type(exc) is not RuntimeError or "schema" not in text:
            raise
        raise StorageError(
            f"Optuna cannot use the database {safe_url(url)}: {text.splitlines()[0]}",
            hint=f"its Optuna tables were set up by another Optuna than this one "
            f"({optuna.__version__}): run tuner with that Optuna, or upgrade a copy with "
            "`optuna storage upgrade --storage URL` and point tuner at the copy",
        ) from None


def not_sqlite(url: str | URL) -> Path | None:
    """The file a ``sqlite:///`` URL names when it holds something that is not a SQLite
    database (it does not start with SQLite's header); None for anything else, an empty file
    (which SQLite makes a database of) included."""
    path = sqlite_file(url)
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except OSError:
        return None
    return path if head and head != _SQLITE_HEADER else None


_SQLITE_HEADER = b"SQLite format 3\x00"


def make_engine(url: str, url_hint: str = _URL_HINT) -> Engine:
    """An engine for ``url``; for a SQLite file, create its directory and set WAL mode,
    a busy timeout and foreign-key enforcement on every connection. An existing SQLite file
    this process cannot write (:func:`unwritable`) is opened :func:`read_only`.

    Raises StorageError for a malformed URL or a database driver that is not installed, with
    ``url_hint`` (where the URL came from, and what one looks like) where the URL is to blame.
    Nothing connects yet: unreachable servers show up at the first query.
    """
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as e:
        raise StorageError(f"not a database URL: {url!r}", hint=url_hint) from e
    path = sqlite_file(parsed)
    options = _read_only_options(path)
    if path is not None and not options:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(
                f"cannot create the directory for database {parsed.database}: {e}",
                hint="pick a writable location: " + url_hint,
            ) from e
    try:
        engine = create_engine(parsed, **options)
    except (sa_exc.NoSuchModuleError, ImportError) as e:
        hint = url_hint
        if parsed.get_backend_name() == "postgresql":
            hint = "install the PostgreSQL driver: pip install 'tuner[postgres]'"
        raise StorageError(f"cannot use database {safe_url(parsed)}: {e}", hint=hint) from e
    except sa_exc.ArgumentError as e:  # sqlite://t.db: a URL, but not one of a database file
        why = (
            "a SQLite file is sqlite:///relative/path.db or sqlite:////absolute/path.db: three "
            "slashes before the path"
            if parsed.get_backend_name() == "sqlite"
            else str(e).splitlines()[0]
        )
        raise StorageError(f"not a database URL: {url!r} ({why})", hint=url_hint) from e
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_read_pragmas if options else _sqlite_pragmas)
    return engine


def sqlite_file(url: str | URL) -> Path | None:
    """The file a ``sqlite:///`` URL names (``~`` expanded, relative as given); None for other
    databases, memory and URI (``file:``) forms, and for text that is not a URL (make_engine
    says why)."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError:
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    return None if database.startswith("file:") else Path(database).expanduser()


def home_expanded(url: str) -> str:
    """``url`` with a SQLite file's ``~`` expanded, as :func:`sqlite_file` reads it (SQLite
    itself would open ``./~/x.db``, where tuner's checks looked at ``$HOME/x.db``); any other
    URL as given."""
    path = sqlite_file(url)
    if path is None or make_url(url).database == str(path):
        return url
    return make_url(url).set(database=str(path)).render_as_string(hide_password=False)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another process may hold.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        # WAL stays with the file once set: only for tuner's own database (new, or holding its
        # version table), never for another application's that a command only read.
        cursor.execute(
            "SELECT count(*), coalesce(sum(name = ?), 0) FROM sqlite_master WHERE type = 'table'",
            (VERSION_TABLE,),
        )
        tables, ours = cursor.fetchone()
        if not tables or ours:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_read_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # A read-only file keeps the journal mode it has: switching it is a write.
    dbapi_connection.execute("PRAGMA foreign_keys = ON")


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends normally and rolls back otherwise.

    SQLAlchemy errors raised inside the block leave it as :class:`StorageError`; other
    exceptions (a UsageError raised by the caller, say) pass through unchanged.
    """
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except sa_exc.SQLAlchemyError as e:
        session.rollback()
        raise storage_error(e, engine.url) from e
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def storage_error(error: BaseException, url: str | URL, url_hint: str = _URL_HINT) -> StorageError:
    """Translate a database error into a StorageError whose hint says what to do next
    (``url_hint`` as :func:`make_engine` takes it)."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
    lowered = text.lower()
    if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
        hint = "the database has no tuner tables yet: run `tuner db upgrade`"
    elif "database is locked" in lowered or "deadlock" in lowered:
        hint = "another process held the database too long; retry, or use another database"
    elif "file is not a database" in lowered and (path := not_sqlite(url)) is not None:
        return StorageError(
            f"database {safe_url(url)}: file {path} is not a SQLite database",
            hint=url_hint,
        )
    elif "malformed" in lowered or "file is not a database" in lowered:
        hint = DAMAGED_HINT
    elif ("unable to open database" in lowered or "readonly" in lowered) and (
        (path := sqlite_file(url)) is not None and (why := unwritable(path))
    ):
        return _unwritable_error(url, path, why)
    elif "unable to open database" in lowered or "readonly" in lowered:
        hint = "check that the database file and its directory exist and are writable"
    elif isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError):
        hint = f"check that the database is reachable; {url_hint}"
    else:
        hint = "this looks like a bug in tuner or a database changed by hand; please report it"
    return StorageError(f"database error ({safe_url(url)}): {text}", hint=hint)


def _unwritable_error(url: str | URL, path: Path, why: str) -> StorageError:
    """The StorageError for SQLite file ``path`` that this process cannot write (``why``, as
    :func:`unwritable` says it): no file there to read, a ``-wal`` that cannot be read
    read-only, or a write to a file that the reading commands still read."""
    if not path.exists():
        return StorageError(
            f"cannot create database {safe_url(url)}: {why}",
            hint=f"point --storage or {ENV_URL} at a file in a writable directory, or make "
            f"{path.parent} writable",
        )
    wal, shm = (path.with_name(path.name + end) for end in ("-wal", "-shm"))
    if wal.exists() and not shm.exists():
        # SQLite reads a -wal through a -shm, which it cannot create here; immutable=1 would
        # skip the -wal and show the file without the changes in it.
        return StorageError(
            f"cannot read database {safe_url(url)}: {wal.name} beside it holds changes not "
            "folded into the file yet (a writer crashed, or the file was copied without its "
            f"{shm.name}), SQLite reads them only through a {shm.name} that it creates, and "
            f"{why}",
            hint=f"copy {path.name} with {wal.name} to a writable directory and point --storage "
            f"or {ENV_URL} at the copy; or let a user who can write {path.parent} run a tuner "
            "command on it (e.g. tuner studies), which folds the -wal into the file",
        )
    return StorageError(
        f"cannot write database {safe_url(url)}: {why}",
        hint="the commands that only read (tuner studies, trials, best, export, serve's "
        "pages) work on it as it is; to write to it, copy the file to a writable directory "
        f"and point --storage or {ENV_URL} at the copy, or make it writable",
    )
