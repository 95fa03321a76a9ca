"""Data for the compare page: an A/B comparison row as a per-metric table.

Two shapes of ``results`` JSON are read: the one :mod:`tuner.abtest.compare` writes (a metric's
verdict may be a sentence, "inconclusive: launches of A (defaults) disagree ...", and is shown
as it is; "windows", absent in older rows, becomes :attr:`ComparisonReport.window_note`), and a
plain map ``{"a": {METRIC: SIDE}, "b": {METRIC: SIDE}, "ratio": {METRIC: RATIO}}`` with
``SIDE = {"median": m, "low": lo, "high": hi, "values": [...]}`` (all but median optional) and
``RATIO = {"median": r, "low": lo, "high": hi}``. ``verdicts`` is ``{METRIC: text}`` (a value may
also be ``{"verdict": text}``), with ``"overall"`` for the headline verdict.

Ratios are B/A: in what :mod:`tuner.abtest.compare` writes, of the sides' geometric means
(:attr:`ComparisonReport.ratio_of`), not of the medians shown beside them. In the plain map,
without a stored ratio the ratio of medians is shown, and the interval only
when both sides carry one: ``[b.low / a.high, b.high / a.low]`` (conservative). Anything else in
the JSON is kept as text (:attr:`ComparisonReport.unparsed`) so the page can show it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.abtest import LAUNCH_VALUES, UNMEASURED_STOP, ratio_of
from tuner.db import ComparisonRow
from tuner.load import HIGHER_IS_BETTER
from tuner.results.report.study import METRICS, num
from tuner.scoring import ratio_text, stored_drift, stored_window_note

# Verdict words that get a colour; any other text is shown as it is, uncoloured.
TONES: Mapping[str, str] = {"better": "good", "worse": "bad"}
_KNOWN_KEYS = ("metrics", "a", "b", "ratio", "confidence", "a_label", "b_label", "launches")
# Shown on the page in their own places rather than as leftover JSON.
_PLACED_KEYS = (
    "failures",
    "kind",
    "servers",
    "claim",
    "windows",
    "launch_value",
    "decision",
    "noise",
    "gpu_minutes",
    "gpu_launches",  # what gpu_minutes sums
)


@dataclass(frozen=True)
class Side:
    """One arm on one metric: its median and, when stored, interval and per-launch values."""

    median: float | None
    low: float | None
    high: float | None
    values: tuple[float, ...]


@dataclass(frozen=True)
class Ratio:
    median: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    a: Side | None
    b: Side | None
    ratio: Ratio | None  # B / A
    verdict: str  # "" when the comparison gave none

    @property
    def tone(self) -> str:
        """ "good", "bad" or "" (CSS class); never derived from stored text beyond a lookup."""
        return TONES.get(self.verdict, "")


@dataclass(frozen=True)
class ComparisonReport:
    row: ComparisonRow
    a_label: str
    b_label: str
    confidence: float | None
    launches: Mapping[str, int]
    overall: str
    metrics: tuple[MetricComparison, ...]
    failures: Mapping[str, tuple[str, ...]]
    # Per side, what the launches ran: "FLASH_ATTN (FlashAttention 3) × 3"; empty when unknown.
    backends: Mapping[str, str]
    # A verified claim (`tuner verify-claims`): statement, article, figure, metric, claimed_shown,
    # measured_text, verdict, reason, setting; None for other comparisons.
    claim: Mapping[str, Any] | None
    provenance: Mapping[str, str]
    unparsed: str  # JSON text of whatever did not fit the expected shape; "" when all did
    # "A (defaults): 2 of 9 windows disturbed; ..." from "windows"; "" when none was flagged.
    window_note: str = ""
    # What each ratio B/A is taken from (tuner.abtest.compare.ratio_of): the sides' geometric
    # means, at one time where a trend was taken out, not the medians shown beside it; "" for
    # the plain map shape (its stored ratio, else B median / A median).
    ratio_of: str = ""

    @property
    def overall_tone(self) -> str:
        return TONES.get(self.overall, "")


def backends_text(servers: list[Any]) -> str:
    """``[{"effective_backend": "FLASH_ATTN", "flash_attn_version": 3}, ...]`` as
    "FLASH_ATTN (FlashAttention 3) × 2, TRITON_ATTN × 1", in order of first appearance."""
    counts = Counter(
        str(s["effective_backend"])
        + (f" (FlashAttention {s['flash_attn_version']})" if s.get("flash_attn_version") else "")
        for s in servers
        if isinstance(s, Mapping) and s.get("effective_backend")
    )
    return ", ".join(f"{name} × {n}" for name, n in counts.items())


def _claim(x: Any) -> Mapping[str, Any] | None:
    """A stored claim record for the page: ``measured_text`` and ``claimed_shown`` as the
    verdict quotes them ("×1.101 [0.904, 1.341]" against "×1.10 to 1.20"; rows stored before
    claims quoted their article: "B/A 1.41"), the article and its figure, and the setting."""
    if not isinstance(x, Mapping) or not x.get("statement"):
        return None
    m = _map(x.get("measured"))
    measured = m.get("text") if isinstance(m.get("text"), str) else None
    if measured is None:
        measured = ratio_text(num(m.get("ratio")), num(m.get("low")), num(m.get("high")))
    claimed = _map(x.get("claimed")).get("text")
    shown = str(claimed) if claimed else f"B/A {x.get('claimed_text', '')}"
    return {
        **x,
        "measured_text": measured or "",
        "claimed_shown": shown,
        "article": str(x.get("article") or ""),
        "figure": str(x.get("figure") or ""),
        "setting": str(x.get("setting") or ""),
    }


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _side(data: Any) -> Side | None:
    if not isinstance(data, Mapping):
        return None
    values = data.get("values")
    vals = tuple(v for x in values if (v := num(x)) is not None) if isinstance(values, list) else ()
    side = Side(num(data.get("median")), num(data.get("low")), num(data.get("high")), vals)
    return None if side.median is None and not side.values else side


def _ratio(data: Mapping[str, Any]) -> Ratio | None:
    r = num(data.get("ratio", data.get("median")))
    return None if r is None else Ratio(r, num(data.get("low")), num(data.get("high")))


def _ratio_of(a: Side | None, b: Side | None) -> Ratio | None:
    if a is None or b is None or not a.median or b.median is None:
        return None
    if a.low and a.high and a.low > 0 and b.low is not None and b.high is not None:
        return Ratio(b.median / a.median, b.low / a.high, b.high / a.low)
    return Ratio(b.median / a.median, None, None)


def _entries(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-metric dicts in the list shape, whichever shape was stored."""
    listed = results.get("metrics")
    if isinstance(listed, list):
        return [dict(m) for m in listed if isinstance(m, Mapping) and "metric" in m]
    a, b, ratios = _map(results.get("a")), _map(results.get("b")), _map(results.get("ratio"))
    out = []
    for name in dict.fromkeys([*a, *b, *ratios]):
        ratio = dict(_map(ratios.get(name)))
        if "median" in ratio:
            ratio["ratio"] = ratio.pop("median")
        out.append({"metric": name, "a": a.get(name), "b": b.get(name), **ratio})
    return out


def _verdict(x: Any) -> str:
    x = x.get("verdict", "") if isinstance(x, Mapping) else x
    return "" if x is None else str(x)


def decision_facts(results: Mapping[str, Any]) -> dict[str, str]:
    """How the verdict was reached and what it cost, for the provenance table: the design,
    why it stopped, the interval's method and the GPU-minutes ({} for older rows)."""
    d = _map(results.get("decision"))
    out: dict[str, str] = {}
    minutes = num(results.get("gpu_minutes"))
    if minutes is not None:
        out["GPU-minutes"] = f"{minutes:.1f}"
    if d:
        launches = _map(d.get("launches"))
        if d.get("kind") == "sequential":
            effect = num(d.get("min_effect"))
            out["design"] = (
                f"sequential, {d.get('first')} to {d.get('max_launches')} launches a side"
                + (f", stop at a half-width of {effect * 100:g} %" if effect else "")
            )
        else:
            out["design"] = f"fixed, {d.get('first')} launches a side"
        if d.get("trend"):
            out["design"] += f", {d['trend']} taken out"
        out["stopped"] = (
            f"{_stop_words(d.get('stopped'), results)} after {launches.get('a', '?')} + "
            f"{launches.get('b', '?')} launches"
        )
        if d.get("method"):
            out["interval"] = str(d["method"])
    drift = stored_drift(results)
    if drift is not None:
        out["drift"] = drift[1].summary(drift[0])
    return out


def _stop_words(stopped: Any, results: Mapping[str, Any]) -> str:
    """Why a decision stopped; an unmeasured side named with its failures' classes."""
    if stopped != UNMEASURED_STOP:
        return str(stopped or "-")
    failures = _map(results.get("failures"))
    sides = []
    for side in ("a", "b"):
        kinds = Counter(str(f).split(":")[0] for f in failures.get(side) or ())
        if kinds:
            counted = ", ".join(f"{k} ×{n}" for k, n in kinds.items())
            sides.append(f"{side.upper()} ({counted})")
    return "a side could not be measured: " + (" and ".join(sides) or "no launch completed")


def comparison_report(row: ComparisonRow) -> ComparisonReport:
    """The per-metric table of an A/B comparison (see the module docstring for the JSON)."""
    results, verdicts = _map(row.results), _map(row.verdicts)
    metrics = []
    for e in _entries(results):
        name = str(e["metric"])
        a, b = _side(e.get("a")), _side(e.get("b"))
        label, unit = METRICS.get(name, (str(e.get("label") or name), ""))
        higher = e.get("higher_is_better")
        if not isinstance(higher, bool):
            higher = HIGHER_IS_BETTER.get(name, False)
        metrics.append(
            MetricComparison(
                metric=name,
                label=label,
                unit=unit,
                higher_is_better=higher,
                a=a,
                b=b,
                ratio=_ratio(e) or _ratio_of(a, b),
                verdict=_verdict(verdicts.get(name, e.get("verdict", ""))),
            )
        )
    order = list(METRICS)
    metrics.sort(key=lambda m: order.index(m.metric) if m.metric in order else len(order))
    shown = {m.metric for m in metrics} | {"overall"}
    leftover = {k: v for k, v in results.items() if k not in (*_KNOWN_KEYS, *_PLACED_KEYS)}
    extra_verdicts = {k: v for k, v in verdicts.items() if k not in shown}
    if extra_verdicts:
        leftover["verdicts"] = extra_verdicts
    for name, value in (("results", row.results), ("verdicts", row.verdicts)):
        if not isinstance(value, Mapping) and value not in (None, [], ""):
            leftover[name] = value
    failures = _map(results.get("failures"))
    confidence = num(results.get("confidence"))
    prov = row.provenance
    provenance = {
        "kind": str(results.get("kind") or ""),
        "model": row.model,
        "GPU": prov.gpu_name if prov else row.gpu,
        "vLLM": prov.vllm_version if prov else "",
        "workload": row.workload,
        "launches per arm": str(row.repeats),
        "a launch's value": LAUNCH_VALUES.get(str(results.get("launch_value") or ""), ""),
        "confidence": f"{confidence:.0%}" if confidence is not None else "",
        **decision_facts(results),
        "driver": (prov.driver_version or "") if prov else "",
        "host": prov.hostname if prov else "",
        "emulated": "yes" if prov and prov.emulated else "",
    }
    return ComparisonReport(
        row=row,
        a_label=str(results.get("a_label") or "A"),
        b_label=str(results.get("b_label") or "B"),
        confidence=confidence,
        launches={
            k: int(v) for k, v in _map(results.get("launches")).items() if num(v) is not None
        },
        overall=_verdict(verdicts.get("overall", "")),
        metrics=tuple(metrics),
        failures={k: tuple(str(x) for x in v) for k, v in failures.items() if isinstance(v, list)},
        backends={
            k: text
            for k, v in _map(results.get("servers")).items()
            if isinstance(v, list) and (text := backends_text(v))
        },
        claim=_claim(results.get("claim")),
        provenance={k: v for k, v in provenance.items() if v},
        unparsed=json.dumps(leftover, indent=2, sort_keys=True, default=str) if leftover else "",
        window_note=stored_window_note(results),
        ratio_of=ratio_of(results),
    )
