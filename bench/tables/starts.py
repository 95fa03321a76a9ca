"""Cold against warm vLLM starts as a report table, from the JSON that
``bench/bench_warm_start.py --json-out`` writes (one file per machine)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _span(values: Sequence[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def starts_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """One row per run: the machine, the starts measured, the cold and warm medians with their
    ranges, and warm / cold (the median of each; "faster" is 1 - warm / cold)."""
    lines = [
        "| machine | vLLM | model | pairs | cold median s [range] | warm median s [range] "
        "| warm / cold |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        cold, warm = list(run["cold_s"]), list(run["warm_s"])
        if not cold or not warm:
            raise ValueError(f"{run.get('gpu')}: a warm-start run needs cold and warm starts")
        ratio = float(run["warm_median_s"]) / float(run["cold_median_s"])
        pairs = min(len(cold), len(warm))
        lines.append(
            f"| {run['gpu']} | {run['vllm_version']} | {run['model']} | {pairs} "
            f"| {run['cold_median_s']:.1f} [{_span(cold)}] "
            f"| {run['warm_median_s']:.1f} [{_span(warm)}] "
            f"| {ratio:.2f} ({(1 - ratio) * 100:.0f} % faster) |"
        )
    return "\n".join(lines) + "\n"
