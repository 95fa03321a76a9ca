"""``tuner export``: a study's trials or the stored comparisons as a dataset.

``--out -`` (or none) is standard output. ``--out`` never loses a file: one that exists is
replaced only with ``--force`` (a vllm-bench folder: only the files it would replace count),
and a file is written whole or not at all (a temporary file beside it, renamed over it). A
link is written through, as ``cp`` does: the file it names is replaced (beside it,
atomically) and the link stays; a link to nothing or to a folder is a usage error. A path
that cannot be written is a usage error that names it, checked before the database is read.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tuner.cli.common import StorageOpt, err, open_repo, open_study, out
from tuner.errors import UsageError

FORMATS = ("jsonl", "md", "vllm-bench")


def export(
    study: Annotated[
        str | None, typer.Argument(help="Study name (optional with --comparisons).")
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="jsonl (dataset), md (table), or vllm-bench (one `vllm bench serve "
            "--save-result` JSON per measurement window, into the --out folder).",
        ),
    ] = "jsonl",
    out_given: Annotated[
        str | None, typer.Option("--out", help="File (default, or -: stdout).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace --out's file(s) when they exist.")
    ] = False,
    comparisons: Annotated[
        bool,
        typer.Option(
            "--comparisons",
            help="Export comparisons (the study's confirmation; without a study every stored "
            "`tuner compare` and verify-claims result) instead of trials.",
        ),
    ] = False,
    storage: StorageOpt = None,
) -> None:
    """Export a study's trials, or comparisons, as a dataset (JSON Lines) or Markdown."""
    from tuner.results import (
        comparison_records,
        comparisons_markdown,
        study_records,
        to_jsonl,
        trials_markdown,
    )

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint="use --format jsonl, md or vllm-bench")
    # "-" is standard output, as to most tools; "./-" (the same Path) is a file named "-".
    output = None if out_given in (None, "-") else Path(out_given)
    if fmt == "vllm-bench":
        _export_bench(study, output, comparisons, storage, force)
        return
    if study is None and not comparisons:
        raise UsageError("name the study to export", hint="tuner export STUDY, or --comparisons")
    if output is not None:
        _check_file(output, force)
    repo = open_repo(storage) if study is None else open_study(storage, study)
    if comparisons:
        records = comparison_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else comparisons_markdown(records)
        what = "comparisons"
    else:
        assert study is not None
        records = study_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else trials_markdown(records)
        what = "trials"
    if not records:  # an empty dataset, said beside it (stderr) so that a pipe stays clean
        where = f" of study {study}" if study else ""
        made_by = "`tuner compare` or a study's confirmation" if comparisons else "`tuner run`"
        err.print(escape(f"no {what}{where} stored: {made_by} stores them"))
    if output is None:
        sys.stdout.write(text)
    else:
        _write(output, text)
        out.print(f"{len(records)} {what} written to {output}")


def _check_file(path: Path, force: bool) -> None:
    """UsageError unless ``path`` can be written as a file: not a folder, in a folder that
    exists, and not there already unless ``force``; a link is checked as the file it names
    (written through, as ``cp`` does), and must name one."""
    target = _through(path)
    link = f" (a link to {target})" if path.is_symlink() else ""
    if path.is_symlink() and not path.exists():
        raise UsageError(
            f"--out {path} is a link to {target}, which does not exist",
            hint="create the file it names, or name another file",
        )
    if path.is_dir():
        raise UsageError(
            f"--out {path}{link} is a folder",
            hint=f"name a file in it, e.g. --out {shlex.quote(f'{path}/trials.jsonl')}",
        )
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(
            f"--out {path}: folder {folder} does not exist",
            hint=f"create it (mkdir -p {shlex.quote(str(folder))})",
        )
    if path.exists() and not force:
        raise UsageError(
            f"--out {path}{link} exists", hint="add --force to replace it, or name another file"
        )
    probe = folder / f".{target.name}.{os.getpid()}.probe"
    try:  # what the write will do: a file beside it (a read-only folder, /proc, a full disk)
        probe.open("x").close()
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write --out {path}{link}: {exc.strerror or exc}") from None


def _through(path: Path) -> Path:
    """The file ``path`` names: itself, or the one a link (or chain of links) points to."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _write(path: Path, text: str) -> None:
    """``text`` into ``path``, whole or not at all: a file beside it, renamed over it; through
    a link, beside and over the file it names (the link stays)."""
    target = _through(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("x", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise UsageError(f"cannot write --out {path}: {exc.strerror or exc}") from None


def _export_bench(
    study: str | None, output: Path | None, comparisons: bool, storage: str | None, force: bool
) -> None:
    from tuner.domain.jsonable import dumps
    from tuner.results import bench_files

    if study is None or comparisons or output is None:
        raise UsageError(
            "--format vllm-bench writes one file per window of a study's trials",
            hint="tuner export STUDY --format vllm-bench --out DIR",
        )
    if output.exists() and not output.is_dir():
        raise UsageError(
            f"--out {output} is a file; --format vllm-bench writes a folder of files",
            hint=f"name a folder, e.g. --out {shlex.quote(str(output.with_suffix('')) + '-bench')}",
        )
    repo = open_study(storage, study)
    files = bench_files(repo, study)
    if not files:  # no folder made for nothing: said on stderr, exit 1
        from tuner.db import StudyStatus
        from tuner.domain import TrialStatus

        row = repo.get_study(study)
        assert row is not None  # open_study found it
        n = row.n_trials
        if row.trial_counts.get(TrialStatus.COMPLETE, 0) > 0:
            why = (
                f"no complete trial of study {study} has per-request records (databases before "
                "revision 0002 kept none)"
            )
        elif not n or row.status in (StudyStatus.QUEUED, StudyStatus.RUNNING):
            why = (
                f"no complete trial of study {study} exists yet: there is nothing measured to write"
            )
        else:  # a study that ended: no trial of it will complete
            trials = (
                f"none of its {n} trials completed" if n > 1 else "its one trial did not complete"
            )
            why = f"study {study} is {row.status} and {trials}: there is nothing measured to write"
        err.print(escape(f"nothing written: {why}"))
        raise typer.Exit(1)
    there = sorted(name for name in files if (output / name).exists())
    if there and not force:
        raise UsageError(
            f"--out {output} holds {len(there)} of these files already: "
            + ", ".join(there[:2])
            + (", ..." if len(there) > 2 else ""),
            hint="add --force to replace them, or name another folder",
        )
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {output}: {exc.strerror or exc}") from None
    for name, result in files.items():
        _write(output / name, dumps(result))
    out.print(f"{len(files)} vllm bench serve results written to {output}/")
