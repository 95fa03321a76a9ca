"""Launch summaries for the noise profiles (tuner_launches): stored and read back by key, a
run's own launches left out, non-finite values dropped, text the database cannot hold made
storable. The same checks run on PostgreSQL in tests/postgres/test_postgres_launches.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tuner.db import migrate
from tuner.db.repository import Repository
from tuner.db.session import make_engine
from tuner.domain import ServingConfig

KEY = {
    "host": "vm",
    "gpu": "NVIDIA H200",
    "vllm_version": "0.26.0",
    "model": "ernie-0.3b",
    "workload": "throughput-256",
    "windows": 3,
}


def check_launches_round_trip(engine: Engine) -> None:
    repo = Repository(engine)
    b = ServingConfig(max_num_seqs=128)
    first = repo.add_launch(
        key=KEY,
        config=ServingConfig(),
        is_defaults=True,
        source="calibrate",
        run="calibrate:x:1.000",
        values={"output_throughput": [9.5, 9.6, math.nan, 9.7], "memory_gib": [4.9]},
        wall_s=117.0,
        startup_s=65.5,
    )
    assert first.values["output_throughput"] == (9.5, 9.6, 9.7)  # NaN dropped
    repo.add_launch(
        key=KEY, config=b, is_defaults=False, source="compare", run="compare:y:2.000",
        values={"output_throughput": [9.8, 9.9, 9.7]},
    )  # fmt: skip
    repo.add_launch(
        key={**KEY, "windows": 2}, config=b, is_defaults=False, source="compare",
        run="compare:y:2.000", values={"output_throughput": [9.8, 9.9]},
    )  # fmt: skip
    repo.add_launch(
        key={**KEY, "host": "other\x00host"}, config=b, is_defaults=False, source="compare",
        run="r", values={},
    )  # fmt: skip
    rows = repo.list_launches(KEY)
    assert [(r.source, r.is_defaults, r.config) for r in rows] == [
        ("calibrate", True, ServingConfig()),
        ("compare", False, b),
    ]
    assert rows[0].wall_s == 117.0 and rows[0].startup_s == 65.5 and rows[1].wall_s is None
    assert rows[0].values["memory_gib"] == (4.9,) and rows[0].config_label == "defaults"
    assert [r.source for r in repo.list_launches(KEY, exclude_run="compare:y:2.000")] == [
        "calibrate"
    ]
    assert len(repo.list_launches({**KEY, "windows": 2})) == 1
    assert repo.list_launches({**KEY, "host": "other\ufffdhost"})[0].run == "r"
    # Pinned launches are a key of their own; a key without a placement is "off".
    repo.add_launch(
        key={**KEY, "placement": "pinned"}, config=b, is_defaults=False, source="calibrate",
        run="p", values={"output_throughput": [9.0]},
    )  # fmt: skip
    pinned = repo.list_launches({**KEY, "placement": "pinned"})
    assert [(r.run, r.placement) for r in pinned] == [("p", "pinned")]
    assert len(repo.list_launches({**KEY, "placement": "off"})) == 2
    assert {r.placement for r in repo.list_launches(KEY)} == {"off"}


def test_launches_round_trip_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        check_launches_round_trip(engine)
    finally:
        engine.dispose()


def test_a_profile_keeps_each_runs_launches_apart(tmp_path: Path) -> None:
    """Two runs of the defaults on two cards of one host name, 5 % apart, launches within a
    run 0.5 % apart: the profile's launch noise is the within-run spread, not the shift
    between the runs (grouped by configuration alone it was about 2.6 % a launch)."""
    from tuner.abtest import load_profile
    from tuner.scoring import NoiseKey

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    migrate.upgrade(url)
    repo = Repository(make_engine(url))
    for run, level in (("calibrate:a:1.000", 9.0), ("calibrate:b:2.000", 9.05)):
        for step in (-0.005, 0.0, 0.005):
            x = level + step
            repo.add_launch(
                key=KEY, config=ServingConfig(), is_defaults=True, source="calibrate", run=run,
                values={"output_throughput": [x - 0.001, x, x + 0.001]},
            )  # fmt: skip
    profile = load_profile(repo, NoiseKey(**KEY))
    assert profile is not None
    thr = profile.get("output_throughput")
    assert thr is not None and (thr.groups, thr.df, thr.launches) == (2, 4, 6)
    assert thr.sd == pytest.approx(0.005, rel=0.01)


def test_a_long_workload_or_run_is_found_as_it_was_stored(tmp_path: Path) -> None:
    """The key's texts were cut to their columns (255 characters) when stored but looked for
    whole: a trace workload with a long file name was never found again ("noise profile:
    none" after every calibrate), and a long run name escaped exclude_run, so a confirmation
    pooled its own launches into the profile it calls independent."""
    url = f"sqlite:///{tmp_path / 'long.db'}"
    migrate.upgrade(url)
    repo = Repository(make_engine(url))
    key = {**KEY, "workload": "trace:" + "x" * 300 + ".jsonl[speed=4]"}
    run = "study:" + "s" * 300
    for config in (ServingConfig(), ServingConfig(max_num_seqs=64)):
        repo.add_launch(key=key, config=config, is_defaults=config == ServingConfig(),
                        source="confirm", run=run, values={"output_throughput": [1.0]})  # fmt: skip
    assert len(repo.list_launches(key)) == 2
    assert repo.list_launches(key, exclude_run=run) == []
