"""Builders shared by the study and runner tests: a StudyContext without the CLI, the real
runner pointed at the fake server, and a scan for processes a test may have left behind."""

from __future__ import annotations

import gc
import io
import math
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from tuner.abtest.compare import HEADLINE, Arm, compare
from tuner.catalog.gpus import get_gpu
from tuner.catalog.models import resolve_model
from tuner.compose import StudyContext
from tuner.db import migrate
from tuner.db.migrate import upgrade
from tuner.db.models import VERSION_TABLE, Base
from tuner.db.repository import QUEUE_WORKER, RUN_OWNER, Repository
from tuner.db.rows import LaunchRow, StudyStatus
from tuner.db.session import make_engine
from tuner.domain import ModelSpec, ServingConfig, TrialResult, TrialStatus, Workload
from tuner.domain.workload import parse_slo
from tuner.load import estimate
from tuner.load.workloads import WORKLOADS
from tuner.runner.hardware import Hardware
from tuner.runner.vllm import RunnerSettings, VllmTrialRunner
from tuner.space import SearchSpace
from tuner.spec.study import StudySpec
from tuner.study.loop import run_study
from tuner.testing.fake_runner import FakeRunner

# Small enough that a fake-server trial takes well under a second.
TINY_WORKLOAD: Workload = WORKLOADS["smoke"].replace(
    requests_per_window=8, warmup_requests=2, concurrency=4, output_tokens=8
)


def make_context(
    db_url: str,
    *,
    gpu: str = "h100",
    trials: int = 6,
    params: Sequence[str] = ("gpu_memory_utilization", "max_num_seqs"),
    choices: Mapping[str, tuple[Any, ...]] | None = None,
    enqueue: Sequence[Mapping[str, Any]] = (),
    slo: str = "",
    name: str = "s1",
    workload: Workload = TINY_WORKLOAD,
    confirm_launches: int = 0,
    confirm_top: int = 3,
    objective: str = "balanced",
) -> StudyContext:
    spec = StudySpec(
        model="tiny-ernie",
        gpu=gpu,
        workload=workload.name,
        trials=trials,
        params=tuple(params),
        choices=dict(choices or {"gpu_memory_utilization": (0.5, 0.95), "max_num_seqs": (1, 64)}),
        enqueue=tuple(enqueue),
        slo=slo,
        name=name,
        confirm_launches=confirm_launches,
        confirm_top=confirm_top,
    ).with_overrides(objective=objective)
    model = resolve_model(spec.model)
    profile = get_gpu(gpu)
    space = SearchSpace(model, profile, workload, params=spec.params, choices=spec.choices)
    return StudyContext(
        name=name,
        spec=spec,
        model=model,
        gpu=profile,
        workload=workload,
        slo=parse_slo(slo),
        space=space,
        storage_url=db_url,
        vllm_version="0.32.0",
        serve_model="baidu/ERNIE-4.5-0.3B-PT",
    )


def make_repo(db_url: str) -> Repository:
    upgrade(db_url)
    return Repository(make_engine(db_url))


def schema_drift(db_url: str) -> list[object]:
    """Alembic's differences between tuner's models and the tables at ``db_url`` ([] if none)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "version_table": VERSION_TABLE,
                    "include_name": migrate.include_name,
                    "include_object": migrate.include_object,
                },
            )
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def fake_server_runner(
    tmp_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 20.0,
    model: ModelSpec | None = None,
) -> VllmTrialRunner:
    """The real runner, launching ``python -m tuner.testing.fake_server`` instead of vLLM,
    for ``model`` (default: tiny-ernie)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    settings = RunnerSettings(
        python=sys.executable,
        vllm_version="0.32.0",
        model_path=str(model_dir),
        module="tuner.testing.fake_server",
        startup_timeout_s=startup_timeout_s,
        env={"TUNER_FAKE_STARTUP_S": "0.2", **(env or {})},
        log_dir=tmp_path / "logs",
        lease_dir=tmp_path / "leases",
    )
    model = model or resolve_model("tiny-ernie")
    return VllmTrialRunner(settings, model, Hardware(name="test host"))


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line contains ``text`` (zombies excluded)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(text in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def memory_confirmation_context(db_url: str) -> StudyContext:
    """A 2-trial study for the memory objective whose second trial (utilization 0.5) is, on the
    fake runner, a real and large improvement (same throughput and latency, half the memory),
    followed by a confirmation of it against the defaults: 3 launches each, interleaved."""
    return make_context(
        db_url,
        trials=2,
        enqueue=[{"gpu_memory_utilization": 0.5}],
        params=("gpu_memory_utilization",),
        choices={"gpu_memory_utilization": (0.5,)},
        confirm_launches=3,
        confirm_top=1,
        objective="memory",
    )


def budget_free_study(db_url: str, name: str = "s1") -> Repository:
    """A study of 4 trials whose sampler was handed one configuration the space's rules rule
    out, twice (the first draw costs no trial of the budget, the second one), then a search
    trial interrupted after the study ended: 6 search rows, 4 of them the budget's."""
    repo = make_repo(db_url)
    bad = {"max_num_seqs": 64, "max_num_batched_tokens": 32}  # vLLM refuses: tokens < seqs
    ctx = make_context(
        db_url, trials=4, name=name, params=("max_num_seqs", "max_num_batched_tokens"),
        choices={"max_num_seqs": (1, 8, 64), "max_num_batched_tokens": (32, 2048)},
        enqueue=[bad, bad],
    )  # fmt: skip
    run_study(ctx, FakeRunner(), repo)
    repo.start_trial(name, len(repo.list_trials(name, limit=None)), ServingConfig())
    assert repo.mark_running_as_interrupted(name) == 1
    return repo


def store_claim(repo: Repository, statement: str = "it is faster", **fields: Any) -> int:
    """A verified claim stored as ``tuner verify-claims`` stores it: the defaults against
    max_num_seqs=8 ("fa2"), three in-process fake launches each; returns the comparison id.
    ``fields`` replace or add keys of the stored claim record."""
    load = Workload(name="w", prompt_tokens=32, output_tokens=8, requests_per_window=8)
    a, b = Arm("defaults", ServingConfig()), Arm("fa2", ServingConfig(max_num_seqs=8))
    runs = [[FakeRunner(seed=i).run(arm.config, load) for i in range(3)] for arm in (a, b)]
    c = compare(a, runs[0], b, runs[1])
    claim = {
        "id": "c1",
        "statement": statement,
        "metric": "output_throughput",
        "claimed": 1.41,
        "claimed_text": "1.41",
        "workload": "w",
        "verdict": "refuted",
        "reason": "no significant effect",
        "measured": {"ratio": 0.958, "low": 0.752, "high": 1.221},
        **fields,
    }
    row = repo.add_comparison(
        model="tiny-ernie",
        gpu="h100",
        workload="w",
        a_config=a.config,
        b_config=b.config,
        repeats=3,
        results={**c.to_results(), "kind": "claim", "claim": claim},
        verdicts=c.to_verdicts(),
    )
    return row.id


_frozen = 0  # how many quiet_gc() blocks are open in this process


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector's full passes short while a block runs: every object
    tracked at its start moves to the permanent generation (``gc.freeze``), back at its end.

    A pytest worker that has run hundreds of tests holds a large heap, and a full collection
    of it stops every thread of the process (measured: 84-141 ms at 173k objects). A server in
    a thread of the test's process, measured by a client in the same process, reads such a
    pause as the server's latency: a cached prefill of 12 ms came out at 260 ms."""
    global _frozen
    if _frozen == 0:  # (no gc.collect() first: the garbage frozen is collected after)
        gc.freeze()
    _frozen += 1
    try:
        yield
    finally:
        _frozen -= 1
        if _frozen == 0:
            gc.unfreeze()


@contextmanager
def uvicorn_in_thread(app: Any, *, timeout_s: float = 10.0) -> Iterator[str]:
    """Serve an ASGI app (the fake vLLM server, the API) with uvicorn in a daemon thread of
    this process on a free localhost port; yields its base URL and stops it afterwards. The
    garbage collector is kept quiet meanwhile (:func:`quiet_gc`): the server's timings are
    what tests measure."""
    with quiet_gc():
        yield from _uvicorn_in_thread(app, timeout_s)


def _uvicorn_in_thread(app: Any, timeout_s: float) -> Iterator[str]:
    import uvicorn

    from tuner.runner.ports import free_port

    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def damage_sqlite(path: Path, *, index_of: str | None = None) -> Path:
    """Overwrite the head of a root page of SQLite file ``path``, as a bad sector would: the
    studies table's (reading it fails), or with ``index_of`` the first index of that table's
    (the rows still read; only SQLite's check finds it)."""
    import sqlite3

    where = (
        f"type = 'index' AND tbl_name = '{index_of}' ORDER BY name LIMIT 1"
        if index_of
        else "name = 'tuner_studies'"
    )
    with sqlite3.connect(path) as con:
        page = con.execute(f"SELECT rootpage FROM sqlite_master WHERE {where}").fetchone()[0]
        size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with path.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xff" * 16)
    return path


def stream_log(folder: Path, name: str) -> str:
    """The log of stream ``name`` (its plan's output) in a GPU session's ``streams.tgz``, as
    scripts/gpu-streams.sh collected it into ``folder``."""
    with tarfile.open(folder / "streams.tgz") as tar:
        f = tar.extractfile(f"./{name}.log")
        assert f is not None
        return f.read().decode()


def spec_writers(
    repo: Repository, name: str, worker: Mapping[str, Any]
) -> dict[str, tuple[Callable[[], object], str, object]]:
    """The repository's calls that read study ``name``'s stored spec and write a merged copy
    back, each with the spec key it writes and the value: what the concurrency tests run while
    another connection holds the study's row."""
    return {
        "claim_study_step": (
            lambda: repo.claim_study_step(name, StudyStatus.CONFIRMING, unless=(), runner=worker),
            RUN_OWNER,
            worker,
        ),
        "set_study_plan": (
            lambda: repo.set_study_plan(name, {"knobs": None}),
            "plan_record",
            {"knobs": None},
        ),
        "claim_queued_study": (
            lambda: repo.claim_queued_study(worker=worker),
            QUEUE_WORKER,
            worker,
        ),
    }


# -- the committed GPU comparisons (docs/results/plan-h200.md §13, §14) --------------------


def geomean(logs: tuple[float, ...]) -> float:
    return math.exp(sum(logs) / len(logs))


def launch_table(launches: list[LaunchRow]) -> str:
    """Every launch in the order it ran: one value per launch, the geometric mean of its
    3 windows (the value the comparison takes), with the range of the windows."""
    out = [
        "| launch | configuration | out tok/s, geometric mean [range of 3 windows] "
        "| P99 E2E ms | start-up s | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for i, launch in enumerate(sorted(launches, key=lambda x: x.created_at), 1):
        thr = launch.values["output_throughput"]
        assert launch.startup_s is not None and launch.wall_s is not None
        low, high = math.exp(min(thr)), math.exp(max(thr))
        out.append(
            f"| {i} | {launch.config_label} | {geomean(thr):,.0f} [{low:,.0f}-{high:,.0f}] | "
            f"{geomean(launch.values['e2e_p99_ms']):,.0f} | {launch.startup_s:.0f} | "
            f"{launch.wall_s:.0f} |"
        )
    return "\n".join(out) + "\n"


def _logged(data: Path, name: str) -> str:
    with tarfile.open(data / "results.tgz") as tar:
        member = tar.extractfile(f"results/{name}")
        assert member is not None
        return io.TextIOWrapper(member, encoding="utf-8").read()


def gpu_samples(data: Path) -> list[dict[str, Any]]:
    """nvidia-smi's rows every 5 s: time (UTC epoch), SM clock MHz, temperature C, power W,
    utilization %, clock-event reasons (a bit mask; 0x1 is the GPU idle), from the loggers
    of a GPU session's ``results.tgz`` in ``data``."""
    rows = []
    for line in _logged(data, "gpu-clocks.csv").splitlines()[1:]:
        stamp, sm, _mem, _max, temp, power, _limit, util, reasons = line.split(", ")
        when = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
        rows.append(
            {
                "t": when.timestamp(),
                "sm": int(sm.split()[0]),
                "temp": int(temp),
                "power": float(power.split()[0]),
                "util": int(util.split()[0]),
                "reasons": int(reasons, 16),
            }
        )
    return rows


def host_samples(data: Path) -> list[dict[str, Any]]:
    """vmstat's rows every 5 s (the first, averages since boot, left out): time, run queue,
    CPU % user, system, idle and stolen by the host."""
    rows = []
    for line in _logged(data, "vmstat.txt").splitlines()[3:]:
        f = line.split()
        when = datetime.fromisoformat(f"{f[-2]}T{f[-1]}").replace(tzinfo=UTC)
        rows.append(
            {
                "t": when.timestamp(),
                "r": int(f[0]),
                "us": int(f[12]),
                "sy": int(f[13]),
                "id": int(f[14]),
                "st": int(f[16]),
            }
        )
    return rows


def machine_table(data: Path, launches: list[LaunchRow]) -> str:
    """Per launch, over the samples while the GPU worked (utilization above 0: the warm-up and
    the measured windows): the SM clock, temperature, power and clock-event reasons; and the
    host's CPU over the whole launch."""
    gpu, host = gpu_samples(data), host_samples(data)
    out = [
        "| launch | configuration | SM clock MHz (busy) | GPU utilization %, busy mean "
        "| temperature C, max | power W, max | clock-event reasons (busy) "
        "| host CPU % busy, mean | stolen %, max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, launch in enumerate(sorted(launches, key=lambda x: x.created_at), 1):
        assert launch.wall_s is not None
        start, end = launch.created_at - launch.wall_s, launch.created_at  # stored at its end
        busy = [s for s in gpu if start <= s["t"] <= end and s["util"] > 0]
        during = [s for s in host if start <= s["t"] <= end]
        assert busy and during
        clocks = sorted({s["sm"] for s in busy})
        reasons = sorted({s["reasons"] for s in busy})
        cpu = sum(100 - s["id"] for s in during) / len(during)
        cells = (
            str(i),
            launch.config_label,
            f"{clocks[0]}-{clocks[-1]}",
            f"{sum(s['util'] for s in busy) / len(busy):.0f}",
            str(max(s["temp"] for s in busy)),
            f"{max(s['power'] for s in busy):.0f}",
            ", ".join(f"0x{r:x}" for r in reasons),
            f"{cpu:.1f}",
            str(max(s["st"] for s in during)),
        )
        out.append(f"| {' | '.join(cells)} |")
    return "\n".join(out) + "\n"


def comparison_launches(repo: Repository, nth: int | None = None) -> list[LaunchRow]:
    """The launches of a GPU session's one comparison (or of its ``nth``, counted from 0, where
    it ran several on one noise key: each comparison's launches form one run), by the noise
    key its provenance names."""
    rows = repo.list_comparisons()
    (row,) = rows if nth is None else (rows[nth],)
    prov = row.provenance
    assert prov is not None
    key = {
        "gpu": prov.gpu_name, "vllm_version": prov.vllm_version, "model": row.model,
        "workload": row.workload, "windows": 3, "placement": "pinned",
    }  # fmt: skip
    # Keyed by the card's UUID since 2026-12-06's later sessions, by the host name before.
    found = repo.list_launches({**key, "host": prov.gpu_uuid}) if prov.gpu_uuid else []
    found = found or repo.list_launches({**key, "host": prov.hostname})
    launches = sorted(found, key=lambda x: x.created_at)
    if nth is None:
        return launches
    runs = list(dict.fromkeys(x.run for x in launches))
    return [x for x in launches if x.run == runs[nth]]


def launch_trials(launches: list[LaunchRow]) -> tuple[list[TrialResult], list[TrialResult]]:
    """Stored launches as the trials ``tuner compare`` judged, A's (the defaults) and B's in the
    order they ran: output throughput's windows, ending at the launch's stored time."""
    a: list[TrialResult] = []
    b: list[TrialResult] = []
    for x in sorted(launches, key=lambda x: x.created_at):
        windows = [math.exp(v) for v in x.values[HEADLINE]]
        (a if x.is_defaults else b).append(
            TrialResult(
                config=x.config,
                status=TrialStatus.COMPLETE,
                metrics={HEADLINE: estimate(windows)},
                started_at=x.created_at - (x.wall_s or 0.0),
                finished_at=x.created_at,
            )
        )
    return a, b


def comparison_results(repo: Repository, nth: int | None = None) -> dict[str, Any]:
    rows = repo.list_comparisons()
    (row,) = rows if nth is None else (rows[nth],)
    return dict(row.results)


def verdict_lines(results: dict[str, Any]) -> str:
    d = results["decision"]
    out = [
        f"B/A per metric ({d['launches']['a']} + {d['launches']['b']} launches interleaved, "
        f"stopped: {d['stopped']}; {d['method']}, {d['df']:.1f} df; "
        f"{results['gpu_minutes']:.1f} GPU-minutes):"
    ]
    for m in results["metrics"]:
        out.append(
            f"- {m['label']}: x{m['ratio']:.3f} [{m['low']:.3f}, {m['high']:.3f}], {m['verdict']}"
        )
    return "\n".join(out) + "\n"


def committed_repo(db: Path) -> Repository:
    """The committed results database ``db``, opened where it is. A missing file fails here:
    SQLite would create an empty one in its place, and the next tests read that instead."""
    if not db.is_file():
        raise AssertionError(f"{db} is missing: restore it (git checkout -- {db.name})")
    return Repository(make_engine(f"sqlite:///{db}"))
