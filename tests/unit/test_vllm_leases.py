"""Lease files and the safety rules of reap_orphans that need no child process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from tuner.runner.leases import (
    SOCKETS_PREFIX,
    Lease,
    read_lease,
    reap_orphans,
    remove_sockets_dir,
    sockets_dir,
    write_lease,
)
from tuner.telemetry import since_boot

NO_SUCH_PID = 2**22 + 7  # above Linux's largest pid_max: no process can have it


def _lease(**changes: object) -> Lease:
    fields: dict[str, object] = {
        "pgid": NO_SUCH_PID,
        "pid": NO_SUCH_PID,
        "served_model_name": "trial-1",
        "argv": ("/py", "-m", "vllm.entrypoints.openai.api_server"),
        "started_at": 1.0,
        "start": 1.0,
        "owner_pid": NO_SUCH_PID,
        "owner_start": 1.0,
    }
    fields.update(changes)
    return Lease(**fields)  # type: ignore[arg-type]


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    lease = _lease(pid=123, pgid=123)
    path = write_lease(tmp_path / "leases", lease)
    assert path.name == "server-123.json"
    assert read_lease(path) == lease
    assert not list((tmp_path / "leases").glob("*.tmp"))


def test_a_lease_of_an_older_tuner_reads_with_its_starts_taken_back_to_the_boot(
    tmp_path: Path,
) -> None:
    # Older tuners wrote psutil's wall-clock start times ("create_time"); a resume after an
    # upgrade still finds, and can end, the server such a tuner left.
    me = psutil.Process()
    record = asdict(_lease(pid=me.pid, pgid=me.pid))
    del record["start"], record["owner_start"]
    record.update(create_time=me.create_time(), owner_create_time=me.create_time() - 5.0)
    path = tmp_path / f"server-{me.pid}.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    lease = read_lease(path)
    assert lease is not None
    assert abs(lease.start - since_boot(me.pid)) <= 0.05
    assert abs(lease.owner_start - (since_boot(me.pid) - 5.0)) <= 0.05


def test_a_lease_carries_the_wall_clock_starts_older_tuners_read(tmp_path: Path) -> None:
    me = psutil.Process()
    lease = _lease(pid=me.pid, start=since_boot(me.pid), owner_start=since_boot(me.pid) - 5.0)
    written = json.loads(write_lease(tmp_path, lease).read_text(encoding="utf-8"))
    assert abs(written["create_time"] - me.create_time()) <= 0.05
    assert abs(written["owner_create_time"] - (me.create_time() - 5.0)) <= 0.05


def test_unreadable_lease_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "server-1.json"
    path.write_text("{not json", encoding="utf-8")
    assert read_lease(path) is None
    path.write_text('{"pid": 1}', encoding="utf-8")
    assert read_lease(path) is None


def test_missing_directory_reaps_nothing(tmp_path: Path) -> None:
    assert reap_orphans(tmp_path / "absent") == []


def test_stale_and_broken_leases_are_removed(tmp_path: Path) -> None:
    write_lease(tmp_path, _lease())
    (tmp_path / "server-9.json").write_text("garbage", encoding="utf-8")
    assert reap_orphans(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_recycled_pid_is_never_killed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The leader's pid now belongs to this very test process (another start time, another
    # command line): it must survive, and the lease goes, saying why.
    write_lease(tmp_path, _lease(pid=os.getpid(), pgid=os.getpid(), start=1.0))
    assert reap_orphans(tmp_path) == []
    assert psutil.Process().is_running()
    assert list(tmp_path.iterdir()) == []
    assert f"pid {os.getpid()} is no longer the server tuner started" in caplog.text


def test_own_process_group_is_never_signalled(tmp_path: Path) -> None:
    me = psutil.Process()
    write_lease(
        tmp_path,
        _lease(
            pid=os.getpid(),
            pgid=os.getpgrp(),
            start=since_boot(me.pid),
            argv=tuple(me.cmdline()),
        ),
    )
    assert reap_orphans(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_lease_of_a_live_owner_is_kept(tmp_path: Path) -> None:
    me = psutil.Process()
    path = write_lease(tmp_path, _lease(owner_pid=me.pid, owner_start=since_boot(me.pid)))
    assert reap_orphans(tmp_path) == []
    assert path.exists()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (pytest's are too long for a socket's)."""
    path = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    yield path
    shutil.rmtree(path)


def test_a_servers_sockets_directory_is_its_own_unless_named_or_too_long(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp_path = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = sockets_dir({})
    assert Path(made).parent == tmp_path and Path(made).name.startswith(SOCKETS_PREFIX)
    remove_sockets_dir(made)
    assert not Path(made).exists()
    assert sockets_dir({"VLLM_RPC_BASE_PATH": "/run/mine"}) == ""  # the user's: left to vLLM
    # A socket's path must fit 107 bytes: where the directory would push vLLM's past that,
    # vLLM keeps its default.
    deep = tmp_path / ("d" * (100 - len(str(tmp_path))))
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert sockets_dir({}) == "" and list(deep.iterdir()) == []
    # Only a directory of its own making is removed, and in it only socket files: a path
    # read from a lease file may have been edited.
    other = tmp_path / "other"
    other.mkdir()
    remove_sockets_dir(str(other))
    assert other.exists()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kept = Path(sockets_dir({}))
    assert kept.parent == tmp_path
    (kept / "results.json").write_text("{}")
    bound = socket.socket(socket.AF_UNIX)
    bound.bind(str(kept / "sock"))
    bound.close()
    remove_sockets_dir(str(kept))
    assert sorted(p.name for p in kept.iterdir()) == ["results.json"]
    link = tmp_path / f"{SOCKETS_PREFIX}link"
    link.symlink_to(kept)
    remove_sockets_dir(str(link))
    assert link.exists() and (kept / "results.json").exists()
    monkeypatch.chdir(tmp_path)
    remove_sockets_dir(kept.name)  # relative: not resolved against wherever the reaper runs
    assert kept.exists()
