"""The fidelity table: tuner's load generator against ``vllm bench serve`` on one server.

Rows come from ``bench/bench_load_fidelity.py`` (``fidelity.jsonl``: one line per round,
concurrency and client, with vLLM's field names). Pure functions, so that a test can re-derive
a committed report's table from its committed data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

COMPARED = (
    ("output_throughput", "out tok/s"),
    ("request_throughput", "req/s"),
    ("median_ttft_ms", "P50 TTFT"),
    ("p99_ttft_ms", "P99 TTFT"),
    ("median_itl_ms", "P50 ITL"),
    ("p99_itl_ms", "P99 ITL"),
    ("median_e2el_ms", "P50 E2E"),
    ("p99_e2el_ms", "P99 E2E"),
)
TOLERANCE = 0.05  # the bar: within 5 % of vLLM's benchmark


def pairs(rows: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(tuner, vllm) row pairs of the same round and concurrency, in round then load order."""
    by_key: dict[tuple[int, int], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        by_key.setdefault((int(r["round"]), int(r["concurrency"])), {})[str(r["client"])] = r
    return [
        (v["tuner"], v["vllm"]) for _, v in sorted(by_key.items()) if "tuner" in v and "vllm" in v
    ]


def ratio(a: Any, b: Any) -> float:
    if a is None or b is None or not b:
        return math.nan
    return float(a) / float(b)


def _fmt(value: Any, field: str) -> str:
    if value is None:
        return "-"
    if field.endswith("throughput"):
        return f"{float(value):,.0f}" if field == "output_throughput" else f"{float(value):.2f}"
    return f"{float(value):,.1f}"


def values_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The measured values side by side: tuner / vLLM per field."""
    head = "| round | streams | " + " | ".join(label for _, label in COMPARED) + " |"
    sep = "|---|---|" + "---|" * len(COMPARED)
    lines = [head, sep]
    for t, v in pairs(rows):
        cells = [f"{_fmt(t.get(f), f)} / {_fmt(v.get(f), f)}" for f, _ in COMPARED]
        lines.append(f"| {t['round']} | {t['concurrency']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """tuner / vLLM per field; a ratio outside 1 +- 5 % is marked with "!"."""
    head = "| round | streams | " + " | ".join(label for _, label in COMPARED) + " | client-bound |"
    sep = "|---|---|" + "---|" * len(COMPARED) + "---|"
    lines = [head, sep]
    for t, v in pairs(rows):
        cells = []
        for f, _ in COMPARED:
            r = ratio(t.get(f), v.get(f))
            mark = "" if math.isnan(r) or abs(r - 1.0) <= TOLERANCE else " !"
            cells.append("-" if math.isnan(r) else f"{r:.3f}{mark}")
        bound = "yes" if t.get("client_bound") else "no"
        lines.append(
            f"| {t['round']} | {t['concurrency']} | " + " | ".join(cells) + f" | {bound} |"
        )
    return "\n".join(lines)


def worst_deviation(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> float:
    """The largest |tuner / vLLM - 1| over the pairs and ``fields``."""
    devs = [abs(ratio(t.get(f), v.get(f)) - 1.0) for t, v in pairs(rows) for f in fields]
    return max((d for d in devs if not math.isnan(d)), default=math.nan)
