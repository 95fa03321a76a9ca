"""What the commands share: the consoles, the options several of them take, opening an
existing store, parsing an enum's value, and printing JSON.

Output that is not a terminal (a pipe, a file, CI logs) is never wrapped: a line cut at 80
columns in the middle of a flag or a path cannot be pasted or parsed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tuner.doctor.checks import SETS_UP, blank_sqlite_file
from tuner.errors import UsageError

if TYPE_CHECKING:
    from tuner.db import Repository

_UNWRAPPED = 100_000  # columns of a console that is not a terminal: no line is ever cut
INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C or SIGTERM


class _Lazy:
    """A console made on first use, on the ``sys`` stream of that moment (tests swap it)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._made: tuple[Any, Console] | None = None

    def _get(self) -> Console:
        stream = getattr(sys, self._name)
        if self._made is None or self._made[0] is not stream:
            tty = stream.isatty()
            console = Console(
                file=stream, highlight=False, width=None if tty else _UNWRAPPED, soft_wrap=not tty
            )
            self._made = (stream, console)
        return self._made[1]

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._get(), attr)


out: Console = _Lazy("stdout")  # type: ignore[assignment]
err: Console = _Lazy("stderr")  # type: ignore[assignment]


def phase_line(phase: str, last: str) -> bool:
    """Whether a phase report is worth a line of its own in a log (not a terminal's status
    line): all but a repeated warm-up's, which reports every request (its first line is
    enough)."""
    return phase != last or phase != "warming up"


def say(text: str) -> None:
    """``text`` on stdout as it is: no markup, URLs and paths unbroken."""
    out.print(escape(text), soft_wrap=True)


StorageOpt = Annotated[
    str | None,
    typer.Option("--storage", help="Database URL (default: $TUNER_DB_URL or sqlite:///tuner.db)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (strict JSON).")]
ModelOpt = Annotated[str, typer.Option(help="Model alias, local dir or hub id.")]
GpuOpt = Annotated[str, typer.Option(help="GPU profile: a10g, h100, h200, cpu, ...")]
VllmPythonOpt = Annotated[
    str | None, typer.Option(help="Interpreter with vLLM (default: $TUNER_VLLM_PYTHON).")
]


def interrupted(text: str | None = None) -> NoReturn:
    """Say ``text`` (what a Ctrl-C or SIGTERM left, and how to go on), if any, and exit 130."""
    if text:
        with contextlib.suppress(OSError):  # a hung-up terminal takes no more output (EIO)
            err.print(text)
    raise SystemExit(INTERRUPTED) from None  # past typer and main: said once, here


@contextlib.contextmanager
def interruptible(said: Callable[[], str | None] = lambda: None) -> Iterator[None]:
    """Ctrl-C, ``kill PID`` (SIGTERM) or a closed terminal (SIGHUP) inside: :func:`interrupted`
    with ``said()``, read when the interrupt lands."""
    from tuner.runner import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            yield
    except KeyboardInterrupt:
        interrupted(said())


def checked_price(value: float | None) -> float | None:
    """A --gpu-price refused as a usage error (exit 2) where it is no price per GPU-hour."""
    from tuner.catalog import price_problem

    if value is not None and (problem := price_problem(value)):
        raise typer.BadParameter(problem)
    return value


PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-price",
        callback=checked_price,
        help="US dollars per GPU-hour for the $ figures (default: the study's own price, else "
        "the catalog's list-price assumption for its GPU, where it has one).",
    ),
]


def storage_url(url: str | None) -> str:
    from tuner.db import default_url, home_expanded

    return home_expanded(url or default_url())


def open_repo(url: str | None, study: str | None = None) -> Repository:
    """The repository of an existing database, for the commands that only read.

    A SQLite file that does not exist, or is empty (0 bytes), holds no studies: say so (exit 2,
    naming ``study`` if given) rather than create or write the file (opening an empty one
    writes SQLite's header) as a side effect of a typo in the path or a ``touch``.
    """
    storage = storage_url(url)
    blank = blank_sqlite_file(storage)
    if blank is not None:
        path, state = blank
        what = f"no study named {study!r}" if study else "no studies"
        raise UsageError(
            f"{what}: database {path} {state}",
            hint=f"`tuner run` {SETS_UP[state]}; "
            "or point --storage / $TUNER_DB_URL at another database",
        )
    from tuner.db import Repository, ensure_ready, make_engine

    ensure_ready(storage, auto_upgrade=False)
    return Repository(make_engine(storage))


def open_study(url: str | None, study: str) -> Repository:
    repo = open_repo(url, study)
    if repo.get_study(study) is None:
        from tuner.db import with_storage

        raise UsageError(
            f"no study named {study!r}", hint=f"run `{with_storage('tuner studies', url)}`"
        )
    return repo


E = TypeVar("E", bound=Enum)


def choice(kind: type[E], text: str | None, what: str) -> E | None:
    """``text`` as a member of the enum ``kind`` (None stays None); UsageError listing them."""
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        values = [m.value for m in kind]
        raise UsageError(f"unknown {what} {text!r}", hint=f"use one of {values}") from None


def print_json(value: Any) -> None:
    """``value`` as strict JSON on stdout: a NaN or infinity becomes null, and the record
    that held it says why under ``null_reasons``."""
    from tuner.domain import to_jsonable
    from tuner.domain.jsonable import dumps

    sys.stdout.write(dumps(to_jsonable(value), indent=2) + "\n")
    sys.stdout.flush()
