"""Package faces (``tuner.face``): what a package's ``__init__`` offers resolves to the object its
module defines, ``__all__`` and the ``if TYPE_CHECKING:`` block name the same things, and a
face costs nothing until a name is used."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import _type_checking_imports

ROOT = Path(__file__).resolve().parents[2]
FACES = [f"tuner.{p}" for p in (
    "abtest", "catalog", "db", "load", "results", "runner", "scoring", "spec", "study",
    "telemetry", "vllm",
)]  # fmt: skip


@pytest.mark.parametrize("name", FACES)
def test_every_name_of_a_face_is_its_modules_own(name: str) -> None:
    package = importlib.import_module(name)
    assert package.__file__ is not None
    where = _type_checking_imports(Path(package.__file__))
    offered = set(package.__all__)
    assert offered == set(where), offered ^ set(where)
    for attr, module in where.items():
        assert getattr(package, attr) is getattr(importlib.import_module(module), attr)
    assert sorted(dir(package)) == sorted(package.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        _ = package.no_such_name


@pytest.mark.parametrize("name", FACES)
def test_no_name_of_a_face_is_also_one_of_its_modules(name: str) -> None:
    """A module imported directly (``import tuner.load.fingerprint``) becomes the package's
    attribute of that name, and a face's name is then never looked up again: ``from tuner.load
    import fingerprint`` gave the module, not the function, once any test had imported it."""
    import pkgutil

    package = importlib.import_module(name)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert not modules & set(package.__all__)


def test_tuners_own_names_resolve_by_module_path() -> None:
    """``tuner``'s face names its modules as strings: an import there, even under
    TYPE_CHECKING, would tie every package that imports ``tuner.face`` to every layer."""
    import tuner

    assert tuner._type_checking_imports(Path(tuner.__file__ or "")) == {}
    for name in set(tuner.__all__) - {"__version__", "face"}:
        assert getattr(tuner, name) is not None
    assert tuner.Repository.__module__ == "tuner.db.repository"


def test_a_module_of_a_package_does_not_import_its_face() -> None:
    """One module of the storage package, imported alone, loads neither Optuna nor Alembic (the
    face's other modules would), and a name taken from the face loads only its module."""
    code = (
        "import sys\n"
        "import tuner.db.names\n"
        "print(sorted(m for m in ('optuna', 'alembic', 'tuner.db.merge') if m in sys.modules))\n"
        "from tuner.catalog import get_gpu\n"
        "print('tuner.catalog.materialize' in sys.modules, get_gpu('h200').name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "False h200"
