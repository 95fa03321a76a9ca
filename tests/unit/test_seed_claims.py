"""The seed claims say what the two articles say: every claim cites its article and the
article's own figure, the claimed number is that figure, and the project's list of the
articles' figures (studies/claims/seed-figures.toml) gives each figure its claims or the
reason it has none. The articles themselves are not read: the project keeps its own list."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

from tuner.abtest.claims import load_claims
from tuner.abtest.claims.figures import RATIO

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "studies" / "claims" / "seed-claims.toml"
FIGURES = ROOT / "studies" / "claims" / "seed-figures.toml"


def _figures() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = tomllib.loads(FIGURES.read_text())["figure"]
    return entries


def test_every_claim_cites_its_article_and_a_listed_figure() -> None:
    claims = load_claims(CLAIMS)
    figures = _figures()
    for c in claims:
        assert c.article is not None, c.id
        assert c.figure, c.id
        listed = [
            f for f in figures if f["article"] == c.article.id and c.id in f.get("claims", [])
        ]
        assert listed, f"{c.id}: no figure of {c.article.id} in seed-figures.toml names it"
    assert {c.article.id for c in claims if c.article} == {"ernie-fa2", "vllm-flash-attn"}


def test_every_listed_figure_has_a_claim_or_a_reason() -> None:
    ids = {c.id for c in load_claims(CLAIMS)}
    articles = {c.article.id for c in load_claims(CLAIMS) if c.article}
    for f in _figures():
        assert set(f) <= {"article", "figure", "claims", "reason"}, f
        assert f["article"] in articles and f["figure"], f
        assert f.get("claims") or f.get("reason", "").strip(), f"{f['figure']}: no claim, no reason"
        assert set(f.get("claims", [])) <= ids, f


def _percent(ratio: float) -> str:
    return f"{abs(ratio - 1.0) * 100:g}"


def test_the_claimed_number_is_the_articles_figure() -> None:
    """A ratio's ends are the figure's percentages (1.411: "+41.1 %"; 0.72: "-28 %"); a
    difference's value is the figure's number in the same unit ("-120 MB": "120 MB")."""
    checked = 0
    for c in load_claims(CLAIMS):
        claimed = c.claimed
        if claimed is None or claimed.direction_only:
            continue
        numbers = set(re.findall(r"\d+(?:\.\d+)?", c.figure))
        ends = [v for v in (claimed.low, claimed.high) if math.isfinite(v)]
        if claimed.scale == RATIO:
            wanted = {_percent(v) for v in ends}
        elif claimed.low == claimed.high:
            wanted = {f"{abs(claimed.low / claimed.factor):g}"}
            assert claimed.unit in c.figure, c.id
        else:  # "1.2 s -> under 0.7 s" is "<= -500 ms": the figure's two times
            assert c.id == "fa2-ttft" and {"1.2", "0.7"} <= numbers
            checked += 1
            continue
        assert wanted <= numbers, (c.id, wanted, c.figure)
        checked += 1
    assert checked == 11  # every effect claim with a figure (two are directions only)


def test_the_second_articles_ranges_per_context_length() -> None:
    by_id = {c.id: c for c in load_claims(CLAIMS)}
    assert [by_id[f"fa2-context-{n}"].claimed_text for n in ("2k", "8k", "16k")] == [
        "1.10 to 1.20",
        "1.30 to 1.50",
        ">= 1.50",
    ]
    for n in ("2k", "8k", "16k"):
        article = by_id[f"fa2-context-{n}"].article
        assert article is not None and article.setting.startswith("Qwen 14B / RTX 4090")


def test_the_project_does_not_read_the_articles() -> None:
    """The seed articles sit outside the repository; nothing that runs or tests tuner reads
    them (the figures list is the project's own)."""
    for folder in ("tuner", "tests", "api", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".sh", ".toml") or path == Path(__file__):
                continue
            assert "shared/seeds" not in path.read_text(errors="replace"), path
    for path in (CLAIMS, FIGURES):
        assert "shared/" not in path.read_text(), path
