"""``tuner calibrate``: measure the noise of a model, GPU and workload before comparing on it.

Every launch is stored in ``tuner_launches``, and the noise profile of its key is estimated
from all the launches stored on it (:mod:`tuner.abtest.profile`, the README's decision design).
"""

from __future__ import annotations

from typing import Annotated

import typer

from tuner.cli.common import GpuOpt, ModelOpt, StorageOpt, VllmPythonOpt, storage_url
from tuner.cli.compare import Json, Progress, Workload, WorkloadSet, consoles


def calibrate(
    model: ModelOpt,
    gpu: GpuOpt,
    workload: Workload = None,
    workload_set: WorkloadSet = None,
    launches: Annotated[
        int, typer.Option(min=2, help="Fresh launches of the configuration (5: 4 df).")
    ] = 5,
    config: Annotated[
        str, typer.Option(help="What to launch: 'defaults' or knob=value,knob=value.")
    ] = "defaults",
    storage: StorageOpt = None,
    vllm_python: VllmPythonOpt = None,
    as_json: Json = False,
) -> None:
    """Measure the launch-to-launch and window-to-window noise here and store its profile.

    The profile pools every complete launch stored for its key (this run's and earlier
    calibrations' and comparisons'). Exit 1 when there is none: fewer than two such launches
    of one configuration in one run.
    """
    import json

    from tuner.abtest import COMPARED, open_bench, profile_lines, run_calibration, setup_pair

    url, say = storage_url(storage), consoles(as_json)
    setup = setup_pair(
        model=model,
        gpu=gpu,
        a=config,
        b=config,
        workload=workload,
        workload_set=workload_set,
        confidence=0.95,
        vllm_python=vllm_python,
        options=("--config", "--config"),
    )
    bench = open_bench("calibrate", setup.spec, url, setup.model, setup.gpu, launches)
    arm = setup.arms[0]
    say(
        f"calibrate on {setup.model.alias} / {setup.gpu.name} ({bench.hardware}), vLLM "
        f"{bench.vllm_version}: {launches} fresh launches of {arm.label} "
        f"({arm.config.label()}), workload {setup.workload.name}"
    )
    progress = Progress(say)
    with progress.stopping():
        outcome = run_calibration(bench, setup.workload, arm, progress.watch())
    if outcome.profile is None:  # not "`tuner calibrate` measures one": this was it
        say(
            f"noise profile: none, {outcome.completed} of {outcome.launched} launches complete "
            "(a profile needs complete launches: see the failures above)"
        )
    else:
        for line in profile_lines(outcome.profile, [name for name, _, _ in COMPARED]):
            say(line)
        if note := outcome.earlier_note():
            say(note)
    say(
        f"{outcome.completed} of {outcome.launched} launches complete, "
        f"{outcome.gpu_minutes:.1f} {'CPU' if setup.gpu.is_cpu else 'GPU'}-minutes"
    )
    if as_json:
        print(json.dumps(outcome.to_json(), indent=2), flush=True)
    if outcome.profile is None:
        raise typer.Exit(1)
