"""``tuner export``: a study's trials or the stored comparisons as a dataset."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import StorageOpt, open_repo, open_study, out
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
    output: Annotated[Path | None, typer.Option("--out", help="File (default: stdout).")] = None,
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
    from tuner.results.comparisons import comparison_records, comparisons_markdown
    from tuner.results.export import markdown_table, study_records, to_jsonl

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint="use --format jsonl, md or vllm-bench")
    if fmt == "vllm-bench":
        _export_bench(study, output, comparisons, storage)
        return
    if study is None and not comparisons:
        raise UsageError("name the study to export", hint="tuner export STUDY, or --comparisons")
    repo = open_repo(storage) if study is None else open_study(storage, study)
    if comparisons:
        records = comparison_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else comparisons_markdown(records)
        what = "comparisons"
    else:
        assert study is not None
        records = study_records(repo, study)
        text = to_jsonl(records) if fmt == "jsonl" else markdown_table(records)
        what = "trials"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        out.print(f"{len(records)} {what} written to {output}")


def _export_bench(
    study: str | None, output: Path | None, comparisons: bool, storage: str | None
) -> None:
    from tuner.domain.jsonable import dumps
    from tuner.results.report.bench_export import bench_files

    if study is None or comparisons or output is None:
        raise UsageError(
            "--format vllm-bench writes one file per window of a study's trials",
            hint="tuner export STUDY --format vllm-bench --out DIR",
        )
    files = bench_files(open_study(storage, study), study)
    output.mkdir(parents=True, exist_ok=True)
    for name, result in files.items():
        (output / name).write_text(dumps(result))
    out.print(f"{len(files)} vllm bench serve results written to {output}/")
    if not files:
        out.print("(no trial of this study kept its per-request records)")
