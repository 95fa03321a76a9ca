"""Where a measured launch's processes run: vLLM's API server, its engine core and tuner's load
generator on disjoint sets of CPUs local to the measured GPU.

Left to the kernel's scheduler, the three busy Python processes of a measurement (the API
server's event loop, the engine core's busy loop, the load generator's event loop) wander over
every CPU of the host and meet on the same cores at random, one launch more than another: part of
the launch-to-launch and window-to-window spread of a throughput figure. A placement gives each
its own whole cores, on the GPU's NUMA node when NVML says which CPUs are local to it:

- **engine core** (every thread of each process whose name or command line says EngineCore):
  half the cores;
- **API server** (the launched process, its other children and their threads): a quarter;
- **load generator** (tuner's own process, while it measures): a quarter.

Hyper-threads of one core stay in one set (``thread_siblings_list``), so two sets never share a
physical core. Modes (``[runner] cpu_placement``, or ``TUNER_CPU_PLACEMENT`` in the environment,
which wins): ``auto`` pins when at least :data:`AUTO_MIN_CORES` whole cores are available and
leaves placement to the kernel otherwise (a 2-core CI machine); ``pinned`` always pins (an error
where there are fewer than 3 CPUs to split); ``off`` never does. On a machine without a GPU
(CPU vLLM, whose model runs on the CPUs, its threads bound by vLLM) ``auto`` never pins. The
plan a launch ran with is recorded with it (:attr:`tuner.domain.ServerInfo.placement`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import UsageError
from tuner.telemetry import engine_tree

MODES = ("auto", "pinned", "off")
ENV = "TUNER_CPU_PLACEMENT"
AUTO_MIN_CORES = 6  # auto pins from 6 whole cores up: at least one each, engine core two or more
_SYS_CPU = Path("/sys/devices/system/cpu")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-3,8,10-11"`` (the kernel's list format) as sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpulist`: runs of consecutive CPUs as ``a-b``."""
    runs: list[str] = []
    # Within a run of consecutive CPUs, a CPU less its position is the same number.
    for _, run in itertools.groupby(enumerate(sorted(set(cpus))), lambda pair: pair[1] - pair[0]):
        members = [cpu for _, cpu in run]
        first, last = members[0], members[-1]
        runs.append(str(first) if first == last else f"{first}-{last}")
    return ",".join(runs)


def resolve_mode(configured: str) -> str:
    """The placement mode in force: the environment's ``TUNER_CPU_PLACEMENT`` over the spec's."""
    mode = os.environ.get(ENV, "").strip() or configured
    if mode not in MODES:
        raise UsageError(
            f"cpu placement {mode!r} is none of {', '.join(MODES)}",
            hint=f"set [runner] cpu_placement (or {ENV}) to auto, pinned or off",
        )
    return mode


def _siblings(cpu: int) -> tuple[int, ...]:
    try:
        text = (_SYS_CPU / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()
    except OSError:
        return (cpu,)
    return parse_cpulist(text) or (cpu,)


def cores_of(
    cpus: Sequence[int], siblings: Callable[[int], Sequence[int]] = _siblings
) -> list[tuple[int, ...]]:
    """``cpus`` grouped into physical cores (hyper-threads together), in CPU order."""
    allowed = set(cpus)
    seen: set[int] = set()
    cores: list[tuple[int, ...]] = []
    for cpu in sorted(allowed):
        if cpu in seen:
            continue
        core = tuple(c for c in siblings(cpu) if c in allowed) or (cpu,)
        seen.update(core)
        cores.append(core)
    return cores


@dataclass(frozen=True)
class CpuPlan:
    """Disjoint CPU sets for one launch, and where the candidate CPUs came from."""

    api: tuple[int, ...]
    engine: tuple[int, ...]
    client: tuple[int, ...]
    source: str  # "nvml" (the GPU's local CPUs) or "process" (every CPU tuner may use)

    @property
    def server(self) -> tuple[int, ...]:
        return tuple(sorted({*self.api, *self.engine}))

    def describe(self) -> dict[str, str]:
        """The plan as recorded with a launch."""
        return {
            "mode": "pinned",
            "source": self.source,
            "api_server": format_cpulist(self.api),
            "engine_core": format_cpulist(self.engine),
            "load_generator": format_cpulist(self.client),
        }


NOT_PINNED = {"mode": "off"}


def split(cores: Sequence[tuple[int, ...]], source: str) -> CpuPlan:
    """Whole cores in three disjoint sets: a quarter for the API server, a quarter for the load
    generator (one core each at least), the rest for the engine core. With fewer than three
    cores the hyper-threads are split instead, so each set still gets a CPU of its own."""
    if len(cores) < 3:
        cpus = [(c,) for core in cores for c in core]
        if len(cpus) < 3:
            raise UsageError(
                f"cannot pin three processes to {len(cpus)} CPU(s)",
                hint="use cpu_placement = auto or off on this machine",
            )
        cores = cpus
    quarter = max(1, len(cores) // 4)
    api, client, engine = cores[:quarter], cores[-quarter:], cores[quarter:-quarter]

    def flat(group: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        return tuple(sorted(c for core in group for c in core))

    return CpuPlan(api=flat(api), engine=flat(engine), client=flat(client), source=source)


def plan(
    mode: str,
    local: Sequence[int] | None,
    *,
    available: Sequence[int] | None = None,
    siblings: Callable[[int], Sequence[int]] = _siblings,
) -> CpuPlan | None:
    """The plan for ``mode`` (see the module docstring), or None to leave placement to the
    kernel. ``local`` are the GPU's local CPUs as NVML reports them (None: unknown, or no GPU);
    ``available`` those this process may use (default: its own affinity)."""
    if mode == "off":
        return None
    allowed = sorted(available if available is not None else os.sched_getaffinity(0))
    chosen = [c for c in allowed if local is None or c in set(local)]
    source = "nvml" if local is not None and chosen else "process"
    if not chosen:
        chosen = allowed
    cores = cores_of(chosen, siblings)
    if mode == "auto" and len(cores) < AUTO_MIN_CORES:
        return None
    return split(cores, source)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


def set_affinity(pid: int, cpus: Sequence[int]) -> int:
    """Pin every thread of process ``pid`` to ``cpus``; how many threads took it (a thread
    that ended meanwhile is skipped)."""
    done = 0
    for tid in _threads(pid):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)
            done += 1
    return done


def pin_server(cpu_plan: CpuPlan, root_pid: int) -> dict[str, str]:
    """Place a ready server's processes: engine cores and the processes under them on the
    engine set, the API server and every other child on the API set. What was done, for the
    launch's record."""
    tree = engine_tree(root_pid)
    engines = [p for p, engine in tree if engine]
    others = [p for p, engine in tree if not engine]
    for proc in engines:
        set_affinity(proc.pid, cpu_plan.engine)
    for proc in others:
        set_affinity(proc.pid, cpu_plan.api)
    return {
        **cpu_plan.describe(),
        "engine_processes": str(len(engines)),
        "api_processes": str(len(others)),
    }


@contextlib.contextmanager
def client_pinned(cpu_plan: CpuPlan | None) -> Iterator[None]:
    """Run the block (the load generator, in this process) on the plan's client CPUs; every
    thread of this process gets its former affinity back afterwards."""
    if cpu_plan is None:
        yield
        return
    me = os.getpid()
    saved: dict[int, set[int]] = {}
    for tid in _threads(me):
        with contextlib.suppress(OSError):
            saved[tid] = os.sched_getaffinity(tid)
    set_affinity(me, cpu_plan.client)
    try:
        yield
    finally:
        # A thread started inside the block inherited the client set: it gets the union back.
        everything = set().union(*saved.values())
        for tid in _threads(me):
            cpus = saved.get(tid, everything)
            if cpus:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, cpus)
