"""Put on the PYTHONPATH of a vLLM server by :mod:`tuner.runner.amx`: every Python process of
the server (API server, engine core, the workers it spawns) asks Linux for the AMX tile state
before any kernel runs, then hands over to the next ``sitecustomize`` on the path, if any.

Linux gives a process the AMX tile registers only after it asks (``arch_prctl`` with
``ARCH_REQ_XCOMP_PERM``); a process that runs an AMX instruction without asking dies with
SIGILL. vLLM's CPU build (0.32.0) picks its AMX attention kernels on a CPU that has AMX, and its
spawned worker process never asks: its first model step dies that way.
"""

import sys

_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86_64


def _ask_for_amx() -> None:
    import platform

    if sys.platform != "linux" or platform.machine() != "x86_64":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, ctypes.c_ulong(_XFEATURE_XTILEDATA))
    except Exception:  # no libc, no such call: the process runs as it would have
        return


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one shadows (a distribution's, a virtualenv's)."""
    import importlib.machinery
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_ask_for_amx()
_next_sitecustomize()
