"""The schemathesis fuzz of tests/integration/test_api_fuzz.py on PostgreSQL, whose types are
narrower than SQLite's (32-bit INTEGER, text without NUL): every check and phase, two seeds,
with and without the API key; nothing may fail."""

from __future__ import annotations

import pytest

from tests import apifuzz


def test_schemathesis_finds_nothing_on_postgres(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with apifuzz.app_over(pg_url) as app:
        outcomes = [apifuzz.fuzz(app, seed=seed, key=key) for seed, key in apifuzz.RUNS]
    text = apifuzz.check(outcomes, "PostgreSQL")
    with capsys.disabled():
        print("\n" + text)
