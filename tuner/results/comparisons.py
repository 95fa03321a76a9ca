"""Comparisons as a dataset: the confirmation phase of a study, ``tuner compare`` runs and
``tuner verify-claims`` verdicts, one JSON object per comparison, and Markdown tables derived
from exactly those objects.

Each line holds: id, kind (``confirmation`` for a study's confirmation phase, ``claim`` for a
verified claim, ``compare`` for ``tuner compare``), study (or null), model, gpu, workload,
a_config / b_config (knobs set; {} is vLLM's defaults), repeats, verdicts {metric: verdict,
overall}, provenance {gpu_name, gpu_uuid, driver_version, cuda_version, vllm_version, model,
workload, emulated, hostname, tuner_version}, and from the stored results (see
:mod:`tuner.abtest.compare` for their shape; null where a comparison was stored before tuner
recorded them): a_label / b_label, confidence, launches {a, b} (complete fresh launches),
failures, servers, windows, metrics (a side's values: one per launch, each the median of that
launch's measurement windows, or their geometric mean where a decision is recorded, and when
each ended; ratio B/A with a Welch interval, or the decision's, pooled with a noise profile
and with a straight-line trend over the launches' times taken out, as its method says, on the
log scale at ``confidence``), claim (verify-claims only:
:func:`tuner.abtest.claims.verdicts.claim_record`), decision (the decision design of
:mod:`tuner.abtest.decide`: kind, first, max_launches, confidence, per_look_confidence,
per_look_confidence_own, min_effect, boundary, trend, stopped, launches, half_width, method, df),
gpu_minutes (the wall time of every launch the verdict took) and gpu_launches (those launches,
``{"started_at", "wall_s"}`` each).

Comparisons of one run can read the same launches: the claims of ``tuner verify-claims`` on one
workload share the launches of a configuration they have in common, a study's candidates
share its defaults. Each line's gpu_minutes is still what its verdict took; gpu_minutes_new
counts only launches no earlier line of the export read (summed over the lines: the GPU time
spent, each launch once), and launches_shared_with names the earlier comparisons whose
launches it reused ([] for none). Both null where the launches were not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner.abtest import LAUNCH_VALUES, Claim, ratio_of
from tuner.db import Repository
from tuner.domain import to_jsonable
from tuner.results.export import md_cell, measured_with
from tuner.scoring import is_inconclusive, ratio_text, stored_window_note


def comparison_records(repo: Repository, study: str | None = None) -> list[dict[str, Any]]:
    """Every comparison stored in ``repo`` (only ``study``'s when given), in creation order."""
    names = {s.id: s.name for s in repo.list_studies()}
    out = []
    for c in repo.list_comparisons(study):
        results = c.results or {}
        kind = results.get("kind") or ("confirmation" if c.study_id is not None else "compare")
        out.append(
            {
                "id": c.id,
                "kind": kind,
                "study": names.get(c.study_id) if c.study_id is not None else None,
                "model": c.model,
                "gpu": c.gpu,
                "workload": c.workload,
                "a_config": c.a_config.to_dict(),
                "b_config": c.b_config.to_dict(),
                "a_label": results.get("a_label"),
                "b_label": results.get("b_label"),
                "repeats": c.repeats,
                "confidence": results.get("confidence"),
                "launches": results.get("launches"),
                "launch_value": results.get("launch_value"),
                "failures": results.get("failures"),
                "servers": results.get("servers"),
                "windows": results.get("windows"),
                "metrics": results.get("metrics", []),
                "verdicts": c.verdicts,
                "claim": results.get("claim"),
                "decision": results.get("decision"),
                "gpu_minutes": results.get("gpu_minutes"),
                "gpu_launches": results.get("gpu_launches"),
                "provenance": to_jsonable(c.provenance),
            }
        )
    _count_launches_once(out)
    return out


def _count_launches_once(records: Sequence[dict[str, Any]]) -> None:
    """Each record's gpu_minutes_new and launches_shared_with (see the module docstring): a
    launch is counted in the first record that read it, named by its start and wall time."""
    first: dict[tuple[float, float], int] = {}
    for r in records:
        launches = r["gpu_launches"]
        if launches is None:
            r["gpu_minutes_new"] = r["launches_shared_with"] = None
            continue
        names = [(x["started_at"], x["wall_s"]) for x in launches]
        new = [name for name in names if name not in first]
        r["gpu_minutes_new"] = sum(w for _, w in new) / 60.0
        r["launches_shared_with"] = sorted({first[name] for name in names if name in first})
        first.update(dict.fromkeys(new, r["id"]))


def _num(x: float | None, digits: int) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _values(side: Mapping[str, Any], digits: int) -> str:
    return ", ".join(_num(v, digits) for v in side.get("values", []))


def _change(m: Mapping[str, Any]) -> str:
    if m.get("ratio") is None or m.get("low") is None or m.get("high") is None:
        return ""
    if is_inconclusive(m.get("verdict")):
        return "not meaningful"
    pct = [(x - 1.0) * 100.0 for x in (m["ratio"], m["low"], m["high"])]
    return f"{pct[0]:+.1f} % [{pct[1]:+.1f}, {pct[2]:+.1f}]"


def comparison_table(record: Mapping[str, Any]) -> str:
    """One comparison as a Markdown table: per metric, each side's launch values and median,
    the change B/A - 1 with its interval (B/A of the sides' geometric means, not of the
    medians beside it: its header says so), and the verdict."""
    a, b = md_cell(record["a_label"] or "A"), md_cell(record["b_label"] or "B")
    level = _level(record)
    head = (
        f"| metric | {a}: median (launches) | {b}: median (launches) | "
        f"change [{level} CI] of {ratio_of(record)} | verdict |\n|---|---|---|---|---|\n"
    )
    lines = []
    for m in record["metrics"]:
        d = {"memory_gib": 2, "itl_p99_ms": 1, "request_throughput": 1}.get(m["metric"], 0)
        lines.append(
            f"| {md_cell(m['label'])} | {_num(m['a'].get('median'), d)} "
            f"({_values(m['a'], d)}) | {_num(m['b'].get('median'), d)} ({_values(m['b'], d)}) | "
            f"{_change(m)} | {md_cell(m['verdict'])} |"
        )
    return head + "\n".join(lines) + "\n"


def _level(record: Mapping[str, Any] | None) -> str:
    """The confidence level of a stored comparison's intervals, e.g. "90 %"; "?" where the
    record is unknown."""
    if record is None:
        return "?"
    return f"{(record.get('confidence') or 0.95) * 100:g} %"


def _interval_head(levels: Sequence[str]) -> tuple[str, bool]:
    """An interval column's level for its head (" [95 % CI]") when every row with an interval
    has that one, else " [CI]" and True: each such cell then names its own; nothing where no
    row has an interval."""
    if not levels:
        return "", False
    if len(set(levels)) == 1 and levels[0] != "?":
        return f" [{levels[0]} CI]", False
    return " [CI]", True


def claims_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Verified claims as a Markdown table: claimed and measured B/A, verdict and why. The
    interval's level is each comparison's own (``verify-claims --confidence``)."""
    records = [r for r in records if r.get("claim")]
    # An interval of B/A, or of B - A for a difference claim (its text names the unit).
    ranged = [r for r in records if (r["claim"].get("measured") or {}).get("low") is not None]
    interval, per_row = _interval_head([_level(r) for r in ranged])
    head = (
        f"| claim | metric | A | B | workload | claimed B/A | measured B/A{interval} | "
        "verdict | why |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in records:
        claim = r["claim"]
        m = claim.get("measured") or {}
        measured = ratio_text(m.get("ratio"), m.get("low"), m.get("high")) or m.get("text") or "-"
        if per_row and m.get("low") is not None:
            measured += f" ({_level(r)})"
        cells = [claim["id"], claim["metric"], r["a_label"], r["b_label"], r["workload"]]
        cells += [claim["claimed_text"], measured, claim["verdict"], claim["reason"]]
        lines.append("| " + " | ".join(md_cell(x) for x in cells) + " |")
    return head + "\n".join(lines) + "\n"


def verdicts_table(
    verdicts: Sequence[Mapping[str, Any]],
    claims: Sequence[Claim],
    records: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Claim records (:func:`tuner.abtest.claims.verdicts.claim_record`, e.g. ``tuner verify-claims
    --json``) as the claims table, each beside its article's figure from ``claims``; the B and
    A of a measured claim from the comparison in ``records`` it names."""
    by_id = {c.id: c for c in claims}
    compared = {r["id"]: r for r in records}

    def level(v: Mapping[str, Any]) -> str:  # of a verdict measured by a stored comparison
        row = compared.get(v["comparison_id"])
        if row is None and v.get("confidence") is not None:
            row = {"confidence": v["confidence"]}  # `verify-claims --json` says it
        return _level(row)

    compared_ones = [v for v in verdicts if v.get("comparison_id") is not None]
    interval, per_row = _interval_head([level(v) for v in compared_ones])
    head = (
        "| claim | the article's figure | tested here as | B against A (workload) | measured "
        f"here{interval} | verdict | why |\n|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for v in verdicts:
        claim = by_id.get(v["id"])
        article = f"{claim.article.id}: " if claim and claim.article else ""
        figure = f"{article}{claim.figure if claim else v.get('figure', '')}"
        tested = _tested(claim, v)
        compared_row = compared.get(v.get("comparison_id"))
        if compared_row:
            arms = f"{compared_row['b_label']} vs {compared_row['a_label']} ({v['workload']})"
        elif claim and claim.kind == "effect":
            arms = f"{_label(claim.b)} vs {_label(claim.a)} ({v['workload']})"
        else:
            arms = "-"
        measured = (v.get("measured") or {}).get("text") or "-"
        if per_row and v.get("comparison_id") is not None and measured != "-":
            known = level(v)
            measured += f" ({known})" if known != "?" else ""
        why = v["reason"].rstrip(".") + (f"; {v['setting']}" if v.get("setting") else "")
        lines.append(
            "| " + " | ".join(md_cell(x) for x in (v["id"], figure, tested, arms, measured))
            + f" | **{md_cell(v['verdict'])}** | {md_cell(why)} |"
        )  # fmt: skip
    return head + "\n".join(lines) + "\n"


def _label(knobs: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in knobs.items()) or "defaults"


def _tested(claim: Claim | None, v: Mapping[str, Any]) -> str:
    if claim is None:
        return str(v.get("claimed_text") or "")
    if claim.claimed is not None:
        return f"{claim.metric} {claim.claimed.shown()}"
    if claim.kind == "flag":
        return f"{claim.flag} {claim.claimed_text}"
    if claim.kind == "starts":
        return f"{claim.flag} {claim.claimed_text} to start"
    if claim.kind == "default-backend":
        return f"default attention backend {claim.claimed_text}"
    return claim.claimed_text or "-"


def comparisons_markdown(records: Sequence[Mapping[str, Any]]) -> str:
    """All comparisons as Markdown: the claims in one table, every other comparison as its own
    headed table (a study's confirmation: its candidate against vLLM's defaults)."""
    parts = []
    claims = [r for r in records if r.get("claim")]
    if claims:
        parts.append(_provenance(claims) + claims_table(claims))
    for r in records:
        if r.get("claim"):
            continue
        where = f"study {r['study']}, " if r.get("study") else ""
        title = (
            f"### Comparison {r['id']} ({r['kind']}, {where}{r['model']} / {r['gpu']} / "
            f"{r['workload']}): {md_cell(r['b_label'])} against {md_cell(r['a_label'])}, overall "
            f"{(r.get('verdicts') or {}).get('overall', '-')}{_cost(r)}\n\n"
        )
        note = stored_window_note(r)
        caution = f"Caution: {note}.\n\n" if note else ""
        value = LAUNCH_VALUES.get(r.get("launch_value") or "")
        values = f"A launch's value: {value}; a side's median is over its launches.\n\n"
        parts.append(
            title + _provenance([r]) + caution + (values if value else "") + comparison_table(r)
        )
    total = _total(records)
    return "\n".join(parts) + (f"\n{total}\n" if total else "")


def _provenance(records: Sequence[Mapping[str, Any]]) -> str:
    """A line saying what ``records`` were measured with (model, GPU, vLLM, workload) and how
    many launches a side, above their table; "" where they recorded none of it."""
    parts = measured_with([r["provenance"] for r in records if r.get("provenance")])
    counts = [n for r in records for n in (r.get("launches") or {}).values()]
    if counts:
        few, most = min(counts), max(counts)
        parts.append(f"{few if few == most else f'{few} to {most}'} launches a side")
    return f"Measured with {', '.join(parts)}.\n\n" if parts else ""


def _cost(r: Mapping[str, Any]) -> str:
    """A heading's GPU-minutes: a comparison that reused launches of earlier ones counts only
    its new launches and names where the others are counted."""
    minutes, shared = r.get("gpu_minutes"), r.get("launches_shared_with")
    if not isinstance(minutes, int | float):
        return ""
    if not shared:
        return f", {minutes:.1f} GPU-minutes"
    ids = ", ".join(str(i) for i in shared)
    return (
        f", {r['gpu_minutes_new']:.1f} GPU-minutes of new launches (its other launches are "
        f"counted with comparison {ids})"
    )


def _total(records: Sequence[Mapping[str, Any]]) -> str:
    """The GPU time the comparisons took, a launch read by several counted once; "" without
    any GPU-minutes stored."""
    counted = [(r.get("gpu_minutes_new"), r.get("gpu_minutes")) for r in records]
    new = [n for n, _ in counted if n is not None]
    whole = [m for n, m in counted if n is None and isinstance(m, int | float)]
    if not new and not whole:
        return ""
    text = f"GPU time: {sum(new) + sum(whole):.1f} GPU-minutes over {len(records)} comparisons"
    if shared := sum(bool(r.get("launches_shared_with")) for r in records):
        text += f"; {shared} of them reused launches of another, counted once"
    if whole:
        text += f"; {len(whole)} stored before tuner recorded their launches counted whole"
    return text + "."
