"""The fidelity table: tuner's load generator against ``vllm bench serve`` on one server.

Rows come from ``bench/bench_load_fidelity.py`` (``fidelity.jsonl``: one line per round,
load point and client, with vLLM's field names; a Poisson point has a ``request_rate``). Pure
functions, so that a test can re-derive a committed report's table from its committed data.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.scoring import launch_value

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
    """(tuner, vllm) row pairs of the same session, round and load point, in that order
    (closed loops before Poisson points). A pair whose other half is missing (a machine lost
    mid-round) is left out."""
    by_key: dict[tuple[int, int, float, int], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        key = (int(r.get("session", 0)), int(r["round"]), *_order(r))
        by_key.setdefault(key, {})[str(r["client"])] = r
    return [
        (v["tuner"], v["vllm"]) for _, v in sorted(by_key.items()) if "tuner" in v and "vllm" in v
    ]


def _order(row: Mapping[str, Any]) -> tuple[float, int]:
    rate = row.get("request_rate")
    return (0.0, int(row["concurrency"])) if rate is None else (float(rate), 0)


def point(row: Mapping[str, Any]) -> str:
    """A row's load point: its streams, or its Poisson rate ("20 req/s")."""
    rate = row.get("request_rate")
    return str(row["concurrency"]) if rate is None else f"{float(rate):g} req/s"


def _points_word(rows: Iterable[Mapping[str, Any]]) -> str:
    return "load" if any(r.get("request_rate") is not None for r in rows) else "streams"


def ratio(a: Any, b: Any) -> float:
    if a is None or b is None or not b:
        return math.nan
    return float(a) / float(b)


def _run(row: Mapping[str, Any]) -> str:
    session = row.get("session")
    return f"{session}.{row['round']}" if session is not None else str(row["round"])


def _fmt(value: Any, field: str) -> str:
    if value is None:
        return "-"
    if field.endswith("throughput"):
        return f"{float(value):,.0f}" if field == "output_throughput" else f"{float(value):.2f}"
    return f"{float(value):,.1f}"


def _head(*columns: str, last: str = "") -> list[str]:
    """A table's head: ``columns``, one column per compared field, then ``last``."""
    names = [*columns, *(label for _, label in COMPARED), *([last] if last else [])]
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def values_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The measured values side by side: tuner / vLLM per field."""
    lines = _head("run", _points_word(rows))
    for t, v in pairs(rows):
        cells = [f"{_fmt(t.get(f), f)} / {_fmt(v.get(f), f)}" for f, _ in COMPARED]
        lines.append(f"| {_run(t)} | {point(t)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """tuner / vLLM per field; a ratio outside 1 +- 5 % is marked with "!"."""
    lines = _head("run", _points_word(rows), last="client-bound")
    for t, v in pairs(rows):
        cells = []
        for f, _ in COMPARED:
            r = ratio(t.get(f), v.get(f))
            mark = "" if math.isnan(r) or abs(r - 1.0) <= TOLERANCE else " !"
            cells.append("-" if math.isnan(r) else f"{r:.3f}{mark}")
        bound = "yes" if t.get("client_bound") else "no"
        lines.append(f"| {_run(t)} | {point(t)} | " + " | ".join(cells) + f" | {bound} |")
    return "\n".join(lines)


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per load point: the geometric mean of tuner / vLLM over all pairs, and how far vLLM's
    benchmark disagreed with itself across those runs (its max / min output throughput): a
    ratio inside that spread is no difference."""
    by_c: dict[tuple[float, int], list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for t, v in pairs(rows):
        by_c.setdefault(_order(t), []).append((t, v))
    lines = _head(_points_word(rows), "pairs", last="vLLM's own spread (out tok/s, max/min)")
    for _, ps in sorted(by_c.items()):
        cells = [
            f"{launch_value([ratio(t.get(f), v.get(f)) for t, v in ps]) or math.nan:.3f}"
            for f, _ in COMPARED
        ]
        own = [float(v["output_throughput"]) for _, v in ps]
        spread = max(own) / min(own)
        lines.append(
            f"| {point(ps[0][0])} | {len(ps)} | " + " | ".join(cells) + f" | x{spread:.3f} |"
        )
    return "\n".join(lines)


def load_sessions(paths: Sequence[Any], first: int = 1) -> list[dict[str, Any]]:
    """The rows of several ``fidelity.jsonl`` files, each tagged with its session number
    (from ``first``, in the order given)."""
    rows: list[dict[str, Any]] = []
    for number, path in enumerate(paths, start=first):
        for line in Path(path).read_text().splitlines():
            if line.strip():
                rows.append({**json.loads(line), "session": number})
    return rows


def client_markdown(raw_dirs: Sequence[Any], first: int = 1) -> str:
    """tuner's self-check in each of its runs (from the raw ``tuner-rR-cC.json`` results, or
    ``tuner-rR-rRATE.json`` of a Poisson point): its CPU share of one core, its event loop's
    P99 lag, and the verdict."""
    found = []
    for number, raw in enumerate(raw_dirs, start=first):
        for path in Path(raw).glob("tuner-r*-*.json"):
            m = re.fullmatch(r"tuner-r(\d+)-(c|r)([\d.]+)\.json", path.name)
            if m:
                rate = float(m[3]) if m[2] == "r" else None
                row = {"concurrency": int(m[3]) if rate is None else None, "request_rate": rate}
                found.append((number, int(m[1]), _order(row), row, json.loads(path.read_text())))
    lines = [
        f"| run | {_points_word(r for *_, r, _ in found)} | client CPU (of one core) "
        "| loop lag P99 ms | client-bound |",
        "|---|---|---|---|---|",
    ]
    for session, rnd, _, row, result in sorted(found, key=lambda x: x[:3]):
        c = point(row)
        h = result.get("tuner_client") or {}
        bound = "yes" if h.get("client_bound") else "no"
        lines.append(
            f"| {session}.{rnd} | {c} | {h.get('client_cpu', math.nan):.2f} | "
            f"{h.get('loop_lag_p99_ms', math.nan):.1f} | {bound} |"
        )
    return "\n".join(lines)
