"""A study as a dataset: one JSON object per trial (JSON Lines), and a Markdown summary
derived from exactly those objects, so a report's numbers can always be re-derived from the
committed data.

Each line holds: study, number, phase (search / confirm), is_baseline, status, failure_class,
failure_detail, config (the knobs set; {} is vLLM's defaults), score (relative to the
baseline; null when it or the baseline was not measured), objective_values [output tok/s,
memory GiB, P99 E2E ms] (null for a failed trial: the penalty Optuna was told is no
measurement; a trial stopped early keeps its partial values),
metrics {name: {median, low, high, values}} (the median over the measurement windows, low and
high the smallest and largest window value: a range, not a confidence interval; values one per
window), memory {gpu_peak_bytes, gpu_baseline_bytes, host_peak_rss_bytes}, effective_backend,
kv_cache_tokens, startup_s, provenance {gpu_name, gpu_uuid, driver_version, vllm_version,
model, workload, emulated, hostname, tuner_version}, and window_energy: per window, the measured
GPU's energy {joules, seconds, watts, joules_per_output_token, method, gpu_uuid, samples, note}
(:class:`tuner.domain.WindowEnergy`) or null where it was not measured, and energy_note, why a
complete trial has none ("energy: not measured on CPU"); the trial's medians are the metrics
joules_per_output_token and gpu_power_w; capacity_is_lower_bound, whether its capacity_* metrics
are only a lower bound (read at an open-loop load the server kept up with,
:func:`tuner.results.costs.capacity_at_least`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tuner.db import Repository
from tuner.domain import Objective, TrialStatus, to_jsonable
from tuner.domain.jsonable import dumps
from tuner.results import costs, energy
from tuner.scoring import CAPACITY


def study_records(repo: Repository, study: str) -> list[dict[str, Any]]:
    """Every trial of ``study``, each scored by :func:`tuner.study.standings.trial_score`
    (None where vLLM's defaults were never measured: without them a score is no score)."""
    from tuner.study import score_reference, study_objective, trial_score

    row_study = repo.get_study(study)
    rows = repo.list_trials(study, limit=None)
    reference = score_reference(rows) if row_study else None
    objective = study_objective(row_study) if row_study else Objective.BALANCED
    out = []
    for row in rows:
        server = row.server
        out.append(
            {
                "study": study,
                "number": row.number,
                "phase": str(row.phase),
                "is_baseline": row.is_baseline,
                "status": row.status.value,
                "failure_class": row.failure.value if row.failure else None,
                "failure_detail": row.failure_detail or None,
                "config": row.config.to_dict(),
                "score": trial_score(row, reference, objective),
                "objective_values": row.measured_values,
                "metrics": to_jsonable(row.metrics),
                "memory": to_jsonable(row.memory),
                "effective_backend": row.effective_backend,
                "kv_cache_tokens": server.kv_cache_tokens if server else None,
                "startup_s": server.startup_s if server else None,
                "provenance": to_jsonable(row.provenance),
                "window_energy": [to_jsonable(w.energy) for w in row.windows],
                "energy_note": energy.absent(row.metrics, on_gpu=row.gpu_uuid is not None)
                if row.status is TrialStatus.COMPLETE
                else None,
                "capacity_is_lower_bound": costs.capacity_at_least(
                    row.metrics, row.windows, row_study.spec if row_study else None
                ),
            }
        )
    return out


def to_jsonl(records: Iterable[Mapping[str, Any]]) -> str:
    """One strict JSON object per line; a NaN or infinity is null, and ``null_reasons`` says
    which value it was (see :func:`tuner.domain.jsonable.finite_record`)."""
    return "".join(dumps(r, sort_keys=True) + "\n" for r in records)


def from_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def md_cell(text: object) -> str:
    """``text`` as one cell of a Markdown table: a ``|`` escaped, a line break a space (either
    would end the cell or the row). Every Markdown table of an export writes its text so."""
    return " ".join(str(text or "").replace("|", "\\|").splitlines())


def _range(metric: Mapping[str, Any] | None, digits: int = 0) -> str:
    """'12 [11, 13]'; empty where the metric or any end of it is missing or not finite (a
    percentile no request reached: null in the JSONL, a dash on the page), never 'nan'."""
    if not metric:
        return ""
    ends = [metric.get(k) for k in ("median", "low", "high")]
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in ends):
        return ""
    return (
        f"{metric['median']:.{digits}f} [{metric['low']:.{digits}f}, {metric['high']:.{digits}f}]"
    )


# The provenance the Markdown export's header names: label -> key of a record's provenance.
_PROVENANCE = {"model": "model", "GPU": "gpu_name", "vLLM": "vllm_version", "workload": "workload"}


def trials_markdown(records: Sequence[Mapping[str, Any]]) -> str:
    """``tuner export --format md``: :func:`markdown_table` under a line saying what the trials
    were measured with, from the records' provenance (as the JSON Lines carry it)."""
    head = provenance_line(records)
    return (f"{head}\n\n" if head else "") + markdown_table(records)


def provenance_line(records: Sequence[Mapping[str, Any]]) -> str:
    """What the trials were measured with, in one line ("Study s: model m, GPU NVIDIA H100,
    vLLM 0.32.0, workload chat, 3 measurement windows a trial"), each value as the records hold
    it (several joined by " / "); "" when no trial recorded provenance."""
    parts = measured_with([r["provenance"] for r in records if r.get("provenance")])
    if not parts:
        return ""
    windows = _joined(
        len(m["output_throughput"].get("values") or ())
        for r in records
        if r["status"] == "complete" and "output_throughput" in (m := r["metrics"] or {})
    )
    if windows:  # at the workload's own load point: per point where a trial measured a curve
        per = "load point" if _curve(records) else "trial"
        parts.append(f"{windows} measurement windows a {per}")
    return f"Study {records[0]['study']}: " + ", ".join(parts)


def measured_with(provenance: Sequence[Mapping[str, Any]]) -> list[str]:
    """The model, GPU, vLLM and workload of ``provenance`` (stored records'), each as the
    records hold it, several joined by " / "; "emulated" last where any was."""
    parts = [
        f"{label} {text}"
        for label, key in _PROVENANCE.items()
        if (text := _joined(p.get(key) for p in provenance))
    ]
    return parts + (["emulated"] if any(p.get("emulated") for p in provenance) else [])


def _joined(found: Iterable[object]) -> str:
    return " / ".join(dict.fromkeys(str(v) for v in found if v not in (None, "")))


def _curve(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a trial of ``records`` measured a load curve (it has a capacity)."""
    return any(CAPACITY in (r["metrics"] or {}) for r in records)


def markdown_table(records: Sequence[Mapping[str, Any]]) -> str:
    """The trials as a Markdown table (search phase first), numbers straight from the records:
    each metric is its median [range over the measurement windows]. Trials measured on a load
    curve add their capacity (what a capacity study ranks by) and the load level it was at,
    "at least" where it is only a lower bound (the note under the table says why); out tok/s is
    then the workload's own load point's."""
    curve = _curve(records)
    head = (
        "| # | phase | status | backend | config | out tok/s [range] | "
        + ("capacity out tok/s [range] @ load | " if curve else "")
        + "P99 TTFT ms | P99 ITL ms | P99 E2E ms | memory GiB | J/out tok | score |\n"
        + "|---" * (13 if curve else 12)
        + "|\n"
    )
    lines = []
    for r in sorted(records, key=lambda r: (r["phase"] != "search", r["number"])):
        m = r["metrics"] or {}
        values = r["objective_values"] or []
        config = ", ".join(f"{k}={v}" for k, v in r["config"].items()) or "defaults"
        status = r["status"] + (f" ({r['failure_class']})" if r["failure_class"] else "")
        measured = len(values) == 3 and r["status"] == "complete"
        memory = f"{values[1]:.2f}" if measured else ""
        score = f"{r['score']:.3f}" if r["score"] is not None else ""
        baseline = " (baseline)" if r["is_baseline"] else ""
        capacity = _range(m.get("capacity_output_throughput"))
        load = (m.get("capacity_load") or {}).get("median")
        if capacity and m["capacity_output_throughput"]["median"] <= 0:
            capacity = "none met the SLO"  # no load point did: curve.capacity stores zeros
        elif capacity and load:
            capacity += f" @ {load:g}"
        if capacity and r.get("capacity_is_lower_bound"):  # older exports do not say
            capacity = f"at least {capacity}"
        lines.append(
            f"| {r['number']}{baseline} | {md_cell(r['phase'])} | {md_cell(status)} | "
            f"{md_cell(r['effective_backend'])} | {md_cell(config)} | "
            f"{_range(m.get('output_throughput'))} | "
            + (f"{capacity} | " if curve else "")
            + f"{_range(m.get('ttft_p99_ms'))} | "
            f"{_range(m.get('itl_p99_ms'), 1)} | {_range(m.get('e2e_p99_ms'))} | {memory} | "
            f"{_range(m.get(energy.PER_TOKEN), 3)} | {score} |"
        )
    floors = sorted(r["number"] for r in records if r.get("capacity_is_lower_bound"))
    note = costs.capacity_bound_note(floors)
    return head + "\n".join(lines) + "\n" + (f"\nAt least: {note}.\n" if note else "")
