"""The replay tables (bench.replay) and their search space (bench.replay_space),
on the committed H200 studies and on small tables built here."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from bench.replay import SCORE, Launch, Row, Table, load_table
from bench.replay_space import ROW_PARAM, ReplaySpace
from tuner.domain import Objective, ServingConfig, Slo
from tuner.space import DEFAULT

ROOT = Path(__file__).resolve().parents[2]
CHAT = ROOT / "studies" / "results" / "ernie-0.3b-h200" / "tuner-gpu.db"
HEAVY = ROOT / "studies" / "results" / "ernie-0.3b-h200-heavy" / "heavy-h200.db"


@pytest.fixture(scope="module")
def chat() -> Table:
    return load_table(CHAT)


def test_the_committed_file_is_read_through_a_copy() -> None:
    # The committed files are in WAL mode: opening one in place would leave -wal/-shm files.
    side = [CHAT.with_name(CHAT.name + suffix) for suffix in ("-wal", "-shm")]
    existed = [p.exists() for p in side]
    before = hashlib.sha256(CHAT.read_bytes()).hexdigest()
    load_table(CHAT)
    assert hashlib.sha256(CHAT.read_bytes()).hexdigest() == before
    assert [p.exists() for p in side] == existed


def test_the_chat_study_as_a_table(chat: Table) -> None:
    assert chat.objective is Objective.BALANCED
    # 20 search trials and 6 confirmation launches: 14 measured configurations (trials 1 and
    # 5 are one), the FLEX_ATTENTION finding, 4 interrupted trials left out.
    assert len(chat.rows) == 15 and chat.skipped == 4
    assert [r.number for r in chat.rows if r.finding] == [12]
    assert len(chat.baseline.launches) == 4 and chat.baseline.config == ServingConfig()
    by_number = {r.number: r for r in chat.rows}
    assert len(by_number[1].launches) == 2 and len(by_number[8].launches) == 4
    assert chat.knobs[:2] == ("attention_backend", "flash_attn_version")
    assert math.isclose(chat.truth(chat.baseline).score or 0, 1.0)
    assert chat.best().number == 15
    for row in chat.rows:
        for launch in row.launches:
            assert launch.startup_s > 0 and launch.measure_s > sum(launch.window_s) > 0


def test_a_row_is_the_geometric_mean_of_its_launches(chat: Table) -> None:
    row = next(r for r in chat.rows if r.number == 8)
    values = [ln.metrics["output_throughput"] for ln in row.launches]
    assert math.isclose(row.center("output_throughput"), math.prod(values) ** (1 / len(values)))


def test_the_noise_comes_from_the_repeated_launches(chat: Table) -> None:
    noise = chat.noise()
    assert noise.repeated == 3 and noise.dof == 3 + 3 + 1
    # H200 launches of one configuration differ by about 10-20 %; memory hardly at all.
    assert 0.05 < noise.launch[SCORE] < 0.3
    assert 0.05 < noise.launch["output_throughput"] < 0.3
    assert noise.launch["memory_gib"] < 0.01
    assert 0 < noise.first[SCORE] < noise.launch[SCORE]
    assert len(noise.launch_cov) == len(noise.launch_cov[0]) == 5


def test_the_heavy_study_space_and_its_grid() -> None:
    table = load_table(HEAVY)
    space = ReplaySpace(table)
    assert table.knobs == ("stream_interval", "async_scheduling")
    assert space.choices == {
        "stream_interval": (DEFAULT, 4, 8),
        "async_scheduling": (DEFAULT, True),
    }
    grid = space.grid()
    assert len(grid) == 6 and grid[0] == table.baseline.config  # defaults first
    assert all(c.max_model_len == 4096 for c in grid)  # the study's fixed knob stays
    best = ServingConfig(max_model_len=4096, extra={"stream_interval": 4, "async_scheduling": True})
    assert grid[3] == best == table.best().config


def test_the_chat_space_asks_the_flash_attention_version_only_with_flash_attention(
    chat: Table,
) -> None:
    space = ReplaySpace(chat)
    grid = space.grid()
    assert len(grid) == len(set(grid))
    assert all(c.flash_attn_version is None for c in grid if c.attention_backend != "FLASH_ATTN")
    for row in chat.rows:
        params = space.params_of(row.config)
        assert space.config_of(params) == row.config
        point = space.lookup(row.config)
        assert point.row is row and not point.imputed and point.distance == 0
        assert ("flash_attn_version" in params) == (row.config.attention_backend == "FLASH_ATTN")


class _Trial:
    def __init__(self, answers: dict[str, object]) -> None:
        self.answers, self.asked = answers, []

    def suggest_categorical(self, name: str, choices: object) -> object:
        self.asked.append(name)
        return self.answers[name]


def test_suggest_skips_the_version_under_another_backend(chat: Table) -> None:
    space = ReplaySpace(chat)
    answers = {k: DEFAULT for k in chat.knobs} | {"attention_backend": "TRITON_ATTN"}
    trial = _Trial(answers)
    assert space.suggest(trial) == ServingConfig(attention_backend="TRITON_ATTN")
    assert "flash_attn_version" not in trial.asked


def _launch(throughput: float) -> Launch:
    metrics = {
        "output_throughput": throughput,
        "memory_gib": 10.0,
        "e2e_p99_ms": 1000.0,
        "ttft_p99_ms": 50.0,
        "itl_p99_ms": 5.0,
        "error_rate": 0.0,
    }
    return Launch(metrics, (metrics,), (5.0,), startup_s=60.0, measure_s=20.0)


def _table(rows: list[Row]) -> Table:
    return Table(
        name="t",
        study="t",
        objective=Objective.THROUGHPUT,
        slo=Slo(),
        memory_ceiling_gib=80.0,
        knobs=("max_num_seqs", "enable_prefix_caching"),
        rows=tuple(rows),
        baseline=rows[0],
        skipped=0,
    )


def test_an_unmeasured_point_takes_its_nearest_row_and_the_worse_one_on_a_tie() -> None:
    base = Row(ServingConfig(), 0, (_launch(100.0),))
    good = Row(ServingConfig(max_num_seqs=64), 1, (_launch(150.0),))
    poor = Row(ServingConfig(enable_prefix_caching=True), 2, (_launch(90.0),))
    table = _table([base, good, poor])
    space = ReplaySpace(table)
    point = space.lookup(ServingConfig(max_num_seqs=64, enable_prefix_caching=True))
    # Equally near `good` and `poor` (one knob each): the worse of the two.
    assert point.imputed and point.distance == 1 and point.row is poor
    # A finding stands below everything, so a tie with it imputes "cannot run".
    oom = Row(ServingConfig(max_num_seqs=64, enable_prefix_caching=False), 3, finding="oom")
    tied = ReplaySpace(_table([base, good, poor, oom]))
    assert tied.lookup(ServingConfig(max_num_seqs=64, enable_prefix_caching=True)).row is oom


def test_the_table_mode_offers_the_measured_rows_only(chat: Table) -> None:
    space = ReplaySpace(chat, "table")
    assert set(space.choices) == {ROW_PARAM}
    assert len(space.grid()) == len(chat.rows)
    assert space.grid()[0] == chat.baseline.config
    row = chat.rows[3]
    assert space.suggest(_Trial({ROW_PARAM: str(row.number)})) == row.config
    assert space.params_of(row.config) == {ROW_PARAM: str(row.number)}
