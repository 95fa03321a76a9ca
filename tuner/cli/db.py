"""``tuner db upgrade``, ``current`` and ``merge``: tuner's own tables, and what
:func:`tuner.db.merge.merge_databases` did, as lines or JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.common import StorageOpt, out, say, storage_url

if TYPE_CHECKING:
    from tuner.db import MergeSummary, StudyMerge


def describe(summary: MergeSummary) -> list[str]:
    """One line per study, one for the comparisons of no study, one for the launch summaries,
    and a last one in words."""
    would = "would be " if summary.dry_run else ""
    lines = [f"{summary.source} -> {summary.target}" + (" (dry run)" if summary.dry_run else "")]
    if summary.upgraded_from:
        lines.append(
            f"target {would or 'was '}migrated from tuner schema revision {summary.upgraded_from} "
            "to the current one first"
        )
    lines += [_study_line(s, would) for s in summary.studies]
    if summary.comparisons_added or summary.comparisons_kept:
        lines.append(
            "comparisons without a study: "
            + _counts(summary.comparisons_added, summary.comparisons_kept, "comparison", would)
        )
    if summary.launches_added or summary.launches_kept:
        lines.append(
            "noise-profile launches: "
            + _counts(summary.launches_added, summary.launches_kept, "launch record", would)
        )
    if not summary.studies and not (summary.comparisons_added or summary.comparisons_kept):
        lines.append("the source holds no study and no comparison")
    if summary.dry_run:
        lines.append("dry run: nothing written" + ("" if summary.changed else "; nothing to do"))
    elif not summary.changed:
        lines.append("nothing to do: the target holds all of it already")
    return lines


def _study_line(s: StudyMerge, would: str) -> str:
    name = s.name if s.merged_as == s.name else f"{s.name} (as {s.merged_as})"
    parts = []
    if s.new:
        parts.append(f"new study {would}copied")
    elif s.updated:
        parts.append(f"status and notes {would}taken from the source (newer)")
    trials = _counts(s.trials_added, s.trials_kept, "trial", would)
    if s.trials_replaced:
        trials += f", {s.trials_replaced} unfinished {would}replaced by ones further along"
    parts.append(trials)
    if s.comparisons_added or s.comparisons_kept:
        parts.append(_counts(s.comparisons_added, s.comparisons_kept, "comparison", would))
    o = s.optuna
    if o.action == "copied":
        parts.append(f"Optuna study {would}copied ({_n(o.trials_added, 'trial')})")
    elif o.action == "merged" and (o.trials_added or o.trials_finished):
        parts.append(
            f"Optuna study: {_n(o.trials_added, 'trial')} {would}added, "
            f"{o.trials_finished} finished"
        )
    elif o.action == "none":
        parts.append("no Optuna study in the source")
    return f"{name}: " + ", ".join(parts)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counts(added: int, kept: int, noun: str, would: str) -> str:
    text = f"{_n(added, noun)} {would}added"
    return text + (f" ({kept} already there)" if kept else "")


def db_upgrade(storage: StorageOpt = None) -> None:
    """Create or migrate tuner's tables to the current revision."""
    from tuner.db import check_integrity, current_revision, safe_url, upgrade

    url = storage_url(storage)
    check_integrity(url)  # a damaged file is not migrated, nor reported as "at revision"
    upgrade(url)
    out.print(f"{safe_url(url)}: tuner schema at revision {current_revision(url)}")


def db_current(storage: StorageOpt = None) -> None:
    """Print the schema revision of tuner's tables."""
    from tuner.db import (
        check_integrity,
        current_revision,
        head_revision,
        holdings,
        safe_url,
        sqlite_file,
    )
    from tuner.doctor.checks import blank_sqlite_file

    url = storage_url(storage)
    blank = blank_sqlite_file(url)
    if blank is not None:  # not opened: that would create or write the file
        out.print(
            f"{safe_url(url)}: at nothing (database {blank[0]} {blank[1]}), head {head_revision()}"
        )
        return
    check_integrity(url)
    revision = current_revision(url)
    if revision is None:
        where = sqlite_file(url) or safe_url(url)
        revision = f"nothing (database {where} {holdings(url)})"
    out.print(f"{safe_url(url)}: at {revision}, head {head_revision()}")


def db_merge(
    source: Annotated[str, typer.Argument(help="Database to merge in: a SQLite file or a URL.")],
    storage: StorageOpt = None,
    rename_suffix: Annotated[
        str | None,
        typer.Option(help="Merge a study whose name the target uses for another as NAME-SUFFIX."),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Say what would be merged; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object for scripts.")] = False,
) -> None:
    """Copy another database's studies, trials, comparisons and Optuna studies into this one."""
    from tuner.db import merge_databases

    target = storage_url(storage)
    summary = merge_databases(source, target, rename_suffix=rename_suffix, dry_run=dry_run)
    if as_json:
        print(json.dumps(summary.to_json(), indent=2), flush=True)
        return
    for line in describe(summary):
        say(line)
