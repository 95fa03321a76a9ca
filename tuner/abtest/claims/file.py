"""The claims file: published claims about vLLM, each citing its article and its figure.

``[[article]]`` tables name where claims come from and the setting they were made in::

    [[article]]
    id = "vllm-flash-attn"                     # lower-case letters, digits and dashes
    title = "vLLM tuning flags (1): --enable-flash-attn"
    setting = "Qwen 14B / RTX 4090"            # as verdicts quote it
    model = "qwen2.5-14b"                      # optional: tuner's alias of that model
    gpu = "rtx4090"                            # optional: tuner's profile of that GPU
    vllm = ""                                  # optional: the vLLM version it used

``[[claim]]`` tables, of five kinds (``kind``, default ``effect``):

- ``effect``: configuration B against A on a workload and a metric; ``claimed`` is the effect
  in the article's own scale (:mod:`tuner.abtest.claims.figures`: ``1.411``, ``"1.10 to 1.20"``,
  ``">= 1.5"``, ``"-120 MB"``, ``"<= -500 ms"``). Keys a, b, workload, metric, claimed.
- ``flag``: a vLLM flag exists (``claimed = "exists"``) or not (``"absent"``): answered from
  the installed vLLM's own flag list. Keys flag, claimed.
- ``starts``: vLLM fails to start without a flag (``claimed = "required"``): answered by
  launches made without it. Keys flag, claimed; optional config and workload (for a launch of
  its own when nothing else is launched).
- ``default-backend``: vLLM's defaults run this attention backend (``claimed = "FLASH_ATTN"``):
  answered by the backend the launches of the defaults report.
- ``unmeasurable``: what tuner's measurements cannot show; ``needs`` says what would.

Every kind takes statement (tuner's own words), article (an ``[[article]]`` id), figure (the
article's figure, quoted as a figure: "+41.1 %", "2.98 GB -> 2.14 GB"), note and requires (a
CUDA GPU, attention backends the GPU profile must offer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.abtest.claims.figures import Claimed, parse_claimed
from tuner.abtest.compare import COMPARED
from tuner.catalog import GPUS
from tuner.domain import Workload
from tuner.errors import SpecError, UsageError
from tuner.load import WORKLOADS, check_workload, plan_requests
from tuner.spec import (
    Fail,
    find_line,
    knob_table,
    read_toml,
    typed_value,
    with_overrides,
    workload_field,
)

EFFECT = "effect"
FLAG = "flag"
STARTS = "starts"
DEFAULT_BACKEND = "default-backend"
UNMEASURABLE = "unmeasurable"
KINDS = (EFFECT, FLAG, STARTS, DEFAULT_BACKEND, UNMEASURABLE)
FACT_CLAIMS = {FLAG: ("exists", "absent"), STARTS: ("required",)}

METRICS: tuple[str, ...] = tuple(name for name, _, _ in COMPARED)
BACKENDS: frozenset[str] = frozenset(b for g in GPUS.values() for b in g.attention_backends)
_COMMON = frozenset({"id", "statement", "kind", "article", "figure", "note", "requires"})
_KEYS = {
    EFFECT: frozenset({"a", "b", "workload", "metric", "claimed"}),
    FLAG: frozenset({"flag", "claimed"}),
    STARTS: frozenset({"flag", "claimed", "config", "workload"}),
    DEFAULT_BACKEND: frozenset({"claimed", "config", "workload"}),
    UNMEASURABLE: frozenset({"needs", "claimed", "metric"}),
}
_REQUIRED = {
    EFFECT: ("id", "statement", "a", "b", "workload", "metric", "claimed"),
    FLAG: ("id", "statement", "flag", "claimed"),
    STARTS: ("id", "statement", "flag", "claimed"),
    DEFAULT_BACKEND: ("id", "statement", "claimed"),
    UNMEASURABLE: ("id", "statement", "needs"),
}
_TEXTS = ("id", "statement", "article", "figure", "note", "flag", "needs", "metric")
_ARTICLE_KEYS = frozenset({"id", "title", "setting", "model", "gpu", "vllm"})
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
_HEADER = re.compile(r"^\s*\[\[\s*(claim|article)\s*\]\]")
FACT_WORKLOAD = "smoke"  # what a launch made only to answer a starts/default-backend claim runs


@dataclass(frozen=True)
class Article:
    """Where claims come from: its title and the setting (model / GPU) it measured in."""

    id: str
    title: str
    setting: str
    model: str = ""  # tuner's alias, when tuner knows the model
    gpu: str = ""  # tuner's GPU profile name, when tuner knows the GPU
    vllm: str = ""


@dataclass(frozen=True)
class Claim:
    """One testable statement. For ``effect``: B against A on ``workload``, ``metric`` B/A or
    B - A as ``claimed`` says. For ``starts`` and ``default-backend`` ``a`` (= ``b``) is the
    configuration of a launch of their own. ``claimed`` is None for the kinds that are not
    a figure on a metric; ``claimed_text`` is what the file says in every kind."""

    id: str
    statement: str
    a: Mapping[str, Any]  # knob -> value as written ({} = defaults); see SearchSpace.config_from
    b: Mapping[str, Any]
    workload: Workload
    metric: str
    claimed: Claimed | None
    claimed_text: str
    requires: tuple[str, ...] = ()
    line: int | None = None
    kind: str = EFFECT
    article: Article | None = None
    figure: str = ""  # the article's own figure, e.g. "+41.1 % (batch 8, 512 in, 256 out)"
    flag: str = ""  # flag, starts: the vLLM flag the claim is about
    needs: str = ""  # unmeasurable: what a measurement would need
    note: str = ""


def load_claims(path: str | Path) -> tuple[Claim, ...]:
    """Read and validate a claims file; SpecError (exit 2) naming the line of the first problem."""
    p = Path(path)
    data, text = read_toml(p, "claims")
    stray = sorted(set(data) - {"claim", "article"})
    entries = data.get("claim", [])
    if stray or not isinstance(entries, list) or not entries:
        what = f"unknown top-level key(s) {stray}" if stray else "no [[claim]] tables"
        line = find_line(text, stray[0]) if stray else None
        raise SpecError(what, path=str(p), line=line, hint="a claims file is [[claim]] tables")
    headers: dict[str, list[int]] = {"claim": [], "article": []}
    for i, row in enumerate(text.splitlines()):
        if m := _HEADER.match(row):
            headers[m.group(1)].append(i)
    articles: dict[str, Article] = {}
    for index, entry in enumerate(data.get("article", [])):
        start = headers["article"][index] if index < len(headers["article"]) else 0
        article = _article(entry, _failer(text, start, str(p)))
        if article.id in articles:
            raise SpecError(f"duplicate article id {article.id!r}", path=str(p), line=start + 1)
        articles[article.id] = article
    claims: list[Claim] = []
    for index, entry in enumerate(entries):
        start = headers["claim"][index] if index < len(headers["claim"]) else 0
        claim = _claim(entry, _failer(text, start, str(p)), start, articles)
        if any(c.id == claim.id for c in claims):
            raise SpecError(f"duplicate claim id {claim.id!r}", path=str(p), line=claim.line)
        claims.append(claim)
    return tuple(claims)


def _failer(text: str, start: int, where: str) -> Fail:
    region = "\n".join(text.splitlines()[start:])

    def fail(
        msg: str, key: str | None = None, hint: str = "", section: str | None = None
    ) -> SpecError:
        found = find_line(region, key) if key else None
        line = start + (found if found is not None else 1)
        return SpecError(msg, path=where, line=line, hint=hint)

    return fail


def _article(entry: Mapping[str, Any], fail: Fail) -> Article:
    for key in entry:
        if key not in _ARTICLE_KEYS:
            raise fail(f"unknown key {key!r} in [[article]]", key, hint=f"{sorted(_ARTICLE_KEYS)}")
    for key in ("id", "title", "setting"):
        if key not in entry:
            raise fail(f"[[article]] lacks {key!r}", hint="every article has id, title, setting")
    values = {k: typed_value(v, str, k, fail, "article") for k, v in entry.items()}
    if not _ID.match(values["id"]):
        raise fail(f"article id {values['id']!r}: use lower-case letters, digits and dashes", "id")
    if values.get("gpu") and values["gpu"] not in GPUS:
        raise fail(f"unknown GPU profile {values['gpu']!r}", "gpu", hint=f"{', '.join(GPUS)}")
    return Article(**values)


def _claim(
    entry: Mapping[str, Any], fail: Fail, start: int, articles: Mapping[str, Article]
) -> Claim:
    kind = entry.get("kind", EFFECT)
    if kind not in KINDS:
        raise fail(f"unknown claim kind {kind!r}", "kind", hint=f"kinds: {', '.join(KINDS)}")
    allowed = _COMMON | _KEYS[kind]
    for key in entry:
        if key not in allowed:
            raise fail(
                f"unknown key {key!r} in a [[claim]] of kind {kind}", key, hint=f"{sorted(allowed)}"
            )
    for key in _REQUIRED[kind]:
        if key not in entry:
            raise fail(f"[[claim]] lacks {key!r}", hint=f"a {kind} claim has {_REQUIRED[kind]}")
    text = {k: typed_value(entry[k], str, k, fail, "claim") for k in _TEXTS if k in entry}
    claim_id = text["id"]
    if not _ID.match(claim_id):
        raise fail(f"claim id {claim_id!r}: use lower-case letters, digits and dashes", "id")
    article = None
    if "article" in text:
        article = articles.get(text["article"])
        if article is None:
            known = ", ".join(articles) or "none declared"
            raise fail(f"no [[article]] {text['article']!r}", "article", hint=f"articles: {known}")
    common: dict[str, Any] = {
        "id": claim_id,
        "statement": text["statement"],
        "requires": _requires(entry, fail),
        "line": start + 1,
        "kind": kind,
        "article": article,
        "figure": text.get("figure", ""),
        "note": text.get("note", ""),
    }
    if kind == EFFECT:
        return _effect(entry, fail, common)
    claimed_text = str(entry.get("claimed", ""))
    allowed_claims = FACT_CLAIMS.get(kind)
    if allowed_claims and claimed_text not in allowed_claims:
        raise fail(f"a {kind} claim's claimed is one of {allowed_claims}", "claimed")
    if kind == DEFAULT_BACKEND and claimed_text not in BACKENDS:
        raise fail(f"unknown attention backend {claimed_text!r}", "claimed")
    flag = text.get("flag", "")
    if kind in (FLAG, STARTS) and not _FLAG.match(flag):
        raise fail(f"flag {flag!r}: write it as vLLM spells it, e.g. --max-model-len", "flag")
    config = knob_table(entry.get("config", "defaults"), "config", fail)
    workload = _workload(entry.get("workload", FACT_WORKLOAD), fail)
    return Claim(
        a=config,
        b=config,
        workload=workload,
        metric=text.get("metric", ""),
        claimed=None,
        claimed_text=claimed_text,
        flag=flag,
        needs=text.get("needs", ""),
        **common,
    )


def _effect(entry: Mapping[str, Any], fail: Fail, common: dict[str, Any]) -> Claim:
    a, b = (knob_table(entry[side], side, fail) for side in ("a", "b"))
    if a == b:
        raise fail("a and b are the same configuration: there is nothing to compare", "b")
    metric = typed_value(entry["metric"], str, "metric", fail, "claim")
    if metric not in METRICS:
        raise fail(f"unknown metric {metric!r}", "metric", hint=f"metrics: {', '.join(METRICS)}")
    try:
        claimed = parse_claimed(entry["claimed"], metric)
    except ValueError as exc:
        raise fail(
            str(exc),
            "claimed",
            hint='e.g. 1.41, "1.10 to 1.20", ">= 1.5", "0.7/1.2", "-120 MB", "<= -500 ms"',
        ) from None
    return Claim(
        a=a,
        b=b,
        workload=_workload(entry["workload"], fail),
        metric=metric,
        claimed=claimed,
        claimed_text=claimed.text,
        **common,
    )


def _requires(entry: Mapping[str, Any], fail: Fail) -> tuple[str, ...]:
    requires = entry.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise fail("requires must be a list of strings", "requires")
    for item in requires:
        if item != "gpu" and item not in BACKENDS:
            known = ", ".join(["gpu", *sorted(BACKENDS)])
            raise fail(f"unknown requirement {item!r}", "requires", hint=f"known: {known}")
    return tuple(requires)


def _workload(value: Any, fail: Fail) -> Workload:
    table = {"preset": value} if isinstance(value, str) else value
    if not isinstance(table, dict) or not isinstance(table.get("preset"), str):
        raise fail(
            'workload must be a preset name or { preset = "...", key = value, ... }', "workload"
        )
    given = {k: v for k, v in table.items() if k not in ("preset", "name")}
    preset = WORKLOADS.get(table["preset"])
    if preset is None:
        raise fail(
            f"unknown workload preset {table['preset']!r}",
            "workload",
            hint=f"presets: {', '.join(WORKLOADS)}",
        )
    overrides = {key: workload_field(key, v, fail) for key, v in given.items()}
    name = table.get("name")
    if name is not None and not isinstance(name, str):
        raise fail("the workload's name must be a string", "name")
    try:
        workload = with_overrides(preset, overrides, name=name)
        check_workload(workload)  # the counts (windows = 0 measures nothing), with a line
        plan_requests(workload, 1, 0)  # the shape checks, with a line number
    except UsageError as exc:
        raise fail(exc.message, "workload", hint=exc.hint) from None
    return workload
