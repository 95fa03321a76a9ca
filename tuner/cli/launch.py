"""``tuner launch`` in the foreground: from options to a served model, until Ctrl-C.

SIGINT, SIGTERM and SIGHUP all mean "stop": they end the wait, and the server's whole process
group is ended (TERM, then KILL after a grace period) with those signals ignored meanwhile, so
that a second Ctrl-C cannot cut the teardown short and leave vLLM's engine processes behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
import os
import re
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from tuner.catalog import get_gpu
from tuner.cli.common import (
    INTERRUPTED,
    StorageOpt,
    VllmPythonOpt,
    choice,
    err,
    open_repo,
    say,
    storage_url,
)
from tuner.deploy.local import LaunchPlan, Measured, best_local, plan
from tuner.domain import FailureClass, GpuProfile, Objective
from tuner.errors import EnvironmentProblem, TrialFailure, TunerError, UsageError
from tuner.runner import kill_group
from tuner.vllm import argv, logparse

POLL_S = 0.5
STOP_GRACE_S = 15.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve(
    launch: LaunchPlan,
    measured: Measured,
    log_path: Path,
    lease_dir: Path,
    startup_timeout_s: float,
) -> int:
    """Start the server, wait until it answers as ours, warm it up and send the canary
    (:func:`tuner.deploy.readiness.make_ready`), print its base URL, and serve until a stop
    signal (exit code 0) or until it dies by itself (1, after its log tail). Start-up and
    canary failures raise TunerError naming the log and what broke. No process of the server
    is left either way. Must run in the main thread (it installs signal handlers, restored
    on return)."""
    from tuner.deploy.readiness import make_ready
    from tuner.runner import VllmServer

    server = VllmServer(
        launch.command,
        env=launch.env,
        host=launch.host,
        port=launch.port,
        served_model_name=launch.served_model_name,
        log_path=log_path,
        lease_dir=lease_dir,
    )
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    serving = False  # a stop before the server is ready is an interruption, not the end
    try:
        say(f"starting vLLM {launch.vllm_version} (log: {log_path})")
        started = time.monotonic()
        try:
            server.start()
            startup_s = server.wait_ready(startup_timeout_s)
            server.verify_identity()
            say(f"up in {startup_s:.0f} s; not announced before its warm-up and canary")
            canary = make_ready(
                server.base_url,
                launch.served_model_name,
                model=measured.model,
                workload=measured.workload,
                synthetic_tokenizer=launch.synthetic_tokenizer,
                alive=server.is_alive,
                say=say,
                overrides=measured.workload_overrides,
            )
            say(canary.summary())
        except TrialFailure as exc:
            _tail(exc.log_tail or server.log_tail())
            canary_failed = exc.failure is FailureClass.CANARY_FAILED
            what = "the server failed a request shape a client may send: " if canary_failed else ""
            died = exc.failure in (FailureClass.CANARY_FAILED, FailureClass.CRASHED)
            cause = logparse.engine_death(server.log_text()) if died else None
            slow = (
                f"a start that needs longer: raise --startup-timeout "
                f"(was {startup_timeout_s:g} s). "
                if exc.failure is FailureClass.TIMEOUT
                else ""
            )
            raise TunerError(
                what + exc.message + (f" ({cause})" if cause else ""),
                hint=f"not served; the server's whole log: {log_path}. {slow}Another "
                "configuration: tuner launch --objective ..., or measure again with `tuner run`",
            ) from None
        say(f"ready in {time.monotonic() - started:.0f} s")  # its warm-up and canary too
        # Serving from here: a stop that lands while the base URL is being printed (a client
        # that read it may already stop us) ends the serving; it interrupts no start-up.
        serving = True
        say(f"base URL: {server.base_url}/v1")
        say(f'model: "{launch.served_model_name}" (any api_key); Ctrl-C stops the server')
        while server.is_alive():
            time.sleep(POLL_S)
        say(f"vLLM exited by itself (code {server.returncode}) while serving")
        _tail(server.log_tail())
        return 1
    except KeyboardInterrupt:
        if serving:
            say("stopping vLLM ...")
            return 0
        say("interrupted during start-up: stopping vLLM; nothing was served")
        return INTERRUPTED
    finally:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        try:
            server.stop(grace_s=STOP_GRACE_S)
            if server.pid is not None:
                # Again by group id: a stop inside VllmServer may have been cut short by a
                # signal that arrived before the handlers above were set to ignore.
                kill_group(server.pid, STOP_GRACE_S)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if server.pid is not None:
            say("stopped: the server's process group has ended")


def _tail(text: str) -> None:
    for line in text.splitlines()[-30:]:
        say(f"  | {line}")


def _vllm_version(python: str, measured: Measured, module: str, print_only: bool) -> str:
    if module != argv.VLLM_API_SERVER_MODULE:
        return measured.vllm_version  # a stand-in server (tests): there is no vLLM to ask
    from tuner.runner import detect_vllm

    try:
        return detect_vllm(python).version
    except EnvironmentProblem as exc:
        if not print_only:
            raise
        note = f"note: {exc.message}; the flags are spelled for vLLM {measured.vllm_version}"
        err.print(escape(note), soft_wrap=True)
        return measured.vllm_version


# A host name as RFC 1123 spells one: dot-separated labels of letters, digits and hyphens.
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def _check_host(host: str) -> None:
    """--host is an IP address or a host name (empty: every interface, as vLLM reads it);
    checked before anything is launched."""
    if not host:
        return
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return
    numeric = host.replace(".", "").isdigit()  # 999.1.1.1 is no address, and no name either
    if numeric or len(host) > 253 or not _HOSTNAME.fullmatch(host):
        raise UsageError(
            f"--host {host!r} is not an IP address or a host name",
            hint="e.g. --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface)",
        )


def _check_can_serve(profile: GpuProfile, host: str, port: int) -> dict[str, str]:
    """Refuse a machine without the GPU measured or a port taken; the environment that pins the
    server to the GPU checked (:meth:`tuner.runner.Hardware.device_env`)."""
    from tuner.runner import check_hardware, free_port, port_is_open
    from tuner.telemetry import detect_gpus

    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hardware = check_hardware(profile, detect_gpus(), cuda_visible=cuda_visible)
    client_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    if port_is_open(client_host, port):
        raise UsageError(
            f"port {port} on {host} is already in use",
            hint=f"stop what serves it, or pass another --port (e.g. {free_port(client_host)})",
        )
    return hardware.device_env()


def launch_command(
    model: Annotated[str, typer.Option(help="Model alias (as studied), dir or hub id.")],
    gpu: Annotated[str, typer.Option(help="GPU profile the configuration was measured on.")],
    workload: Annotated[
        str | None, typer.Option(help="Only studies of this workload (needed with --api).")
    ] = None,
    objective: Annotated[
        str | None,
        typer.Option(help="Rank by: balanced, throughput, latency, memory, capacity or cost."),
    ] = None,
    storage: StorageOpt = None,
    api: Annotated[
        str | None,
        typer.Option(help="A tuner API to ask instead of the database (with --workload)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8000,
    vllm_python: VllmPythonOpt = None,
    print_only: Annotated[
        bool, typer.Option("--print", help="Only print the command, shell-quoted.")
    ] = False,
    startup_timeout: Annotated[float, typer.Option(help="Seconds to wait for vLLM.")] = 900.0,
    dummy_weights: Annotated[
        bool, typer.Option(help="Random weights even for a model whose weights exist.")
    ] = False,
    server_module: Annotated[str, typer.Option(hidden=True)] = "vllm.entrypoints.openai.api_server",
) -> None:
    """Serve a model with the best measured configuration (OpenAI API) until Ctrl-C."""
    from tuner.compose import default_vllm_python, tuner_home, writable_home

    if storage is not None and api is not None:
        raise UsageError("--storage and --api both name where to look", hint="pass one of them")
    profile = get_gpu(gpu)
    chosen = choice(Objective, objective, "objective")
    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is outside 1-65535")
    _check_host(host)
    if not (math.isfinite(startup_timeout) and startup_timeout > 0):
        raise UsageError(
            f"--startup-timeout must be > 0 seconds, got {startup_timeout}",
            hint="e.g. --startup-timeout 900 (a cold start of a large model takes minutes)",
        )
    measured: Measured
    if api is not None:
        from tuner.deploy.remote import best_remote

        measured = best_remote(api, model, profile.name, workload=workload, objective=chosen)
    else:
        from tuner.db import safe_url

        measured = best_local(
            open_repo(storage),
            model,
            profile.name,
            workload=workload,
            objective=chosen,
            source=safe_url(storage_url(storage)),
            storage=storage,
        )
    python = vllm_python or default_vllm_python()
    version = _vllm_version(python, measured, server_module, print_only)
    home = tuner_home() if print_only else writable_home()
    launch = plan(
        measured,
        python=python,
        vllm_version=version,
        host=host,
        port=port,
        home=home,
        module=server_module,
        dummy_weights=dummy_weights,
        model=model,
    )
    if print_only:
        # What it is and what to check on stderr (a vLLM other than the measured one), the
        # line alone on stdout: a wrapped line could not be pasted.
        for line in [*measured.describe(), *launch.notes]:
            err.print(line, markup=False, soft_wrap=True)
        print(launch.shell(), flush=True)
        return
    device = _check_can_serve(profile, host, port)
    launch = dataclasses.replace(launch, env={**launch.env, **device})
    for line in [*measured.describe(), *launch.notes]:
        say(line)
    from tuner.runner import reap_orphans

    reap_orphans(home / "leases")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", launch.served_model_name)
    log_path = (
        Path(".tuner") / "logs" / f"launch-{name}-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    )
    code = serve(launch, measured, log_path, home / "leases", startup_timeout)
    if code:
        raise typer.Exit(code)
