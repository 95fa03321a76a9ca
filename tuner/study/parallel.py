"""``tuner run --parallel N``: one study, one worker process per GPU of this host.

The study is set up once here (created, its baseline queued; or taken over on ``--resume``),
then N ``tuner worker --study NAME`` processes join it, each with ``CUDA_VISIBLE_DEVICES`` set
to its own GPU's UUID, so that each worker's servers run on, and its memory is read from, that
GPU alone. Workers meet only in the database (:mod:`tuner.study.sharing`). Their output is passed
through line by line, each line headed by the worker's number.

The workers die with this process (Linux: a parent-death signal), and a Ctrl-C or SIGTERM here
reaches each of them as a SIGTERM, which stops its trial and records it as interrupted. Once
they have all exited, a study they left running (a worker killed before it could record it, or
every worker dead) is recorded interrupted here (:func:`settle`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from tuner.db import Repository, StudyStatus, with_storage
from tuner.errors import UsageError

_PR_SET_PDEATHSIG = 1
# Seconds the workers have, in all, to stop after their SIGTERM (a server's stop: up to 10 s of
# grace and 5 s more after its SIGKILL, tuner.runner.server.VllmServer.stop); then the stacks
# of one still running are asked for and given _STACKS_S to be written.
STOP_GRACE_S = 60.0
_STACKS_S = 2.0


@dataclass(frozen=True)
class Seat:
    """Where one worker runs: its GPU (None on CPU) and the label its lines carry."""

    label: str
    gpu_uuid: str | None = None


def refuse_sqlite(storage_url: str, what: str, study: str = "NAME") -> None:
    """Several workers on one SQLite file: refused, as Optuna's documentation advises.
    ``what`` is the option asking for them (``--parallel 2``, ``tuner worker --study``)."""
    if storage_url.startswith("sqlite"):
        alone = "drop --parallel" if what.startswith("--parallel") else "one process runs it"
        raise UsageError(
            f"{what} needs a database server that several processes can write at once; "
            f"{storage_url} is SQLite, whose file locks make parallel workers fail",
            hint="pass --storage postgresql+psycopg://USER:PASS@HOST/DB (or set TUNER_DB_URL); "
            f"on SQLite one worker runs a study: {alone} "
            f"(`{with_storage(f'tuner run --study {shlex.quote(study)} --resume', storage_url)}` "
            "continues a stopped one)",
        )


def seats(n: int, gpu_uuids: Sequence[str] | None) -> list[Seat]:
    """N seats: one per GPU when ``gpu_uuids`` is given (at least N of them), else CPU ones."""
    if gpu_uuids is None:
        return [Seat(f"worker {i}") for i in range(n)]
    if len(gpu_uuids) < n:
        raise UsageError(
            f"--parallel {n} needs {n} GPUs of the study's kind, and this host shows "
            f"{len(gpu_uuids)}",
            hint=f"use --parallel {max(len(gpu_uuids), 1)}, or join from another host with "
            "`tuner worker --study NAME`",
        )
    return [Seat(f"worker {i} {uuid[:12]}", uuid) for i, uuid in enumerate(gpu_uuids[:n])]


def worker_command(study: str, vllm_python: str | None) -> list[str]:
    """The workers' argv; their storage URL goes in ``TUNER_DB_URL`` (:func:`run_workers`), not
    in the argv, where `ps` would show its password to every user of the host."""
    cmd = [sys.executable, "-m", "tuner", "worker", "--study", study]
    if vllm_python:
        cmd += ["--vllm-python", vllm_python]
    return cmd


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


# The --storage the user gave the run that started the workers: their hints name it (the URL
# they were given in TUNER_DB_URL is not what the user typed, and may not be given again).
HINT_STORAGE = "TUNER_HINT_STORAGE"


def run_workers(
    command: Sequence[str],
    places: Sequence[Seat],
    say: Callable[[str], None],
    storage_url: str,
    storage: str | None = None,
) -> list[int]:
    """Run one ``command`` per seat until all end; their exit codes, in seat order.
    ``storage``: the user's ``--storage``, for the workers' hints (:data:`HINT_STORAGE`)."""
    procs: list[subprocess.Popen[str]] = []
    pumps: list[threading.Thread] = []
    try:
        for seat in places:
            env = {**os.environ, "TUNER_DB_URL": storage_url}
            env.pop(HINT_STORAGE, None)
            if storage:
                env[HINT_STORAGE] = storage
            if seat.gpu_uuid is not None:
                env["CUDA_VISIBLE_DEVICES"] = seat.gpu_uuid
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            proc = subprocess.Popen(
                list(command),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                start_new_session=True,  # a Ctrl-C is passed on as one SIGTERM, below
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            procs.append(proc)
            assert proc.stdout is not None
            pump = threading.Thread(target=_pump, args=(proc.stdout, seat.label, say), daemon=True)
            pump.start()
            pumps.append(pump)
        return [proc.wait() for proc in procs]
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # each records its trial and stops its server
        _stop(procs, places, say)
        raise
    finally:
        for pump in pumps:
            pump.join(timeout=5)
        for proc, pump in zip(procs, pumps, strict=False):
            if proc.stdout is not None and not pump.is_alive():  # a pipe still read stays open
                proc.stdout.close()


def _stop(
    procs: Sequence[subprocess.Popen[str]], places: Sequence[Seat], say: Callable[[str], None]
) -> None:
    """Wait up to :data:`STOP_GRACE_S` in all for the SIGTERMed workers; those still running
    then have their threads' stacks printed (SIGUSR1: :func:`tuner.cli.app.main` registers
    faulthandler on it), so that what held them shows in the output, and are killed, even if
    this wait is itself interrupted."""
    stuck: list[subprocess.Popen[str]] = list(procs)
    try:
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        stuck = [proc for proc in procs if proc.poll() is None]
        for proc, seat in zip(procs, places, strict=False):
            if proc in stuck:
                say(
                    f"[{seat.label}] still running {STOP_GRACE_S:.0f} s after its SIGTERM: "
                    "its threads' stacks follow, then it is killed"
                )
                with contextlib.suppress(OSError):
                    proc.send_signal(signal.SIGUSR1)
        if stuck:
            time.sleep(_STACKS_S)  # they do not exit on SIGUSR1: time to write the stacks
    finally:
        for proc in stuck:
            proc.kill()
            proc.wait()


def _pump(stream: IO[str], label: str, say: Callable[[str], None]) -> None:
    for line in stream:
        say(f"[{label}] {line.rstrip()}")


def settle(repo: Repository, name: str) -> bool:
    """Once every worker has exited: study ``name`` left running or confirming, which no
    process runs now, is interrupted (``tuner run --study NAME --resume`` goes on with it).
    True when it was; a finished, failed or interrupted study is left as it is."""
    live = (StudyStatus.RUNNING, StudyStatus.CONFIRMING)
    others = [status for status in StudyStatus if status not in live]
    return repo.claim_study_step(name, StudyStatus.INTERRUPTED, unless=others)
