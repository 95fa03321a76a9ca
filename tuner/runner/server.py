"""One vLLM server process: launch, readiness, identity, log, teardown.

The server runs in a process group of its own (``start_new_session``) with stdout and stderr
in one log file, never through a shell. Readiness polling watches for an early exit and a
deadline at once and fails loudly on either; teardown ends the whole group (the engine-core
and worker children too), TERM first, KILL after a grace period; a watchdog process does the
same when the tuner dies without a teardown. OSError and httpx errors
are translated into :mod:`tuner.errors` here and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

from tuner.domain import FailureClass
from tuner.errors import EnvironmentProblem, ServerFailure
from tuner.load.canary import served_models
from tuner.runner import amx
from tuner.runner.interrupts import deferred_interrupts
from tuner.runner.leases import Lease, remove_sockets_dir, sockets_dir, write_lease
from tuner.runner.ports import port_is_open
from tuner.runner.procgroup import group_members, kill_group
from tuner.runner.watchdog import ENV as WATCHDOG_ENV
from tuner.runner.watchdog import arm as arm_watchdog
from tuner.runner.watchdog import spawn as spawn_watchdog
from tuner.telemetry import since_boot
from tuner.vllm import classify_start_failure, start_failed

HTTP_TIMEOUT_S = 2.0
FAILURE_GRACE_S = 5.0
_POLL_MIN_S, _POLL_MAX_S = 0.05, 0.5


def _client_host(host: str) -> str:
    # A server bound to every interface is reached through loopback.
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def _model_names(response: httpx.Response) -> list[str]:
    """The ids in an OpenAI /v1/models answer; [] for anything else."""
    try:
        entries = served_models(response.json())
    except ValueError:
        return []
    return [str(m["id"]) for m in entries or []]


class VllmServer:
    """A launched OpenAI-compatible server (real vLLM or tuner's fake) and its process group.

    ``command`` is the full argv; ``env`` is added to this process's environment. The lease
    file (when ``lease_dir`` is given) lets :func:`tuner.runner.leases.reap_orphans` end the
    server if this tuner dies without stopping it; before that, the server's watchdog
    (:mod:`tuner.runner.watchdog`) ends it as soon as this tuner dies, ``kill -9`` included.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        host: str,
        port: int,
        served_model_name: str,
        log_path: Path,
        lease_dir: Path | None,
    ) -> None:
        self.command = tuple(command)
        self.env = dict(env)
        self.host = host
        self.port = port
        self.served_model_name = served_model_name
        self.log_path = log_path
        self.lease_dir = lease_dir
        host_in_url = _client_host(host)
        if ":" in host_in_url:
            host_in_url = f"[{host_in_url}]"
        self.base_url = f"http://{host_in_url}:{port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lease_path: Path | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watchdog_pipe: int | None = None
        self._start: float | None = None  # the leader's (since_boot), for its lease and stop
        self._started_at = 0.0
        self._stopped = False
        self._sockets = ""  # the server's directory of vLLM's socket files (leases.sockets_dir)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the server. Refuses (ServerFailure STRANGER) when the port already answers."""
        if self._proc is not None:
            raise RuntimeError("this VllmServer was already started; create a new one")
        if port_is_open(_client_host(self.host), self.port):
            raise ServerFailure(
                FailureClass.STRANGER,
                f"port {self.port} on {self.host} already answers before launch: another "
                "server holds it (vLLM binds with SO_REUSEPORT, so sharing it would mix "
                "traffic); launch on a free port",
            )
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot write the server log {self.log_path}: {exc}",
                hint="make the run directory writable or choose another one",
            ) from None
        # A Ctrl-C (or SIGTERM) between the fork and Popen returning would leave a server that
        # nothing here knows about: hold such signals until the server is ours (self._proc set,
        # lease written); if one came, it takes effect right after and stop() ends the server.
        # A SIGKILL cannot be held: the watchdog starts first, so it guards that window too.
        with deferred_interrupts():
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
            try:
                self._sockets = sockets_dir(env)  # the watchdog removes it, should tuner die
                if self._sockets:
                    env["VLLM_RPC_BASE_PATH"] = self._sockets
                self._watchdog, self._watchdog_pipe = spawn_watchdog(FAILURE_GRACE_S, self._sockets)
                env[WATCHDOG_ENV] = str(self._watchdog.pid)
            except BaseException:
                self._log.close()  # nothing started yet: no group to end
                self._release_watchdog()
                remove_sockets_dir(self._sockets)
                raise
            env |= amx.server_env(env)  # vLLM's CPU workers must ask for AMX (runner.amx)
            try:
                self._proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except BaseException as exc:  # no server started: nothing of it may stay
                self._log.close()
                self._release_watchdog()
                remove_sockets_dir(self._sockets)
                if not isinstance(exc, OSError):
                    raise
                raise EnvironmentProblem(
                    f"cannot start {self.command[0]!r}: {exc.strerror or exc}",
                    hint="check --vllm-python (or TUNER_VLLM_PYTHON) names a working interpreter",
                ) from None
            self._started_at = time.monotonic()
            try:
                arm_watchdog(self._watchdog_pipe, self._proc.pid)
                self._start = since_boot(self._proc.pid)
                if self.lease_dir is not None:
                    self._lease_path = write_lease(self.lease_dir, self._lease())
            except BaseException:
                self.stop(grace_s=FAILURE_GRACE_S)
                raise

    def _lease(self) -> Lease:
        assert self._proc is not None and self._start is not None
        return Lease(
            pgid=self._proc.pid,
            pid=self._proc.pid,
            served_model_name=self.served_model_name,
            argv=self.command,
            started_at=time.time(),
            start=self._start,
            owner_pid=os.getpid(),
            owner_start=since_boot(os.getpid()),
            sockets=self._sockets,
        )

    def wait_ready(self, timeout_s: float, on_tick: Callable[[float], None] | None = None) -> float:
        """Block until GET /health and GET /v1/models answer 200; return seconds since start().

        Raises ServerFailure with the class from the log when the process exits first or its
        log says its start-up failed, and ServerFailure TIMEOUT (after ending the group) at
        the deadline. ``on_tick`` receives
        the seconds since start() on each poll.
        """
        proc = self._require_started()
        if self._stopped:
            raise RuntimeError("the server was stopped; start a new one")
        try:
            return self._poll_ready(proc, timeout_s, on_tick)
        except BaseException:
            self.stop(grace_s=FAILURE_GRACE_S)  # never leave a half-started server behind
            raise

    def _poll_ready(
        self,
        proc: subprocess.Popen[bytes],
        timeout_s: float,
        on_tick: Callable[[float], None] | None,
    ) -> float:
        deadline = time.monotonic() + timeout_s
        pause = _POLL_MIN_S
        with self._client() as client:
            while True:
                code = proc.poll()
                if code is not None:
                    self._fail_exited(code)
                if self._answers(client):
                    return time.monotonic() - self._started_at
                self._fail_said(proc)
                now = time.monotonic()
                if now >= deadline:
                    self.stop(grace_s=FAILURE_GRACE_S)  # before the tail: the log is complete
                    raise ServerFailure(
                        FailureClass.TIMEOUT,
                        f"the server was not ready within {timeout_s:.1f} s; its process "
                        "group was ended",
                        log_tail=self.log_tail(),
                    )
                if on_tick is not None:
                    on_tick(now - self._started_at)
                time.sleep(min(pause, max(deadline - now, 0.0)))
                pause = min(pause * 1.5, _POLL_MAX_S)

    def verify_identity(self) -> None:
        """Check that the server answering the port is ours: alive, serving our model name,
        and no process outside our group listening on the port. ServerFailure otherwise."""
        proc = self._require_started()
        if proc.poll() is not None:
            answered = port_is_open(_client_host(self.host), self.port)
            raise ServerFailure(
                FailureClass.STRANGER if answered else FailureClass.CRASHED,
                f"the server process exited (code {proc.returncode})"
                + ("; something else answers its port" if answered else ""),
                log_tail=self.log_tail(),
            )
        try:
            with self._client() as client:
                response = client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise ServerFailure(
                FailureClass.INFRA,
                f"the server runs but {self.base_url}/v1/models does not answer: {exc}",
                log_tail=self.log_tail(),
            ) from None
        names = _model_names(response)
        if response.status_code != 200 or self.served_model_name not in names:
            raise ServerFailure(
                FailureClass.STRANGER,
                f"{self.base_url} serves {names or 'no models'} (HTTP {response.status_code}),"
                f" not {self.served_model_name!r}: the server answering is not ours",
                log_tail=self.log_tail(),
            )
        strangers = self._foreign_listeners()
        if strangers:
            raise ServerFailure(
                FailureClass.STRANGER,
                f"processes outside our server also listen on port {self.port}: {strangers}",
                log_tail=self.log_tail(),
            )

    def stop(self, grace_s: float = 10.0) -> None:
        """End the process group (TERM, ``grace_s``, KILL), reap, drop the lease. Idempotent."""
        if self._proc is None or self._stopped:
            return
        self._stopped = True
        proc = self._proc
        try:
            kill_group(proc.pid, grace_s, reap=proc.poll, not_before=self._start)
            # kill_group already sent SIGKILL if needed; this only reaps the leader.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=FAILURE_GRACE_S)
        finally:
            # A second Ctrl-C (or a TERM) may have cut the above short, and the group lives on:
            # the watchdog ends it once its pipe closes (TERM, its grace, KILL). Hold further
            # interrupts until the group is gone, and keep the lease (the next tuner reaps the
            # group by it) unless it is.
            with deferred_interrupts():
                self._release_watchdog()
                if left := group_members(proc.pid):
                    kill_group(proc.pid, 0.0, reap=proc.poll, not_before=self._start)
                    left = group_members(proc.pid)
                if self._log is not None:
                    self._log.close()
                if not left:
                    remove_sockets_dir(self._sockets)
                    if self._lease_path is not None:
                        self._lease_path.unlink(missing_ok=True)

    def _release_watchdog(self) -> None:
        """Close the watchdog's pipe and reap it: it exits at once when the group is ended, and
        ends the group first when not (its grace, then KILL), so it is given that long."""
        if self._watchdog_pipe is not None:
            os.close(self._watchdog_pipe)
            self._watchdog_pipe = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=2 * FAILURE_GRACE_S + 5.0)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()
            self._watchdog = None

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- state ------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 150) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- helpers ----------------------------------------------------------------------------

    def _require_started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("the server was not started; call start() first")
        return self._proc

    def _client(self) -> httpx.Client:
        # trust_env=False: a proxy from the environment must never see local trial traffic.
        return httpx.Client(base_url=self.base_url, timeout=HTTP_TIMEOUT_S, trust_env=False)

    @staticmethod
    def _answers(client: httpx.Client) -> bool:
        try:
            return all(client.get(path).status_code == 200 for path in ("/health", "/v1/models"))
        except httpx.HTTPError:
            return False

    def _fail_said(self, proc: subprocess.Popen[bytes]) -> None:
        """A server whose log says its start-up failed has failed, though its processes may
        still be going down (vLLM's can take a while, or hang): given FAILURE_GRACE_S to exit
        on its own, then ended; classified from its log either way."""
        if not start_failed(self.log_text()):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=FAILURE_GRACE_S)
        code = proc.poll()
        if code is not None:
            self._fail_exited(code)
        failure, summary = classify_start_failure(self.log_text())  # read before our signals
        self.stop(grace_s=FAILURE_GRACE_S)
        raise ServerFailure(
            failure,
            f"the server failed during start-up and had not exited {FAILURE_GRACE_S:.0f} s "
            f"later (its process group was ended): {summary}",
            log_tail=self.log_tail(),
        )

    def _fail_exited(self, code: int) -> None:
        failure, summary = classify_start_failure(self.log_text())
        self.stop(grace_s=FAILURE_GRACE_S)  # its children may outlive it
        raise ServerFailure(
            failure,
            f"the server exited with code {code} during start-up: {summary}",
            log_tail=self.log_tail(),
        )

    def _foreign_listeners(self) -> list[Any]:
        """Pids (None when unknown) listening on our port that are not in our group."""
        assert self._proc is not None
        ours = {p.pid for p in group_members(self._proc.pid)}
        try:
            sockets = psutil.net_connections(kind="inet")
        except psutil.Error:
            return []  # cannot look; the model-name check stands alone
        return sorted(
            {
                conn.pid
                for conn in sockets
                if conn.status == psutil.CONN_LISTEN
                and conn.laddr
                and conn.laddr.port == self.port
                and conn.pid not in ours
            },
            key=str,
        )
