"""What the wheel holds: pyproject.toml's package list against the source tree, the migration
scripts shipped as tuner.db.migrations, and where tuner/db/migrate.py looks for them.
scripts/wheel-check.sh builds and installs the real wheel; these checks take milliseconds."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tuner.db import migrate
from tuner.errors import StorageError

REPO = Path(__file__).resolve().parents[2]
MIGRATIONS = "tuner.db.migrations"


def _setuptools() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)["tool"]["setuptools"]
    return config


def _source_dir(package: str) -> Path:
    """Where setuptools takes ``package`` from: the longest prefix in package-dir decides."""
    mapping: dict[str, str] = _setuptools().get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return REPO / mapping[prefix] / Path(*parts[i:])
    return REPO / Path(*parts)


def _tree_packages(top: str) -> set[str]:
    """Every directory under ``top`` holding a file (a package, or a namespace one for data),
    as setuptools' namespace-aware discovery used to find them."""
    found = set()
    for path in [REPO / top, *(REPO / top).rglob("*")]:
        if not path.is_dir() or "__pycache__" in path.parts:
            continue
        if any(child.is_file() for child in path.iterdir()):
            found.add(".".join(path.relative_to(REPO).parts))
    return found


def test_the_package_list_matches_the_source_tree() -> None:
    listed = set(_setuptools()["packages"])
    expected = (
        _tree_packages("tuner") | _tree_packages("api") | {MIGRATIONS, f"{MIGRATIONS}.versions"}
    )
    missing, stale = sorted(expected - listed), sorted(listed - expected)
    assert (missing, stale) == ([], []), (
        "[tool.setuptools] packages in pyproject.toml: add the missing, drop the stale"
    )


def test_every_listed_package_has_a_source_directory() -> None:
    for package in _setuptools()["packages"]:
        assert _source_dir(package).is_dir(), package


def test_the_migrations_ship_from_the_top_level_alembic_directory() -> None:
    assert _source_dir(MIGRATIONS) == REPO / "alembic"
    assert _source_dir(f"{MIGRATIONS}.versions") == REPO / "alembic" / "versions"
    assert (REPO / "alembic" / "env.py").is_file()
    assert list((REPO / "alembic" / "versions").glob("*.py")), "no migration to ship"
    # Not a .py module, so package data: without it `alembic revision` fails in an install.
    assert "script.py.mako" in _setuptools()["package-data"][MIGRATIONS]


def test_every_package_data_pattern_matches_a_file() -> None:
    for package, patterns in _setuptools()["package-data"].items():
        for pattern in patterns:
            matches = [p for p in _source_dir(package).glob(pattern) if p.is_file()]
            assert matches, f"{package}: {pattern} matches nothing"


def test_a_source_checkout_reads_alembic_at_the_top() -> None:
    installed, checkout = migrate.script_dirs()
    assert installed == Path(migrate.__file__).parent / "migrations"
    assert checkout == REPO / "alembic"
    if not installed.is_dir():  # run in place, or editable: tuner/db/migrations does not exist
        assert migrate.alembic_dir() == checkout


def test_the_installed_copy_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The installed copy holds only the first migration, so its head tells the copies apart.
    installed = tmp_path / "site-packages" / "tuner" / "db" / "migrations"
    shutil.copytree(REPO / "alembic", installed, ignore=shutil.ignore_patterns("__pycache__"))
    for script in (installed / "versions").glob("*.py"):
        if not script.name.startswith("0001_"):
            script.unlink()
    checkout = REPO / "alembic"
    monkeypatch.setattr(migrate, "script_dirs", lambda: (installed, checkout))
    assert migrate.alembic_dir() == installed
    assert (
        migrate.head_revision()
        == "0001"
        != migrate.ScriptDirectory(str(checkout)).get_current_head()
    )


def test_alembic_the_library_beside_an_install_is_not_taken_for_the_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An installed tuner's parents[2] is site-packages, whose alembic/ is the Alembic library.
    library = tmp_path / "site-packages" / "alembic"
    (library / "templates").mkdir(parents=True)
    (library / "__init__.py").write_text("")
    missing = tmp_path / "site-packages" / "tuner" / "db" / "migrations"
    monkeypatch.setattr(migrate, "script_dirs", lambda: (missing, library))
    with pytest.raises(StorageError) as err:
        migrate.head_revision()
    assert "migration scripts are missing" in str(err.value)
    assert str(missing) in str(err.value) and str(library) in str(err.value)
    assert "reinstall tuner" in err.value.hint
