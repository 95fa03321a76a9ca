"""tuner's schema migrations (Alembic), independent of the working directory.

tuner's history is recorded in its own version table, so Optuna's ``alembic_version`` in the
same database is never touched. The Alembic config is built here in code; ``alembic.ini`` at
the repository root only serves developers running ``alembic`` by hand.

The scripts live in ``alembic/`` at the repository root. An installed tuner (a wheel) carries
them as the package ``tuner.db.migrations`` (pyproject.toml maps it to ``alembic/``); a source
checkout run in place (``pythonpath``, an editable install) reads ``alembic/`` itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, inspect, text
from sqlalchemy import exc as sa_exc

from tuner.db.models import TABLE_PREFIX, VERSION_TABLE
from tuner.db.session import (
    DAMAGED_HINT,
    make_engine,
    optuna_rdb,
    safe_url,
    sqlite_file,
    storage_error,
    unwritable,
)
from tuner.errors import StorageError


def upgrade_hint(url: str) -> str:
    """The command that migrates the database at ``url`` (named: a bare `tuner db upgrade`
    would migrate the default database instead), quoted for a shell."""
    shown = safe_url(url)
    masked = " (its password masked here)" if shown != url else ""
    return f"run `tuner db upgrade --storage {shlex.quote(shown)}`{masked}"


def _old_revision_hint(url: str) -> str:
    """How to bring tuner's tables of an older revision at ``url`` up: :func:`upgrade_hint`,
    or, for a SQLite file this process cannot write, upgrading a copy or merging it."""
    path = sqlite_file(url)
    why = unwritable(path) if path is not None and path.is_file() else None
    if path is not None and why is not None:  # `tuner db upgrade` would refuse it
        named = shlex.quote(str(path))
        return (
            f"{why}, so it cannot be upgraded in place: copy it where you can write (`cp "
            f"{named} COPY.db`) and run `tuner db upgrade --storage sqlite:///COPY.db` on the "
            f"copy, or `tuner db merge {named}` into a database of yours"
        )
    return upgrade_hint(url)


# Any constant will do: every tuner process takes this PostgreSQL advisory lock to set up tables.
_SETUP_LOCK = 0x74756E6572  # "tuner"
# Present once Optuna's RDBStorage has set up its schema (and stamped its own alembic_version).
_OPTUNA_TABLES = frozenset({"studies", "trials", "version_info", "alembic_version"})
# Optuna's revisions, this Optuna's and a newer one's: v3.2.0.a and the like. Another
# application's Alembic revisions are hex ids (1a2b3c4d5e6f) or names of its own.
_OPTUNA_REVISION = re.compile(r"v\d+\.\d+\.\d+\.[a-z]")


def script_dirs() -> tuple[Path, Path]:
    """Where tuner looks for its migration scripts, in order: beside this module in an
    installed package (``tuner/db/migrations``), then ``alembic/`` of the source checkout this
    module sits in (two levels above the package)."""
    installed = resources.files(__package__ or "tuner.db").joinpath("migrations")
    here = Path(__file__).resolve()
    return Path(str(installed)), here.parents[2] / "alembic"


def _has_scripts(where: Path) -> bool:
    # env.py and versions/ both: the parent of an installed tuner is site-packages, whose
    # ``alembic`` is the Alembic library itself.
    return (where / "env.py").is_file() and (where / "versions").is_dir()


def alembic_dir() -> Path:
    """The directory of tuner's migration scripts (Alembic's ``script_location``)."""
    candidates = script_dirs()
    for where in candidates:
        if _has_scripts(where):
            return where
    raise StorageError(
        "tuner's migration scripts are missing (looked in "
        + " and ".join(str(c) for c in candidates)
        + ")",
        hint="reinstall tuner (pip install --force-reinstall tuner, or pip install -e . in its "
        "source tree)",
    )


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(alembic_dir()))
    return config


@contextmanager
def _connection(url: str) -> Iterator[Connection]:
    """A connection in a transaction, with SQLAlchemy and Alembic errors as StorageError."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            yield connection
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, url) from e
    except CommandError as e:
        raise StorageError(f"migration failed for {safe_url(url)}: {e}") from e
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision this tuner knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None, "alembic/versions holds no migration"
    return head


def known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}


def current_revision(url: str) -> str | None:
    """The revision the database is at, or None when tuner's tables were never created.

    Raises StorageError for a database whose ``alembic_version`` another application keeps
    (:func:`check_alembic_version`)."""
    with _connection(url) as connection:
        check_alembic_version(connection, url)
        return revision_of(connection)


def revision_of(connection: Connection) -> str | None:
    """The revision recorded in tuner's version table, or None."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def holdings(url: str) -> str:
    """What database ``url`` holds, in words after its name, for one with no tuner revision
    (:func:`current_revision` is None): see :func:`_holdings`."""
    with _connection(url) as connection:
        return _holdings(inspect(connection).get_table_names())


def _holdings(tables: Iterable[str]) -> str:
    """It "is empty", it "has no tuner tables (2 other tables)" (Optuna's, or another
    application's), or it "has tuner tables [...] but no revision record"."""
    tables = list(tables)
    leftovers = sorted(t for t in tables if _ours(t))
    if leftovers:
        return f"has tuner tables {leftovers} but no revision record"
    others = [t for t in tables if t != VERSION_TABLE]  # its version table, emptied
    if not others:
        return "is empty"
    return f"has no tuner tables ({len(others)} other table{'' if len(others) == 1 else 's'})"


def check_leftovers(url: str, tables: Iterable[str] | None = None) -> None:
    """StorageError when the database at ``url`` (whose ``tables`` these are, read when None)
    has tuner tables but no revision record: tuner cannot tell what they hold, so it neither
    upgrades nor uses them."""
    if tables is None:
        with _connection(url) as connection:
            tables = inspect(connection).get_table_names()
    tables = list(tables)
    if any(_ours(t) for t in tables):
        raise StorageError(
            f"database {safe_url(url)} {_holdings(tables)}",
            hint="move them out of the way (or use a new database), then " + upgrade_hint(url),
        )


def check_alembic_version(connection: Connection, url: str) -> None:
    """StorageError when the database's ``alembic_version`` table is another application's.

    That table is Optuna's (tuner keeps its own history in its own table): Optuna would stamp
    its revision into another application's table, or refuse its revision as a schema of its
    own it cannot read, after tuner and Optuna had created their tables beside that
    application's. Optuna writes ``version_info`` before its first revision, and names its
    revisions v3.2.0.a and the like, a newer Optuna's included (whose database
    :func:`tuner.db.session.optuna_rdb` refuses with its own message).
    """
    tables = set(inspect(connection).get_table_names())
    if "alembic_version" not in tables:
        return
    heads = MigrationContext.configure(connection).get_current_heads()
    if heads and all(_OPTUNA_REVISION.fullmatch(head) for head in heads):
        return
    if not heads and "version_info" in tables:
        return  # an empty table beside Optuna's: Optuna stamps it as it does a new database
    held = f"at revision {', '.join(heads)}" if heads else "empty"
    raise StorageError(
        f"the alembic_version table of database {safe_url(url)} belongs to another application "
        f"({held}, not an Optuna revision); Optuna, whose tables tuner keeps beside its own, "
        "records its schema in that table",
        hint="give tuner a database of its own (on PostgreSQL, a database or a schema of its "
        "own) and pass it with --storage or TUNER_DB_URL",
    )


def check_integrity(url: str) -> None:
    """StorageError when a SQLite database is damaged (:func:`damage`) or cannot be read."""
    with _connection(url) as connection:
        problems = damage(connection)
    if problems:
        raise damaged(f"database {safe_url(url)}", problems)


def damage(connection: Connection) -> list[str]:
    """What SQLite's quick check (every page's structure) finds wrong; [] for other databases,
    which look after their own pages."""
    if connection.dialect.name != "sqlite":
        return []
    rows = connection.exec_driver_sql("PRAGMA quick_check")
    return [str(row[0]) for row in rows if row[0] != "ok"]


def damaged(what: str, problems: list[str]) -> StorageError:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return StorageError(f"{what} is damaged: {problems[0]}{more}", hint=DAMAGED_HINT)


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate tuner's tables up to ``revision``; other tables in the database are untouched.
    Tuner tables without a revision record are refused (:func:`check_leftovers`)."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate tuner's tables down to ``revision`` (``"base"`` drops them all)."""
    _run(url, "downgrade", revision)


def _run(url: str, direction: str, revision: str) -> None:
    config = _config()
    with _connection(url) as connection:
        check_alembic_version(connection, url)
        current = revision_of(connection)
        check_known(url, current)
        if current is None and direction == "upgrade":  # else: "table ... already exists"
            check_leftovers(url, inspect(connection).get_table_names())
        # env.py picks this connection up instead of opening its own.
        config.attributes["connection"] = connection
        getattr(command, direction)(config, revision)


def check_known(url: str, current: str | None) -> None:
    """StorageError when the database is at a revision (``current``) this tuner does not know."""
    if current is not None and current not in known_revisions():
        raise StorageError(
            f"database {safe_url(url)} is at revision {current}, which this tuner does not know",
            hint="it was migrated by a newer tuner: upgrade tuner",
        )


def ensure_current(url: str) -> None:
    """Raise StorageError unless tuner's tables are at the head revision."""
    current, head = current_revision(url), head_revision()
    if current == head:
        return
    where = safe_url(url)
    if current is None:
        held = holdings(url)  # "is empty", or another application's: "(2 other tables)"
        foreign = held.startswith("has no tuner tables (")
        raise StorageError(
            f"database {where} {held if foreign else 'has no tuner tables'}, tuner needs {head}",
            hint=(
                "point --storage (or $TUNER_DB_URL) at tuner's database; to keep tuner's "
                f"tables beside these, {upgrade_hint(url)}"
            )
            if foreign
            else upgrade_hint(url),
        )
    check_known(url, current)
    raise StorageError(
        f"database {where} at revision {current}, tuner needs {head}",
        hint=_old_revision_hint(url),
    )


def ensure_ready(url: str, auto_upgrade: bool = True) -> None:
    """Like :func:`ensure_current`, but create tuner's tables in a database that has none,
    and Optuna's storage tables where they are missing.

    Only a database without any ``tuner_`` table is upgraded automatically (it may hold
    Optuna's tables); one at an older revision holds data, and its owner decides when to
    migrate it, so that raises StorageError. On PostgreSQL, processes set up one at a time:
    two workers starting on a fresh database would otherwise both create the same tables
    (tuner's, or Optuna's on its first use) and the second would fail.
    """
    if auto_upgrade:
        with _setup_lock(url):
            with _connection(url) as connection:
                check_alembic_version(connection, url)
                current = revision_of(connection)
                tables = set(inspect(connection).get_table_names())
            if current is None:
                upgrade(url)  # refuses tuner tables without a revision (check_leftovers)
            if _OPTUNA_TABLES - tables:
                _create_optuna_tables(url)
    ensure_current(url)


@contextmanager
def _setup_lock(url: str) -> Iterator[None]:
    """Hold tuner's set-up lock for the block: a session advisory lock on PostgreSQL, the
    backend meant for workers on several hosts. Other backends get no lock (two processes
    setting up one fresh SQLite file at the same instant remain a race)."""
    engine = make_engine(url)
    try:
        if engine.dialect.name != "postgresql":
            yield
            return
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _SETUP_LOCK})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _SETUP_LOCK})
    except sa_exc.SQLAlchemyError as e:
        raise storage_error(e, url) from e
    finally:
        engine.dispose()


def _create_optuna_tables(url: str) -> None:
    """Let Optuna create its tables now, under the set-up lock, rather than on first use."""
    optuna_rdb(url).engine.dispose()


def _ours(table: str | None) -> bool:
    return table is not None and table.startswith(TABLE_PREFIX) and table != VERSION_TABLE


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic hook: reflect only tuner's tables, since Optuna's share the database."""
    return _ours(name) if type_ == "table" else True


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Alembic hook: autogenerate compares only tuner's tables."""
    return _ours(name) if type_ == "table" else True
