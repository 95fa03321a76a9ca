"""Tables in a Markdown report, re-derived from committed datasets.

A report marks each derived table with a pair of comments::

    <!-- table: trials studies/results/x/trials.jsonl -->
    ...the table...
    <!-- /table -->

Kinds: ``trials`` (:func:`tuner.results.export.markdown_table` of a trials dataset; an optional
third word keeps only that phase, ``search`` or ``confirm``), ``comparison`` (the
:func:`~tuner.results.comparisons.comparison_table` of each comparison in the file; an optional
third word keeps only those ids, in that order, e.g. ``3,1``), ``claims``
(:func:`~tuner.results.comparisons.claims_table` of the verdicts stored; with a claims file as
third word, every claim of that file judged again from the comparisons by
:func:`~tuner.abtest.claims.rejudge.rejudge`, as the ``verdicts`` table) and ``verdicts`` (a
JSON list of claim records as ``tuner verify-claims --json`` prints them, and the claims file:
:func:`~tuner.results.comparisons.verdicts_table`) and ``starts`` (one or more JSON files of
``bench/bench_warm_start.py``: :func:`~bench.tables.starts.starts_table`), and
``noise-launches``, ``noise-spread`` (third word ``all``: the cold launch too) and
``noise-self`` (a launch log of ``bench/noise_placement.py``: :mod:`bench.tables.noise`).
Paths are relative to the repository root.
:func:`splice` rewrites the blocks; :func:`stale_blocks` names those whose text differs from
what the data says (a test keeps reports honest with it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.tables import noise
from bench.tables.starts import starts_table
from tuner.abtest import load_claims, rejudge
from tuner.errors import UsageError
from tuner.results.comparisons import (
    claims_table,
    comparison_table,
    verdicts_table,
)
from tuner.results.export import from_jsonl, markdown_table

_BLOCK = re.compile(r"(<!-- table: ([^>]*?) -->\n)(.*?)(<!-- /table -->)", re.DOTALL)


def _render(spec: str, root: Path) -> str:
    kind, *rest = spec.split()
    if not rest:
        raise UsageError(f"table marker {spec!r} names no dataset", hint="e.g. trials PATH")
    if kind == "starts":
        return starts_table([json.loads((root / path).read_text()) for path in rest])
    if kind.startswith("noise-"):  # a launch log of bench/noise_placement.py
        lines = [json.loads(x) for x in (root / rest[0]).read_text().splitlines() if x.strip()]
        if kind == "noise-launches":
            return noise.launches_table(lines)
        if kind == "noise-spread":
            return noise.spread_table(lines, warm_only=rest[1:] != ["all"])
        if kind == "noise-self":
            return noise.self_table(lines)
    text = (root / rest[0]).read_text()
    if kind == "verdicts":
        verdicts = json.loads(text)
        records: list[dict[str, Any]] = []
    else:
        records = from_jsonl(text)
    if kind == "trials":
        if len(rest) > 1:
            records = [r for r in records if r["phase"] == rest[1]]
        return markdown_table(records)
    if kind == "comparison":
        if len(rest) > 1:
            by_id = {r["id"]: r for r in records}
            wanted = [int(x) for x in rest[1].split(",")]
            missing = [i for i in wanted if i not in by_id]
            if missing:
                raise UsageError(
                    f"table marker {spec!r}: no comparison {missing} in {rest[0]}",
                    hint=f"the file holds ids {sorted(by_id)}",
                )
            records = [by_id[i] for i in wanted]
        return "\n".join(comparison_table(r) for r in records)
    if kind == "claims":
        if len(rest) > 1:  # the claims file: every claim judged again from the comparisons
            claims = load_claims(root / rest[1])
            return verdicts_table(rejudge(records, claims), claims, records)
        return claims_table(records)
    if kind == "verdicts":  # claim records as `tuner verify-claims --json` prints them
        if len(rest) < 2:
            raise UsageError(
                f"table marker {spec!r} names no claims file", hint="verdicts JSON CLAIMS"
            )
        return verdicts_table(verdicts, load_claims(root / rest[1]))
    raise UsageError(
        f"unknown table kind {kind!r}",
        hint="trials, comparison, claims, verdicts, starts or noise-launches/-spread/-self",
    )


def _walk(text: str, root: Path, on_block: Callable[[str, str, str], None]) -> str:
    def replace(m: re.Match[str]) -> str:
        fresh = _render(m.group(2), root)
        on_block(m.group(2), m.group(3), fresh)
        return m.group(1) + fresh + m.group(4)

    return _BLOCK.sub(replace, text)


def splice(text: str, root: Path) -> str:
    """``text`` with every marked table re-derived from its dataset."""
    return _walk(text, root, lambda _spec, _old, _new: None)


def stale_blocks(text: str, root: Path) -> list[str]:
    """The markers whose table differs from its dataset (empty: the report is up to date)."""
    stale: list[str] = []
    _walk(text, root, lambda spec, old, new: stale.append(spec) if old != new else None)
    return stale


def count_blocks(text: str) -> int:
    return len(_BLOCK.findall(text))


# python -m bench.tables.splice REPORT.md [...]: rewrite in place
if __name__ == "__main__":
    import sys

    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(splice(path.read_text(), Path.cwd()))
        print(f"{name}: {count_blocks(path.read_text())} tables re-derived")
