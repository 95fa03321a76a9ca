"""Claims judged again from stored comparisons, with no launch.

A claims file changes (a figure quoted as the article states it, a claim added); the launches
it was measured with do not. :func:`rejudge` takes the stored comparison records of one model
and GPU (the dataset shape of :func:`tuner.results.comparisons.comparison_records`) and a
claims file's claims, and gives each claim the verdict those launches support now, as a
:func:`~tuner.abtest.claims.verdicts.claim_record`:

- an ``effect`` claim reads the comparison of the same workload and configurations (whichever
  claim it was stored for: claims that share launches share comparisons), on its own metric,
  in its own scale; with none, ``not measured yet`` and what it needs;
- a ``flag`` claim asks the flag list of the vLLM version the comparisons ran (tuner's
  shipped snapshot, :func:`tuner.vllm.flags.shipped`);
- ``starts`` and ``default-backend`` claims read every stored launch: that it started, and the
  backend its server reported;
- ``unmeasurable`` claims say what would be needed; claims the GPU cannot run, why not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tuner.abtest.claims import Claim, Planned, plan
from tuner.abtest.claims.facts import (
    NO_START,
    NOT_MEASURED,
    Fact,
    FlagList,
    LaunchFact,
    Where,
    judge_default_backend,
    judge_starts,
    passes,
    setting_note,
)
from tuner.abtest.claims.figures import read
from tuner.abtest.claims.file import DEFAULT_BACKEND, EFFECT, STARTS
from tuner.abtest.claims.verdicts import Outcome, answered, claim_record, fact_outcome
from tuner.abtest.decide import judged_level
from tuner.catalog import get_gpu, resolve_model
from tuner.scoring import stored_window_note
from tuner.vllm import shipped

Record = Mapping[str, Any]


def where_of(records: Sequence[Record]) -> Where:
    """The one model, GPU and vLLM version the records were measured on; ValueError if several."""
    settings = {
        (r["model"], r["gpu"], (r.get("provenance") or {}).get("vllm_version") or "")
        for r in records
    }
    if len(settings) != 1:
        raise ValueError(f"records of one model, GPU and vLLM version only; got {sorted(settings)}")
    ((model, gpu, vllm),) = settings
    names = sorted({str((r.get("provenance") or {}).get("gpu_name") or "") for r in records} - {""})
    return Where(model, gpu, names[0] if names else gpu, vllm)


def rejudge(
    records: Sequence[Record],
    claims: Sequence[Claim],
    *,
    flags: Callable[[str], FlagList | None] = shipped,
) -> list[dict[str, Any]]:
    """Every claim's verdict from ``records`` (stored comparisons of one model, GPU and vLLM
    version), as claim records in the order of ``claims``; see the module docstring."""
    where = where_of(records)
    planned = plan(claims, resolve_model(where.model), get_gpu(where.gpu))
    launches = max((int(r.get("repeats") or 0) for r in records), default=3) or 3
    return [claim_record(_outcome(p, records, where, flags, launches)) for p in planned]


def _outcome(
    p: Planned,
    records: Sequence[Record],
    where: Where,
    flags: Callable[[str], FlagList | None],
    launches: int,
) -> Outcome:
    """``p``'s verdict from ``records``, with the id of the comparison it read, if any."""
    claim = p.claim
    outcome = answered(p, where, lambda: (flags(where.vllm), ""))
    if outcome is not None:
        return outcome
    if claim.kind == STARTS:
        facts = stored_launches(records, claim.flag)
        return fact_outcome(p, judge_starts(claim, facts), where)
    if claim.kind == DEFAULT_BACKEND:
        facts = stored_launches(records)
        return fact_outcome(p, judge_default_backend(claim, facts), where)
    assert claim.kind == EFFECT and p.a is not None and p.b is not None
    matching = [
        r
        for r in records
        if r["workload"] == p.workload.name
        and r["a_config"] == p.a.to_dict()
        and r["b_config"] == p.b.to_dict()
    ]
    # Measured more than once (more launches later): the one with the most launches, then the
    # latest.
    record = max(matching, key=_launches_then_id, default=None)
    metrics = record["metrics"] if record is not None else []
    metric = next((m for m in metrics if m["metric"] == claim.metric), None)
    if record is None or metric is None:
        needs = (
            f"needs 2 configurations × {launches} fresh launches on {p.workload.name} here "
            f"(tuner verify-claims --only {claim.id})"
        )
        return fact_outcome(p, Fact(NOT_MEASURED, needs), where)
    assert claim.claimed is not None
    reading = read(
        claim.claimed,
        ratio=metric.get("ratio"),
        low=metric.get("low"),
        high=metric.get("high"),
        a_values=list(metric["a"].get("values", [])),
        b_values=list(metric["b"].get("values", [])),
        confidence=judged_level(record),  # a sequential design's per look, not overall
        verdict=metric.get("verdict"),
    )
    reason = reading.reason
    if note := stored_window_note(record):
        reason += f" (caution: {note})"
    return Outcome(
        claim,
        p.workload,
        reading.verdict,
        reason,
        p.a,
        p.b,
        comparison_id=int(record["id"]),
        measured_record=reading.measured,
        setting=setting_note(claim, where),
    )


def _launches_then_id(r: Record) -> tuple[int, int]:
    launches = r.get("launches") or {}
    return min(int(launches.get("a") or 0), int(launches.get("b") or 0)), int(r["id"])


def stored_launches(records: Sequence[Record], flag: str = "") -> list[LaunchFact]:
    """What the stored comparisons' launches showed, each launch once: comparisons that share
    an arm (the same configuration on the same workload) share its launches. Launches of one
    arm whose servers reported the same backend are one fact with their count; ``flag``: a
    starts claim's, set in a configuration's knobs or not."""
    arms: dict[tuple[str, str], list[LaunchFact]] = {}
    for r in records:
        for side in ("a", "b"):
            config: Mapping[str, Any] = r[f"{side}_config"]
            key = (str(r["workload"]), json.dumps(dict(config), sort_keys=True))
            if key in arms:
                continue
            label = str(r.get(f"{side}_label") or side.upper())
            default = config.get("attention_backend") is None
            flagged = bool(flag) and passes(flag, config)
            servers = (r.get("servers") or {}).get(side) or []
            count = int((r.get("launches") or {}).get(side) or 0)
            backends = [(s.get("effective_backend"), s.get("flash_attn_version")) for s in servers]
            if len(backends) != count:  # rows stored before tuner recorded servers
                backends = [(None, None)] * count
            counted = Counter(backends)  # in the order first reported
            facts = [
                LaunchFact(label, True, default, b, v, n, flagged) for (b, v), n in counted.items()
            ]
            for text in (r.get("failures") or {}).get(side) or []:
                if str(text).split(":", 1)[0] in NO_START:
                    facts.append(LaunchFact(label, False, default, with_flag=flagged))
            arms[key] = facts
    return [f for facts in arms.values() for f in facts]
