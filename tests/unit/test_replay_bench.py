"""The replay benchmarks (bench/search_replay.py, bench/sequential_replay.py) run in a reduced
form and print and write well-formed results. Nothing here is about speed or which sampler
wins: only that the scripts run on the committed datasets and say what they promise."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, out: Path) -> tuple[str, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--json-out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, json.loads(out.read_text())


def _finite_or_none(x: Any) -> bool:
    return x is None or (isinstance(x, int | float) and math.isfinite(x))


def test_search_replay_reduced(tmp_path: Path) -> None:
    samplers = ["tpe", "tpe-score", "random", "grid", "nsga2"]
    text, data = _run(
        "search_replay.py",
        "--seeds", "2", "--trials", "6", "--max-trials", "12",
        "--samplers", ",".join(samplers), "--stop-z", "2",
        out=tmp_path / "search.json",
    )  # fmt: skip
    assert "| dataset | sampler | found |" in text and "| stop rule |" in text
    assert set(data["datasets"]) == {"h200-chat", "h200-heavy", "cpu"}
    for ds in data["datasets"].values():
        table = ds["table"]
        assert table["rows"] >= 3 and table["space_size"] >= table["rows"]
        assert table["best"]["trial"] in table["targets"]
        assert table["noise"]["launch_sd"]["score"] > 0
        assert list(ds["samplers"]) == samplers
        for name, res in ds["samplers"].items():
            search = res["search"]
            assert search["runs"] == 2 and 0 <= search["found"] <= 2
            quartiles = search["gpu_s_to_target"]
            assert set(quartiles) == {"min", "q1", "median", "q3", "max"}
            assert all(_finite_or_none(v) for v in quartiles.values())
            assert 0.0 <= search["imputed_share"] <= 1.0
            for seed in res["per_seed"]:
                assert seed["trials"] >= 1 and _finite_or_none(seed["gpu_s_to_target"])
                if name != "grid":
                    assert seed["trials"] <= 12
            (rule,) = res["stopping"].values()
            assert rule["margin"] > 0 and 0 <= rule["stopped"] <= rule["trials"]
            assert 0.0 <= rule["gpu_s_saved_share"] < 1.0


def test_search_replay_can_exclude_unmeasured_configurations(tmp_path: Path) -> None:
    _, data = _run(
        "search_replay.py",
        "--dataset", "h200-heavy", "--space", "table", "--seeds", "1",
        "--samplers", "random,grid", "--max-trials", "8",
        out=tmp_path / "table.json",
    )  # fmt: skip
    ds = data["datasets"]["h200-heavy"]
    assert ds["table"]["space"] == "table" and ds["table"]["space_size"] == ds["table"]["rows"]
    assert ds["samplers"]["grid"]["search"]["imputed_share"] == 0.0


def test_sequential_replay_reduced(tmp_path: Path) -> None:
    text, data = _run(
        "sequential_replay.py",
        "--reps", "12", "--cap", "4", "--confidences", "0.95,0.99",
        out=tmp_path / "seq.json",
    )  # fmt: skip
    assert "| design | per-look confidence |" in text
    for ds in data["datasets"].values():
        assert 0.0 <= ds["fixed_null_wrong"] <= 1.0
        assert {"fixed-3-welch", "sequential-welch", "sequential-hl", "sequential-screened"} <= set(
            ds["results"]
        )
        for design, scenarios in ds["results"].items():
            for sc in scenarios.values():
                assert 0.0 <= sc["wrong"] <= 1.0 and 0.0 <= sc["correct"] <= 1.0
                assert math.isclose(sum(sc["verdicts"].values()), 1.0)
                low = 6 if design.startswith("fixed-3") else 4
                assert low <= sc["launches_mean"] <= 8
