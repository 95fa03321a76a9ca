"""The vLLM process in one package: starting and stopping a server (``server``, its process group
``procgroup``, the ``watchdog`` that outlives tuner, ``leases`` of the GPUs, ``ports``, deferred
``interrupts``), asking an interpreter which vLLM it has (``interpreter``), the trial runner seam
(one measured server launch per call, ``vllm``) and the check of the requested GPU against this
machine (``hardware``, ``placement``)."""

from typing import TYPE_CHECKING

from tuner import face

if TYPE_CHECKING:
    from tuner.runner.hardware import check_hardware, matching_gpus
    from tuner.runner.interpreter import detect_vllm, load_flags
    from tuner.runner.interrupts import sigterm_as_interrupt
    from tuner.runner.leases import reap_orphans
    from tuner.runner.ports import free_port, port_is_open
    from tuner.runner.procgroup import kill_group, run_in_group, still_running
    from tuner.runner.server import VllmServer
    from tuner.runner.vllm import (
        VLLM_MODULE,
        PhaseCallback,
        RunnerSettings,
        TrialRunner,
        VllmTrialRunner,
    )

__all__ = [
    "VLLM_MODULE",
    "PhaseCallback",
    "RunnerSettings",
    "TrialRunner",
    "VllmServer",
    "VllmTrialRunner",
    "check_hardware",
    "detect_vllm",
    "free_port",
    "kill_group",
    "load_flags",
    "matching_gpus",
    "port_is_open",
    "reap_orphans",
    "run_in_group",
    "sigterm_as_interrupt",
    "still_running",
]

__getattr__, __dir__ = face(__name__)
