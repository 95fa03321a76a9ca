"""The H200 load-fidelity report is re-derived from its committed data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.tables.fidelity import (
    client_markdown,
    load_sessions,
    pairs,
    ratio,
    ratios_markdown,
    summary_markdown,
    values_markdown,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "studies" / "results" / "load-fidelity-h200"
REPORT = ROOT / "docs" / "results" / "load-fidelity-h200.md"
SESSIONS = [DATA / "session-1", DATA / "session-2"]


def _block(name: str) -> str:
    text = REPORT.read_text()
    m = re.search(rf"<!-- fidelity:{name} -->\n(.*?)\n<!-- /fidelity:{name} -->", text, re.S)
    assert m, f"no fidelity:{name} block in {REPORT.name}"
    return m.group(1)


def _rows() -> list[dict[str, object]]:
    return load_sessions([s / "fidelity.jsonl" for s in SESSIONS])


def test_every_table_is_derived_from_the_committed_data() -> None:
    rows = _rows()
    assert _block("summary") == summary_markdown(rows)
    assert _block("values") == values_markdown(rows)
    assert _block("ratios") == ratios_markdown(rows)
    assert _block("client") == client_markdown([s / "raw" for s in SESSIONS])


def test_the_throughput_claims_hold_on_the_data() -> None:
    """Throughput within 5 % of vLLM's benchmark on the mean over pairs at every load, and no
    run of tuner's generator was client-bound."""
    rows = _rows()
    by_c: dict[int, list[float]] = {}
    for t, v in pairs(rows):
        by_c.setdefault(int(t["concurrency"]), []).append(
            ratio(t["output_throughput"], v["output_throughput"])
        )
        assert not t["client_bound"]
        assert t["failed"] == 0 and v["failed"] == 0
    assert sorted(by_c) == [16, 64, 256]
    for ratios in by_c.values():
        mean = 1.0
        for r in ratios:
            mean *= r
        assert abs(mean ** (1 / len(ratios)) - 1) <= 0.05
    # The report's text quotes the summary it shows.
    summary = _block("summary")
    for c, ratios in by_c.items():
        mean = 1.0
        for r in ratios:
            mean *= r
        assert f"| {c} | {len(ratios)} | {mean ** (1 / len(ratios)):.3f} |" in summary


SESSION_3 = DATA / "session-3-h100"
SESSION_4 = DATA / "session-4-h100"
SESSION_5 = DATA / "session-5-h100"


@pytest.mark.parametrize(("session", "first"), [(SESSION_3, 3), (SESSION_4, 4), (SESSION_5, 5)])
def test_the_h100_sessions_tables_are_derived_from_their_data(session: Path, first: int) -> None:
    rows = load_sessions([session / "fidelity.jsonl"], first=first)
    assert _block(f"s{first}-summary") == summary_markdown(rows)
    assert _block(f"s{first}-values") == values_markdown(rows)
    assert _block(f"s{first}-ratios") == ratios_markdown(rows)
    assert _block(f"s{first}-client") == client_markdown([session / "raw"], first=first)


def test_poisson_arrivals_send_the_same_load_from_both_clients_without_a_cap() -> None:
    """At 20 and 40 req/s with no cap in flight on either client, each pair's output
    throughput agrees within 5 %, every request completed, and both saved results say no cap
    (vLLM's null)."""
    rows = load_sessions([SESSION_3 / "fidelity.jsonl"], first=3)
    poisson = [(t, v) for t, v in pairs(rows) if t.get("request_rate") is not None]
    assert len(poisson) == 3
    for t, v in poisson:
        assert abs(ratio(t["output_throughput"], v["output_throughput"]) - 1) <= 0.05
        assert t["failed"] == 0 and v["failed"] == 0 and not t["client_bound"]
    raw = [json.loads(p.read_text()) for p in (SESSION_3 / "raw").glob("*-r[24]0*.json")]
    assert len(raw) == 6 and all(r["max_concurrency"] is None for r in raw)
    assert {r["request_rate"] for r in raw} == {20.0, 40.0}


def _pooled(rows: list[dict[str, Any]]) -> dict[int, tuple[int, float, float, float]]:
    """Per closed-loop stream count: the pairs, and the geometric mean of tuner / vLLM output
    tok/s with its 95 % t-interval over the pairs; no run of either client failed a request
    and no tuner run was client-bound."""
    import math

    from scipy import stats

    by_c: dict[int, list[float]] = {}
    for t, v in pairs(rows):
        if t.get("request_rate") is None:
            by_c.setdefault(int(t["concurrency"]), []).append(
                math.log(ratio(t["output_throughput"], v["output_throughput"]))
            )
            assert not t["client_bound"] and t["failed"] == 0 and v["failed"] == 0
    out = {}
    for c, logs in by_c.items():
        n = len(logs)
        mean = sum(logs) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
        half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
        out[c] = (n, math.exp(mean), math.exp(mean - half), math.exp(mean + half))
    return out


def _reported(text: str, mean: float, low: float, high: float) -> bool:
    """Whether the report gives the pooled figure, in either of its two phrasings."""
    return f"x{mean:.3f} [{low:.3f}, {high:.3f}]" in text or (
        f"x{mean:.3f}, with a t-interval over the pairs of [{low:.3f}, {high:.3f}]" in text
    )


def test_the_h100_gap_at_256_streams_is_inside_the_pairs_spread() -> None:
    """Session 3's two pairs at 256 streams read x0.86-0.88; with session 4's five, the seven
    closed-loop pairs on the two H100s hold 1 in their t-interval at 256 and at 64 streams,
    as the report says, and no run of tuner's client was client-bound."""

    rows = load_sessions([SESSION_3 / "fidelity.jsonl"], first=3)
    rows += load_sessions([SESSION_4 / "fidelity.jsonl"], first=4)
    text = " ".join(REPORT.read_text().split())
    for c, (n, mean, low, high) in sorted(_pooled(rows).items()):
        assert n == 7 and low < 1 < high
        assert _reported(text, mean, low, high), (c, mean, low, high)


def test_the_three_h100_sessions_pooled_hold_1_at_256_and_64_streams() -> None:
    """Session 5 keeps round 7's unpaired tuner row as the device wrote it and the loader leaves
    it out (12 pairs); with sessions 3 and 4, the 13 closed-loop pairs at 256 and at 64 streams
    on the three H100s hold 1 in their t-interval, as the report says, and no run of tuner's
    client was client-bound."""

    s5 = load_sessions([SESSION_5 / "fidelity.jsonl"], first=5)
    assert len(s5) == 25 and len(pairs(s5)) == 12
    assert [(r["round"], r["concurrency"], r["client"]) for r in s5 if r["round"] == 7] == [
        (7, 256, "tuner")
    ]
    rows = load_sessions([SESSION_3 / "fidelity.jsonl"], first=3)
    rows += load_sessions([SESSION_4 / "fidelity.jsonl"], first=4)
    rows += s5
    text = " ".join(REPORT.read_text().split())
    pooled = _pooled(rows)
    assert sorted(pooled) == [64, 256]
    for c, (n, mean, low, high) in sorted(pooled.items()):
        assert n == 13 and low < 1 < high
        assert _reported(text, mean, low, high), (c, mean, low, high)
    # Session 5's own pairs at 256 streams, as the report lists them.
    at_256 = [
        ratio(t["output_throughput"], v["output_throughput"])
        for t, v in pairs(s5)
        if int(t["concurrency"]) == 256
    ]
    listed = ", ".join(f"x{r:.3f}" for r in at_256[:-1]) + f" and x{at_256[-1]:.3f}"
    assert f"the six pairs read {listed}" in text
