"""``tuner db merge``: studies run elsewhere (each into its own SQLite file) brought into one store.

Source databases are written by real studies on the in-process fake runner (a search, a
confirmation with its comparison, a verified claim), and the real H200 results are merged
from copies. Contents are compared through sqlite3, column by column, not through the code
under test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import shutil
import sqlite3
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import pytest
from sqlalchemy import Engine, event

from tests.studykit import (
    damage_sqlite,
    make_context,
    make_repo,
    memory_confirmation_context,
    store_claim,
)
from tuner.cli.app import main
from tuner.db import merge as merge_module
from tuner.db import migrate
from tuner.db.merge import SAME_MERGED_COLUMNS, MergeSummary, merge_databases
from tuner.db.models import Base
from tuner.db.session import make_engine
from tuner.domain import ServingConfig, TrialResult, Workload
from tuner.errors import StorageError, UsageError
from tuner.runner.vllm import PhaseCallback
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

H200 = Path(__file__).resolve().parents[2] / "studies" / "results" / "ernie-0.3b-h200"
CHAT = "ernie-0.3b-h200-chat"


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def copy_db(src: Path, dst: Path) -> Path:
    """A consistent copy of a SQLite database, WAL content included (the backup API)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()
    return dst


def run_studies(path: Path, *, search: str = "a") -> None:
    """A 5-trial search ``search``, a memory study "conf" with its confirmation, one claim."""
    repo = make_repo(url(path))
    run_study(make_context(url(path), name=search, trials=5), FakeRunner(), repo)
    conf = dataclasses.replace(memory_confirmation_context(url(path)), name="conf")
    run_study(conf, FakeRunner(), repo)
    store_claim(repo)
    # The engines of these studies close their connections when collected, and the last one
    # to close folds the -wal into the file: done now, not during a test's digest of the file
    # (a collection mid-merge changed the "read only" source under test_merge_into_...).
    del repo
    gc.collect()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "gpu-host.db"
    run_studies(path)
    return path


def rows(path: Path) -> dict[str, Any]:
    """tuner's rows, keyed by content: ids dropped, study ids as study names."""
    with sqlite3.connect(path) as con:
        con.row_factory = sqlite3.Row
        names = {r["id"]: r["name"] for r in con.execute("SELECT id, name FROM tuner_studies")}
        studies = {
            r["name"]: _without(r, "id", "updated_at")
            for r in con.execute("SELECT * FROM tuner_studies")
        }
        trials = {
            (names[r["study_id"]], r["number"]): _without(r, "id", "study_id")
            for r in con.execute("SELECT * FROM tuner_trials")
        }
        comparisons = [
            {**_without(r, "id", "study_id"), "study": names.get(r["study_id"])}
            for r in con.execute("SELECT * FROM tuner_comparisons ORDER BY id")
        ]
    con.close()
    return {"studies": studies, "trials": trials, "comparisons": comparisons}


def _without(row: sqlite3.Row, *keys: str) -> dict[str, Any]:
    return {k: row[k] for k in row.keys() if k not in keys}  # noqa: SIM118 (Row is no dict)


def optuna_trials(path: Path, name: str) -> list[tuple[Any, ...]]:
    storage = optuna.storages.RDBStorage(url(path), skip_table_creation=True)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        return [
            (t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs)
            for t in study.get_trials(deepcopy=False)
        ]
    finally:
        storage.engine.dispose()


def dump(path: Path) -> list[str]:
    """Every table, Optuna's included: to see that nothing at all changed."""
    with sqlite3.connect(path) as con:
        lines = list(con.iterdump())
    con.close()
    return lines


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def merge(source: Path, target: Path, **kwargs: Any) -> MergeSummary:
    return merge_databases(str(source), url(target), **kwargs)


def test_merge_into_an_empty_target_copies_everything(source: Path, tmp_path: Path) -> None:
    before = digest(source)
    target = tmp_path / "central.db"
    summary = merge(source, target)
    assert digest(source) == before  # read only
    by_name = {s.name: s for s in summary.studies}
    assert set(by_name) == {"a", "conf"}
    assert by_name["a"].new and by_name["a"].trials_added == 5 and by_name["a"].trials_kept == 0
    assert by_name["conf"].trials_added == 2 + 6  # the search, then 3 launches of 2 arms
    assert by_name["conf"].comparisons_added == 1
    assert (summary.comparisons_added, summary.comparisons_kept) == (1, 0)  # the claim
    assert by_name["a"].optuna.action == "copied" and by_name["a"].optuna.trials_added == 5
    assert rows(target) == rows(source)
    for name in ("a", "conf"):
        assert optuna_trials(target, name) == optuna_trials(source, name)
    repo = make_repo(url(target))
    assert [c.study_id for c in repo.list_comparisons("conf")] == [repo.get_study("conf").id]
    assert repo.get_study("conf").n_confirmation_launches == 6


def test_merge_beside_other_studies_keeps_them(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "central.db"
    run_studies(target, search="local")  # its own "conf" is another study: rename it
    ours = rows(target)
    summary = merge(source, target, rename_suffix="gpu")
    assert {(s.name, s.merged_as, s.new) for s in summary.studies} == {
        ("a", "a", True),
        ("conf", "conf-gpu", True),
    }
    merged, theirs = rows(target), rows(source)
    local = {k: v for k, v in merged["trials"].items() if k[0] in ("local", "conf")}
    assert local == ours["trials"]
    gpu = {
        ("conf" if study == "conf-gpu" else study, n): v
        for (study, n), v in merged["trials"].items()
        if study in ("a", "conf-gpu")
    }
    assert gpu == theirs["trials"]
    assert len(merged["trials"]) == len(ours["trials"]) + len(theirs["trials"])
    # Both claims: different times. The comparisons stay in creation order, each with its study.
    assert [c["study"] for c in merged["comparisons"]] == ["conf", None, "conf-gpu", None]
    assert merged["studies"]["conf-gpu"]["optuna_study_name"] == "conf-gpu"
    assert json.loads(merged["studies"]["conf-gpu"]["spec"])["name"] == "conf-gpu"
    assert optuna_trials(target, "conf-gpu") == optuna_trials(source, "conf")
    again = merge(source, target, rename_suffix="gpu")  # lands on conf-gpu: the same study
    assert not again.changed


def test_merging_twice_changes_nothing(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "central.db"
    merge(source, target)
    first = dump(target)
    again = merge(source, target)
    assert dump(target) == first
    assert not again.changed
    assert all(s.trials_added == 0 and not s.new for s in again.studies)
    assert {s.name: s.trials_kept for s in again.studies} == {"a": 5, "conf": 8}
    assert again.comparisons_kept == 1


def test_a_different_study_of_the_same_name_is_refused(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "central.db"
    make_repo(url(target))
    run_study(make_context(url(target), name="a", trials=2), FakeRunner(), make_repo(url(target)))
    before = dump(target)
    with pytest.raises(UsageError) as refused:
        merge(source, target)
    assert "'a'" in refused.value.message and "another study" in refused.value.message
    assert "--rename-suffix" in refused.value.hint
    assert dump(target) == before  # nothing written, not even the other study
    summary = merge(source, target, rename_suffix="h200")
    assert {s.merged_as for s in summary.studies} == {"a-h200", "conf"}
    assert optuna_trials(target, "a-h200") == optuna_trials(source, "a")
    assert len(optuna_trials(target, "a")) == 2  # the target's own, untouched


def test_a_study_merged_under_a_suffix_is_merged_there_again_whatever_the_suffix(
    source: Path, tmp_path: Path
) -> None:
    """Merged once as a-h200 beside the target's own "a", the same file merged again with
    another suffix (or none) copied every trial a second time, as a-b2."""
    target = tmp_path / "central.db"
    run_study(make_context(url(target), name="a", trials=2), FakeRunner(), make_repo(url(target)))
    merge(source, target, rename_suffix="h200")
    before = dump(target)
    for suffix in ("b2", None):
        summary = merge(source, target, rename_suffix=suffix)
        assert {s.merged_as for s in summary.studies} == {"a-h200", "conf"}
        assert not summary.changed and dump(target) == before
    with sqlite3.connect(target) as con:
        names = sorted(r[0] for r in con.execute("SELECT name FROM tuner_studies"))
    con.close()
    assert names == ["a", "a-h200", "conf"]


def test_a_copy_of_a_study_a_worker_runs_is_not_taken_over_by_the_target_s_worker(
    source: Path, tmp_path: Path
) -> None:
    """A snapshot of a study an API worker was running, merged into a store with a worker of
    its own: that worker saw the first worker's heartbeat stop, took the copy over and
    waited for good on its running trial. The copy holds no worker of another host."""
    from tuner.db.repository import QUEUE_WORKER
    from tuner.study import sharing

    running = copy_db(source, tmp_path / "running.db")
    owner = {"host": "gpu-host", "pid": 1, "boot": "x"}
    with sqlite3.connect(running) as con:
        (text,) = con.execute("SELECT spec FROM tuner_studies WHERE name = 'a'").fetchone()
        spec = json.loads(text)
        spec[QUEUE_WORKER] = owner
        con.execute(
            "UPDATE tuner_studies SET status = 'running', spec = ?, updated_at = 0 "
            "WHERE name = 'a'",
            (json.dumps(spec),),
        )
    con.close()
    target = tmp_path / "central.db"
    merge(running, target)
    repo = make_repo(url(target))
    assert QUEUE_WORKER not in (repo.get_study("a").spec or {})  # type: ignore[union-attr]
    assert repo.take_over_study(sharing.owner_gone, {"host": "central", "pid": 2}) is None


def test_a_study_that_went_on_in_two_places_is_refused(source: Path, tmp_path: Path) -> None:
    target = copy_db(source, tmp_path / "central.db")
    with sqlite3.connect(target) as con:
        con.execute(
            "UPDATE tuner_trials SET score = score + 1 WHERE number = 1 AND score IS NOT NULL"
        )
    con.close()
    with pytest.raises(UsageError, match="finished differently") as refused:
        merge(source, target)
    assert "trials 1 " in refused.value.message
    assert merge(source, target, rename_suffix="b").studies[0].merged_as == "a-b"


@pytest.mark.parametrize("suffix", ["../<x> y", "a/b", ".hidden", "x\ny", "\x00"])
def test_a_rename_suffix_follows_the_rule_for_names(
    source: Path, tmp_path: Path, suffix: str
) -> None:
    """The suffix makes a study's name: tuner's one rule for names (tuner.db.names) holds."""
    target = tmp_path / "central.db"
    make_repo(url(target))
    before = dump(target)
    with pytest.raises(UsageError, match="is not a usable suffix") as refused:
        merge(source, target, rename_suffix=suffix)
    assert "--rename-suffix h200" in refused.value.hint
    assert dump(target) == before
    assert merge(source, target, rename_suffix="--h200.b_1").changed  # dashes in front dropped


def test_a_suffix_too_long_says_so_and_a_conflict_names_its_study(
    source: Path, tmp_path: Path
) -> None:
    """A 300-character suffix was refused as "must be a letter, digit or '_'"."""
    target = tmp_path / "central.db"
    with pytest.raises(UsageError, match="of 300 characters leaves no room"):
        merge(source, target, rename_suffix="a" * 300)
    other = tmp_path / "other.db"
    run_studies(other)  # the same names, other studies
    merge(source, target)
    with pytest.raises(UsageError) as conflict:
        merge(other, target)
    assert conflict.value.message.startswith("cannot merge 2 studies: study 'a': ")


class SnapshotRunner:
    """The fake runner, copying the study's database while its ``at``-th launch runs: the copy
    a user takes of a study still running (trial RUNNING, study "running")."""

    def __init__(self, db: Path, copy: Path, at: int) -> None:
        self.db, self.copy, self.at, self.calls = db, copy, at, 0
        self.fake = FakeRunner()

    def run(
        self,
        config: ServingConfig,
        workload: Workload,
        *,
        slo: Any = None,
        on_phase: PhaseCallback | None = None,
        **kw: Any,
    ) -> TrialResult:
        self.calls += 1
        if self.calls == self.at:
            copy_db(self.db, self.copy)
        return self.fake.run(config, workload, slo=slo, on_phase=on_phase, **kw)


def test_the_finished_trial_replaces_an_interrupted_one(tmp_path: Path) -> None:
    source, target = tmp_path / "gpu-host.db", tmp_path / "central.db"
    runner = SnapshotRunner(source, target, at=3)
    run_study(make_context(url(source), name="a", trials=5), runner, make_repo(url(source)))
    taken = make_repo(url(target))
    assert taken.get_study("a").status == "running"
    assert taken.mark_running_as_interrupted("a") == 1  # as `--resume` would
    n_copied = taken.count_trials("a")
    summary = merge(source, target).studies[0]
    assert (summary.trials_replaced, summary.trials_kept) == (1, n_copied - 1)
    assert summary.trials_added == 5 - n_copied and summary.updated  # now finished
    assert (summary.optuna.trials_finished, summary.optuna.trials_added) == (1, 5 - n_copied)
    assert rows(target) == rows(source)
    assert optuna_trials(target, "a") == optuna_trials(source, "a")
    assert not any(t[1] is optuna.trial.TrialState.RUNNING for t in optuna_trials(target, "a"))
    assert taken.get_study("a").status == "finished"


def test_an_interrupted_trial_replaces_the_running_one_of_an_earlier_copy(
    tmp_path: Path,
) -> None:
    """A copy taken while trial N ran, merged after the GPU host was killed and resumed (trial
    N interrupted there, the study finished), kept trial N RUNNING in tuner's table while
    Optuna's was FAIL; merging again said "nothing to do"."""
    source, target = tmp_path / "gpu-host.db", tmp_path / "central.db"
    runner = SnapshotRunner(source, target, at=3)
    run_study(make_context(url(source), name="a", trials=5), runner, make_repo(url(source)))
    with sqlite3.connect(target) as con:
        (number,) = con.execute(
            "SELECT number FROM tuner_trials WHERE status = 'running'"
        ).fetchone()
    con.close()
    with sqlite3.connect(source) as con:  # as kill + `--resume` leave it on the GPU host
        con.execute(
            "UPDATE tuner_trials SET status = 'failed', failure_class = 'interrupted', "
            "score = NULL WHERE number = ?",
            (number,),
        )
        con.execute("UPDATE trials SET state = 'FAIL' WHERE number = ?", (number,))
        con.execute(
            "DELETE FROM trial_values WHERE trial_id IN (SELECT trial_id FROM trials "
            "WHERE number = ?)",
            (number,),
        )
    con.close()
    summary = merge(source, target).studies[0]
    assert summary.trials_replaced == 1 and summary.optuna.trials_finished == 1
    assert rows(target) == rows(source)
    assert optuna_trials(target, "a") == optuna_trials(source, "a")
    assert not merge(source, target).changed


def test_dry_run_writes_nothing(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "central.db"
    dry = merge(source, target, dry_run=True)
    assert not target.exists()
    real = merge(source, target)
    assert {**dry.to_json(), "dry_run": False} == real.to_json()
    before = dump(target)
    assert not merge(source, target, dry_run=True).changed
    assert dump(target) == before


def test_a_dry_run_writes_neither_an_empty_file_nor_a_rollback_journal_target(
    source: Path, tmp_path: Path
) -> None:
    """The dry run opened the target with tuner's engine: a 0-byte file grew into a 4 KiB
    database in WAL mode, and a tuner database in rollback-journal mode was switched to WAL."""
    empty = tmp_path / "empty.db"
    empty.touch()
    assert merge(source, empty, dry_run=True).changed
    assert empty.stat().st_size == 0
    journal = copy_db(source, tmp_path / "journal.db")
    with sqlite3.connect(journal) as con:
        con.execute("PRAGMA journal_mode = DELETE")
    con.close()
    before = digest(journal)
    assert not merge(source, journal, dry_run=True).changed
    assert digest(journal) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "journal.db"]
    assert merge(source, empty).changed  # the merge itself takes the empty file


def test_tuner_tables_without_a_revision_are_refused_by_dry_run_merge_and_upgrade(
    source: Path, tmp_path: Path
) -> None:
    """The dry run said the merge would work; the merge and `tuner db upgrade` then failed on
    "table tuner_studies already exists", with the hint to check that the database is
    reachable."""
    target = tmp_path / "central.db"
    engine = make_engine(url(target))
    Base.metadata.create_all(engine)  # tuner's tables, as a hand-made or half-deleted store
    engine.dispose()
    before = digest(target)
    for attempt in (
        lambda: merge(source, target, dry_run=True),
        lambda: merge(source, target),
        lambda: migrate.upgrade(url(target)),
    ):
        with pytest.raises(
            StorageError, match=r"has tuner tables \[.*\] but no revision"
        ) as refused:
            attempt()
        assert "move them out of the way" in refused.value.hint
    assert digest(target) == before


def test_a_source_written_while_the_merge_reads_it_is_read_as_one_moment(
    source: Path, tmp_path: Path
) -> None:
    """A study and its comparison written to the source after the merge had read its studies,
    before it read the comparisons: the merge failed with a KeyError traceback."""
    live = copy_db(source, tmp_path / "live.db")
    writer = sqlite3.connect(live)  # held open: its -wal says "in use", read with locking
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("SELECT count(*) FROM tuner_studies").fetchone()

    def write_a_study(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("SELECT tuner_studies.id") and not written:
            written.append(_add_study_with_comparison(writer, "late"))

    written: list[int] = []
    event.listen(Engine, "after_cursor_execute", write_a_study)
    try:
        summary = merge(live, tmp_path / "central.db")
    finally:
        event.remove(Engine, "after_cursor_execute", write_a_study)
        writer.close()
    assert written and {s.name for s in summary.studies} == {"a", "conf"}
    later = merge(live, tmp_path / "central.db")  # the next merge brings it
    assert [(s.name, s.comparisons_added) for s in later.studies if s.new] == [("late", 1)]


def _add_study_with_comparison(con: sqlite3.Connection, name: str) -> int:
    """A copy of study "conf" named ``name``, created later, with a copy of its comparison."""
    columns = [r[1] for r in con.execute("PRAGMA table_info(tuner_studies)") if r[1] != "id"]
    picked = [
        "?"
        if c in ("name", "optuna_study_name")
        else ("created_at + 100" if c == "created_at" else c)
        for c in columns
    ]
    cursor = con.execute(
        f"INSERT INTO tuner_studies ({', '.join(columns)}) SELECT {', '.join(picked)} "
        "FROM tuner_studies WHERE name = 'conf'",
        [name] * picked.count("?"),
    )
    study_id = cursor.lastrowid
    columns = [r[1] for r in con.execute("PRAGMA table_info(tuner_comparisons)") if r[1] != "id"]
    picked = [
        "?" if c == "study_id" else ("created_at + 100" if c == "created_at" else c)
        for c in columns
    ]
    con.execute(
        f"INSERT INTO tuner_comparisons ({', '.join(columns)}) SELECT {', '.join(picked)} "
        "FROM tuner_comparisons WHERE study_id IS NOT NULL",
        (study_id,),
    )
    con.commit()
    return int(study_id or 0)


def test_two_merges_at_once_copy_each_comparison_and_launch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both merges planned before either wrote: each added the claim and the launch summary,
    and the target held them twice."""
    target = tmp_path / "central.db"
    summaries = merge_twice_at_once(tmp_path / "gpu-host.db", url(target), monkeypatch)
    assert sorted(s.comparisons_added for s in summaries) == [0, 1]
    assert sorted(s.launches_added for s in summaries) == [0, 1]
    assert len(rows(target)["comparisons"]) == 1 and len(launches(target)) == 1


def merge_twice_at_once(
    source: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> list[MergeSummary]:
    """Merge a new ``source`` (one claim, one launch summary) into ``target`` from two threads
    at once, each pausing after it planned until the other has planned too (or 2 s passed)."""
    store_claim(make_repo(url(source)))
    add_compare_launch(source)
    migrate.upgrade(target)
    both_planned = threading.Barrier(2)
    plan = merge_module._plan_merge

    def plan_then_wait(*args: Any) -> Any:
        planned = plan(*args)
        # Once merges plan one at a time, the other comes only after this one committed.
        with contextlib.suppress(threading.BrokenBarrierError):
            both_planned.wait(timeout=2)
        return planned

    monkeypatch.setattr(merge_module, "_plan_merge", plan_then_wait)
    # Alembic keeps its context in module globals: one migration at a time in one process
    # (two processes each have their own).
    one_at_a_time, upgrade = threading.Lock(), migrate.upgrade

    def upgrade_alone(*args: Any) -> None:
        with one_at_a_time:
            upgrade(*args)

    monkeypatch.setattr(migrate, "upgrade", upgrade_alone)
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda _: merge_databases(str(source), target), range(2)))


def test_every_older_revision_is_read_as_a_source() -> None:
    """merge reads an older source as it is (it never migrates one): a migration that changes
    the merged tables must teach it to read the old ones, and list the revision here."""
    assert migrate.known_revisions() - {migrate.head_revision()} <= SAME_MERGED_COLUMNS


def test_real_h200_results_merge_into_one_store(tmp_path: Path) -> None:
    copies = [
        shutil.copy(H200 / f, tmp_path / f)
        for f in ("tuner-gpu.db", "claims-h200.db", "emulated-a10g.db")
    ]
    target = tmp_path / "central.db"
    for path in copies:
        merge(Path(path), target)
    repo = make_repo(url(target))
    chat = repo.get_study(CHAT)
    assert (chat.n_trials, chat.n_confirmation_launches) == (20, 6)
    assert len(repo.list_comparisons(CHAT)) == 1
    claims = [c for c in repo.list_comparisons() if c.study_id is None]
    n_claims = len(rows(tmp_path / "claims-h200.db")["comparisons"])
    assert n_claims >= 5 and len(claims) == n_claims
    assert all(c.results["kind"] == "claim" for c in claims)
    assert [s.n_trials for s in repo.list_studies() if s.emulated] == [3]
    assert len(optuna_trials(target, CHAT)) == 20
    assert not any(merge(Path(p), target).changed for p in copies)
    assert [digest(Path(p)) for p in copies] == [
        digest(H200 / Path(p).name) for p in copies
    ]  # read without a change, and no -wal / -shm left beside them
    assert sorted(p.name for p in tmp_path.iterdir() if "gpu" in p.name) == ["tuner-gpu.db"]


def test_sources_at_every_older_revision_merge(tmp_path: Path) -> None:
    """The committed results span revisions 0001 to 0003; 0002 (per-request records, which a
    merge does not copy) was refused as "upgrade it first", though 0001, older still, merged."""
    results = Path(__file__).parents[2] / "studies" / "results"
    target = tmp_path / "central.db"
    names: set[str] = set()
    for path in sorted(results.glob("*/*.db")):
        source = Path(shutil.copy(path, tmp_path / f"{path.parent.name}-{path.name}"))
        merge(source, target)
        assert digest(source) == digest(path)  # the source is read, never migrated
        names |= set(rows(source)["studies"])
    assert len(names) > 5
    assert {s.name for s in make_repo(url(target)).list_studies()} == names


def test_a_damaged_source_or_target_is_refused_before_anything_is_written(
    source: Path, tmp_path: Path
) -> None:
    """`tuner db upgrade` refused a damaged file; a merge read and wrote it (exit 0)."""
    bad_source = damage_sqlite(
        index_of="tuner_trials", path=copy_db(source, tmp_path / "bad-source.db")
    )
    target = tmp_path / "central.db"
    with pytest.raises(StorageError, match=r"source database .*bad-source\.db is damaged"):
        merge(bad_source, target)
    assert not target.exists()
    bad_target = damage_sqlite(
        index_of="tuner_trials", path=copy_db(source, tmp_path / "bad-target.db")
    )
    before = digest(bad_target)
    other = tmp_path / "other.db"
    run_studies(other, search="b")
    for dry_run in (True, False):
        with pytest.raises(StorageError, match=r"bad-target\.db is damaged"):
            merge(other, bad_target, dry_run=dry_run)
    assert digest(bad_target) == before


def test_a_target_at_an_older_revision_is_planned_by_a_dry_run_as_the_merge_does_it(
    source: Path, tmp_path: Path
) -> None:
    """The dry run refused a rev-0002 target ("run tuner db upgrade") that the merge itself
    migrates and fills; both now say the same, the migration included."""
    old = Path(__file__).parents[2] / "studies" / "results" / "ernie-0.3b-h200-heavy"
    target = Path(shutil.copy(old / "heavy-h200.db", tmp_path / "central.db"))
    before = digest(target)
    dry = merge(source, target, dry_run=True)
    assert digest(target) == before and dry.upgraded_from == "0002"
    real = merge(source, target)
    assert real.upgraded_from == "0002"
    assert {**dry.to_json(), "dry_run": False} == real.to_json()
    assert merge(source, target).upgraded_from is None  # at the head now


def test_a_source_at_an_unknown_revision_is_refused(source: Path, tmp_path: Path) -> None:
    newer = copy_db(source, tmp_path / "newer.db")
    with sqlite3.connect(newer) as con:
        con.execute("UPDATE tuner_alembic_version SET version_num = '9999_later'")
    con.close()
    with pytest.raises(StorageError, match="unknown to this tuner"):
        merge(newer, tmp_path / "central.db")
    with pytest.raises(UsageError, match="same database"):
        merge(source, source)


def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["tuner", "db", "merge", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, " ".join(err.split())


@pytest.fixture()
def no_env_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    yield


def test_cli_bad_sources_exit_2_and_say_why(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_env_db: None,
) -> None:
    target = tmp_path / "central.db"
    text = tmp_path / "notes.db"
    text.write_text("not a database, but long enough to be read as one " * 100)
    empty = tmp_path / "empty.db"
    with sqlite3.connect(empty) as con:
        con.execute("CREATE TABLE other (x)")
    con.close()
    cases = {
        str(tmp_path / "missing.db"): "does not exist",
        str(text): "cannot read source database",
        str(empty): "has no tuner tables",
    }
    for path, words in cases.items():
        code, _out, err = cli(monkeypatch, capsys, path, "--storage", url(target))
        assert code == 2, err
        assert words in err and "hint:" in err
    assert not target.exists()


def test_cli_source_url_that_cannot_be_used_hints_at_the_source(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_env_db: None,
) -> None:
    """The bad URL is the SOURCE argument: the hint is about it, not about --storage."""
    target = tmp_path / "central.db"
    code, _out, err = cli(monkeypatch, capsys, "bogus://x", "--storage", url(target))
    assert code == 3 and "cannot use database bogus://x" in err
    assert "pass as SOURCE" in err and "--storage" not in err
    assert not target.exists()


def test_cli_source_that_is_not_a_sqlite_file_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_env_db: None,
) -> None:
    """As `tuner db current` and the other commands say it of --storage."""
    text = tmp_path / "notes.db"
    text.write_text("hello\n")
    code, _out, err = cli(monkeypatch, capsys, str(text), "--storage", url(tmp_path / "t.db"))
    assert code == 2 and f"source database {text}: it is not a SQLite database" in err


def test_cli_json_summary(
    source: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TUNER_DB_URL", url(tmp_path / "central.db"))
    code, out, _err = cli(monkeypatch, capsys, str(source), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["changed"] and {s["name"] for s in summary["studies"]} == {"a", "conf"}
    code, out, _err = cli(monkeypatch, capsys, str(source))
    assert code == 0 and "nothing to do" in " ".join(out.split())
    assert "5 trials added" not in out and "(5 already there)" in " ".join(out.split())


def launches(path: Path) -> list[dict[str, Any]]:
    """The launch summaries (tuner_launches), ids dropped, in id order."""
    with sqlite3.connect(path) as con:
        con.row_factory = sqlite3.Row
        found = [_without(r, "id") for r in con.execute("SELECT * FROM tuner_launches ORDER BY id")]
    con.close()
    return found


def add_compare_launch(path: Path) -> None:
    """A launch of ``tuner compare`` on a pinned key: no study, its own run tag."""
    make_repo(url(path)).add_launch(
        key={
            "host": "gpu-host",
            "gpu": "NVIDIA H200",
            "vllm_version": "0.26.0",
            "model": "ernie-0.3b",
            "workload": "throughput-256",
            "windows": 3,
            "placement": "pinned",
        },
        config=ServingConfig(),
        is_defaults=True,
        source="compare",
        run="compare:2026-12-01",
        values={"output_throughput": [9.5, 9.6, 9.4]},
        wall_s=120.0,
        startup_s=65.0,
    )


def test_launch_summaries_are_copied_once_with_key_placement_and_run(tmp_path: Path) -> None:
    source = tmp_path / "gpu-host.db"
    run_studies(source)
    add_compare_launch(source)
    theirs = launches(source)
    assert {r["run"] for r in theirs} == {"study:conf", "compare:2026-12-01"}
    assert sum(r["run"] == "study:conf" for r in theirs) == 6  # the confirmation's launches
    target = tmp_path / "central.db"
    summary = merge(source, target)
    assert (summary.launches_added, summary.launches_kept) == (len(theirs), 0)
    assert launches(target) == theirs  # every column: key, placement, run, values, times
    pinned = [r for r in launches(target) if r["placement"] == "pinned"]
    assert [(r["host"], r["windows"], r["wall_s"]) for r in pinned] == [("gpu-host", 3, 120.0)]
    again = merge(source, target)
    assert (again.launches_added, again.launches_kept) == (0, len(theirs))
    assert not again.changed and launches(target) == theirs
    add_compare_launch(source)  # a later copy of the source: only the new launch comes
    later = merge(source, target)
    assert (later.launches_added, later.launches_kept) == (1, len(theirs))
    assert later.changed and launches(target) == launches(source)


def test_a_renamed_study_takes_its_launches_under_the_new_run_tag(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "central.db"
    run_studies(target, search="local")  # its own "conf" with its own 6 launches
    ours = launches(target)
    summary = merge(source, target, rename_suffix="gpu")
    assert summary.launches_added == len(launches(source)) == 6
    merged = launches(target)
    assert merged[: len(ours)] == ours
    renamed = merged[len(ours) :]
    assert {r["run"] for r in renamed} == {"study:conf-gpu"}
    assert [{**r, "run": "study:conf"} for r in renamed] == launches(source)
    assert merge(source, target, rename_suffix="gpu").launches_added == 0


def test_cli_names_the_launches_it_copies(source: Path, tmp_path: Path) -> None:
    from tuner.cli.db import describe

    target = tmp_path / "central.db"
    lines = describe(merge(source, target))
    assert "noise-profile launches: 6 launch records added" in lines
    again = describe(merge(source, target))
    assert "noise-profile launches: 0 launch records added (6 already there)" in again


class SnapshotsRunner(SnapshotRunner):
    """The fake runner, copying the study's database while each of the ``at`` launches runs."""

    def __init__(self, db: Path, copies: dict[int, Path]) -> None:
        super().__init__(db, db, 0)
        self.copies = copies

    def run(self, config: ServingConfig, workload: Workload, **kw: Any) -> TrialResult:
        if self.calls + 1 in self.copies:
            copy_db(self.db, self.copies[self.calls + 1])
        return super().run(config, workload, **kw)


def _snapshots(tmp_path: Path, name: str = "a") -> tuple[Path, Path, Path]:
    """An early and a later copy of study ``name`` while it runs, and the finished database."""
    done, early, later = (tmp_path / f for f in ("done.db", "early.db", "later.db"))
    runner = SnapshotsRunner(done, {2: early, 4: later})
    # Five configurations queued: a configuration drawn twice is launched once.
    queued = [{"max_num_seqs": 1}, {"max_num_seqs": 64}, {"gpu_memory_utilization": 0.5}]
    queued.append({"max_num_seqs": 1, "gpu_memory_utilization": 0.5})
    ctx = make_context(url(done), name=name, trials=5, enqueue=queued)
    run_study(ctx, runner, make_repo(url(done)))
    return early, later, done


def test_copies_merged_in_order_end_with_the_last_ones_status(tmp_path: Path) -> None:
    """A merge that wrote to a study moved its updated_at to the merge's clock, so a copy
    written later, merged after it, read as older: its status ("finished") was not taken."""
    early, later, done = _snapshots(tmp_path)
    target = tmp_path / "central.db"
    for copy in (early, later, done):
        merge(copy, target)
    study = make_repo(url(target)).get_study("a")
    assert study is not None and study.status == "finished"
    assert rows(target) == rows(done)


def test_a_renamed_study_keeps_its_name_in_its_spec_when_a_later_copy_refreshes_it(
    tmp_path: Path,
) -> None:
    early, _later, done = _snapshots(tmp_path)
    target = tmp_path / "central.db"
    run_studies(target)  # another study "a" in the target
    merge(early, target, rename_suffix="b")
    assert merge(done, target, rename_suffix="b").studies[0].updated
    with sqlite3.connect(target) as con:
        (spec,) = con.execute("SELECT spec FROM tuner_studies WHERE name = 'a-b'").fetchone()
    con.close()
    assert json.loads(spec)["name"] == "a-b"


def test_a_refused_merge_leaves_an_older_target_unmigrated(source: Path, tmp_path: Path) -> None:
    """The target was migrated before the conflict was found: a tuner of its revision could
    no longer open it, though nothing was merged."""
    old = Path(__file__).parents[2] / "studies" / "results" / "ernie-0.3b-h200-heavy"
    target = Path(shutil.copy(old / "heavy-h200.db", tmp_path / "central.db"))
    other = copy_db(target, tmp_path / "other.db")
    migrate.upgrade(url(other))
    with sqlite3.connect(other) as con:
        con.execute("UPDATE tuner_studies SET created_at = created_at + 5")
    con.close()
    before = digest(target)
    with pytest.raises(UsageError, match="is another study"):
        merge(other, target)
    assert digest(target) == before and migrate.current_revision(url(target)) == "0002"


def test_a_target_at_an_unknown_revision_is_refused_with_the_upgrade_hint(
    source: Path, tmp_path: Path
) -> None:
    target = copy_db(source, tmp_path / "central.db")
    with sqlite3.connect(target) as con:
        con.execute("UPDATE tuner_alembic_version SET version_num = '9999_later'")
    con.close()
    for attempt in (lambda: merge(source, target), lambda: migrate.upgrade(url(target))):
        with pytest.raises(StorageError, match="does not know") as refused:
            attempt()
        assert refused.value.hint == "it was migrated by a newer tuner: upgrade tuner"


def _requests(path: Path) -> dict[tuple[str, int], Any]:
    """Per-request records by (study, trial number)."""
    with sqlite3.connect(path) as con:
        found = {
            (name, number): json.loads(windows)
            for name, number, windows in con.execute(
                "SELECT s.name, t.number, r.windows FROM tuner_trial_requests r "
                "JOIN tuner_trials t ON t.id = r.trial_id JOIN tuner_studies s ON s.id = t.study_id"
            )
        }
    con.close()
    return found


def test_per_request_records_come_with_their_trials(tmp_path: Path) -> None:
    """A merge copied trials without their per-request records, and `tuner export --format
    vllm-bench` then found none in the merged store."""
    h100 = Path(__file__).parents[2] / "studies" / "results" / "plan-h100" / "2026-12-05"
    real = Path(shutil.copy(h100 / "tuner-decode-h100.db", tmp_path / "h100.db"))
    migrate.upgrade(url(real))
    (key,) = _requests(real)
    early = copy_db(real, tmp_path / "early.db")  # a copy taken while trial 0 still ran
    with sqlite3.connect(early) as con:
        con.execute("DELETE FROM tuner_trial_requests")
        con.execute("UPDATE tuner_trials SET status = 'running' WHERE number = ?", (key[1],))
    con.close()
    added, replaced = tmp_path / "added.db", tmp_path / "replaced.db"
    merge(real, added)
    merge(early, replaced)
    assert merge(real, replaced).studies[0].trials_replaced == 1
    assert _requests(added) == _requests(replaced) == _requests(real)
    with sqlite3.connect(added) as con:  # a store an older tuner merged: trials, no records
        con.execute("DELETE FROM tuner_trial_requests")
    con.close()
    merge(real, added)
    assert _requests(added) == _requests(real)


def test_a_copy_that_went_on_in_two_places_is_merged_into_its_renamed_copy_again(
    source: Path, tmp_path: Path
) -> None:
    """The target holds the study under its own name, continued differently there: the first
    merge renames the source's copy; a second merge, under another suffix, copied it again."""
    target = copy_db(source, tmp_path / "central.db")
    with sqlite3.connect(target) as con:
        con.execute(
            "UPDATE tuner_trials SET score = score + 1 WHERE number = 1 AND score IS NOT NULL"
        )
    con.close()
    assert merge(source, target, rename_suffix="b").studies[0].merged_as == "a-b"
    again = merge(source, target, rename_suffix="c")
    assert again.studies[0].merged_as == "a-b" and not again.changed
