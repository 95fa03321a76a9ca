"""A fake vLLM OpenAI-compatible server: ``python -m tuner.testing.fake_server`` takes vLLM's
api_server argv and behaves like vLLM wherever tuner can see it.

- It prints the log lines :mod:`tuner.vllm.logparse` reads, in vLLM 0.32's wording, after a
  start-up delay (``TUNER_FAKE_STARTUP_S``, default 0.3 s; a third of it when its
  ``VLLM_CACHE_ROOT`` holds an earlier start's artefacts), and spawns one child process
  (like vLLM's engine core, argv marked ``tuner-fake-engine-core``) so that ending the whole
  process group is really exercised. SIGTERM or SIGINT to the server's pid alone ends that
  child too, as vLLM's API server does; a server that dies without its shutdown (SIGKILL, a
  failed start) leaves it behind.
- It serves GET /health, /v1/models, /metrics (``vllm:`` Prometheus names: gauges, counters,
  and the request-phase histograms e2e_request_latency, request_queue_time,
  request_inference_time, request_prefill_time, request_decode_time ``_seconds``, fed by the
  simulated times of every request that ran to its end), /version and POST /v1/completions,
  /v1/chat/completions, streamed as vLLM streams them.
- Performance model: at most ``--max-num-seqs`` requests decode at once (the rest queue); a
  decode step costs ``TUNER_FAKE_STEP_MS`` (default 2 ms) and grows by 2 % per other running
  request; prefill costs 20 us per prompt token not found in the prefix cache. The KV cache
  holds ``500,000 * --gpu-memory-utilization`` tokens (twice that with an fp8
  ``--kv-cache-dtype``) times ``TUNER_FAKE_KV_SCALE``; a request is admitted when its prompt
  fits, and when a token finds none free the request admitted last is preempted
  (``vllm:num_preemptions_total``): it waits to be admitted again, then recomputes its whole
  sequence at the prefill rate.
- Bottleneck regimes (``TUNER_FAKE_REGIME``):

  - unset or empty: none in particular; ``--stream-interval`` and ``--async-scheduling`` are
    accepted and change nothing, ``TUNER_FAKE_KV_SCALE`` defaults to 1 (no test load fills
    the cache) and ``TUNER_FAKE_CHUNK_CPU_MS`` to 0.
  - ``frontend``: the API server's CPU. Every streamed event that carries text costs
    ``TUNER_FAKE_CHUNK_CPU_MS`` (default 1.5) of CPU time spun in the event loop, so under
    load the process keeps one core busy and its events per second cap the throughput.
    ``--stream-interval N`` sends the first token alone, then N tokens an event (the rest
    with the last), as vLLM does: about N times less CPU per token.
    ``--async-scheduling`` makes a step 15 % shorter. ``--api-server-count`` is accepted and
    changes nothing: the fake is always one API server process (real vLLM would spread the
    frontend's work over that many).
  - ``kv``: the KV cache. As ``frontend`` for ``--stream-interval`` and
    ``--async-scheduling``, without the CPU cost per event; ``TUNER_FAKE_KV_SCALE`` defaults
    to 1/60: 7,500 tokens at utilization 0.9, where 16 streams of 512 + 256 tokens need up
    to 12,288. More memory, an fp8 KV cache or a lower ``--max-num-seqs`` preempt less.

  ``TUNER_FAKE_KV_SCALE`` and ``TUNER_FAKE_CHUNK_CPU_MS``, when set, count in any regime.
- Faults (``TUNER_FAKE_FAULT``): hang, crash_at_start, oom_at_start, kv_at_start,
  crash_mid_load (SIGKILLs itself when request ``TUNER_FAKE_CRASH_AFTER`` + 1 arrives,
  default 5), stranger (serves another model name), dies_on_short_first_prompt (a first
  prompt under 8 tokens kills the engine core: every answer is 500 from then on, as vLLM CPU
  after a SIGILL). ``TUNER_FAKE_FAULT_WHEN`` limits the fault to servers whose argv contains
  that text (one configuration of a study). ``TUNER_FAKE_CHILD_IGNORES_TERM=1``
  makes the child ignore SIGTERM, so that only SIGKILL ends it. ``TUNER_FAKE_EXIT_DELAY_S``
  (default 0): seconds a failed start-up takes to exit after saying so (real vLLM takes a
  while to take its processes down).
- Answers have the form vLLM's have for ``n``, ``logprobs`` (completions) and ``stop``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tuner.testing.fake_answers import Options, respond
from tuner.testing.fake_engine import (
    ASYNC_SCHEDULING_STEP,
    AUTO_BACKENDS,
    CHILD_CODE,
    ENGINE_CORE_MARKER,
    FAKE_VLLM_VERSION,
    FAULTS,
    FRONTEND_CHUNK_CPU_MS,
    KNOWN_BACKENDS,
    KV_DTYPES,
    KV_REGIME_SCALE,
    KV_TOKENS_AT_FULL_MEMORY,
    REGIMES,
    STRANGER_MODEL,
    FakeEngine,
)


def _error(message: str, err_type: str, code: int, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    return JSONResponse(body, status_code=code)


def _words(value: Any) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return [f"t{v}" for v in value]  # token ids
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value).split()


def create_app(
    served_model_name: str,
    max_num_seqs: int = 256,
    *,
    max_model_len: int = 2048,
    step_s: float = 0.002,
    enable_prefix_caching: bool = True,
    kv_cache_tokens: int = 450_000,
    model_path: str | None = None,
    crash_after: int | None = None,
    crash: Callable[[], None] | None = None,
    short_first_prompt_kills: Callable[[], None] | None = None,
    stream_interval: int = 1,
    chunk_cpu_s: float = 0.0,
    prefill_s_per_token: float = 20e-6,
) -> Starlette:
    """The fake's ASGI app, for in-process tests. ``crash`` runs when request number
    ``crash_after + 1`` arrives (the process entry point passes a SIGKILL to itself).
    ``short_first_prompt_kills``: when the first generation request has a prompt of fewer
    than :data:`SHORT_PROMPT` tokens, it is called (the process kills its engine core) and
    the engine is dead from then on, as vLLM CPU's worker was after a SIGILL: that request
    and every later one answer 500, and ``/health`` too. ``stream_interval`` (tokens per
    streamed event) and ``chunk_cpu_s`` (CPU time per event) are the API server's costs
    (:func:`tuner.testing.fake_answers.respond`)."""
    engine = FakeEngine(
        max_num_seqs,
        step_s,
        prefill_s_per_token=prefill_s_per_token,
        kv_cache_tokens=kv_cache_tokens,
        enable_prefix_caching=enable_prefix_caching,
    )
    arrivals = [0]
    dead: list[str] = []  # why the engine died, once it has

    async def health(_: Request) -> Response:
        return Response(status_code=500 if dead else 200)

    async def models(_: Request) -> Response:
        card = {
            "id": served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": model_path or served_model_name,
            "parent": None,
            "max_model_len": max_model_len,
            "permission": [],
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def metrics(_: Request) -> Response:
        return PlainTextResponse(engine.metrics_text(served_model_name))

    async def version(_: Request) -> Response:
        return JSONResponse({"version": FAKE_VLLM_VERSION})

    async def generate(request: Request) -> Response:
        chat = request.url.path.endswith("/chat/completions")
        try:
            body = await request.json()
            if chat:
                prompt = [w for m in body["messages"] for w in _words(m.get("content", ""))]
                prompt = ["<|user|>", *prompt, "<|assistant|>"]
            else:
                prompt = _words(body["prompt"])
            max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _error(f"invalid request: {exc}", "BadRequestError", 400)
        model = body.get("model")
        if model and model != served_model_name:
            return _error(
                f"The model `{model}` does not exist. Valid aliases: {served_model_name}.",
                "NotFoundError",
                404,
                "model",
            )
        if len(prompt) + max_tokens > max_model_len:
            return _error(
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {len(prompt) + max_tokens} tokens ({len(prompt)} in the prompt, "
                f"{max_tokens} for the completion). Please reduce the length of the input "
                "prompt or the number of requested output tokens.",
                "BadRequestError",
                400,
            )
        arrivals[0] += 1
        if crash is not None and crash_after is not None and arrivals[0] > crash_after:
            crash()
        if short_first_prompt_kills is not None and arrivals[0] == 1 and len(prompt) < SHORT_PROMPT:
            dead.append(f"EngineCore died (SIGILL) on a {len(prompt)}-token first prompt")
            short_first_prompt_kills()
        if dead:
            return _error(f"EngineDeadError: {dead[0]}", "EngineDeadError", 500)
        try:
            options = Options.of(body)
        except (ValueError, TypeError) as exc:
            return _error(f"invalid request: {exc}", "BadRequestError", 400)
        return await respond(
            engine,
            served_model_name,
            chat,
            prompt,
            max_tokens,
            options,
            stream_interval=max(1, stream_interval),
            chunk_cpu_s=chunk_cpu_s,
        )

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/metrics", metrics),
        Route("/version", version),
        Route("/v1/completions", generate, methods=["POST"]),
        Route("/v1/chat/completions", generate, methods=["POST"]),
    ]
    return Starlette(routes=routes)


SHORT_PROMPT = 8  # tokens: a shorter first prompt kills the engine under that fault
# -- the process: vLLM's argv, vLLM's log lines, faults --------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tuner.testing.fake_server", allow_abbrev=False)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--attention-config", "-ac", default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--stream-interval", type=int, default=1)  # typed as vLLM's: a bad value exits
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--api-server-count", "-asc", type=int, default=None)
    args, _unknown = p.parse_known_args(argv)  # vLLM flags the fake does not model
    return args


def _log(level: str, where: str, message: str, engine_pid: int | None = None) -> None:
    prefix = f"(EngineCore_DP0 pid={engine_pid}) " if engine_pid else ""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"{prefix}{level} {stamp} [{where}] {message}", flush=True)


def _fail(message: str, engine_pid: int) -> int:
    """Print an engine-core traceback the way vLLM does, then the API server's wrapper."""
    _log("ERROR", "core.py:1120", "EngineCore failed to start.", engine_pid)
    for line in (
        "Traceback (most recent call last):",
        '  File "/fake/vllm/v1/engine/core.py", line 1111, in run_engine_core',
        message,
    ):
        _log("ERROR", "core.py:1120", line, engine_pid)
    print("Traceback (most recent call last):", flush=True)
    print('  File "/fake/vllm/entrypoints/launchers/api_server/entry.py", line 235', flush=True)
    print(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        flush=True,
    )
    return 1


def _attention(args: argparse.Namespace) -> tuple[str | None, int | None]:
    """The backend and FlashAttention version asked for, vLLM 0.32's way (env as fallback)."""
    config = json.loads(args.attention_config) if args.attention_config else {}
    if args.attention_backend and config.get("backend"):
        raise ValueError("attention_backend and attention_config.backend are mutually exclusive")
    backend = args.attention_backend or config.get("backend")
    backend = backend or os.environ.get("VLLM_ATTENTION_BACKEND")
    version = config.get("flash_attn_version") or os.environ.get("VLLM_FLASH_ATTN_VERSION")
    if backend is not None and backend.upper() not in KNOWN_BACKENDS:
        raise ValueError(
            f"Unknown attention backend: '{backend}'. Valid options are: "
            + ", ".join(KNOWN_BACKENDS)
        )
    return (backend.upper() if backend else None), (int(version) if version else None)


def _kv_tokens(args: argparse.Namespace, scale: float) -> int:
    """The KV cache's capacity in tokens: proportional to the memory given, doubled by fp8."""
    fp8 = 2 if "fp8" in args.kv_cache_dtype else 1
    return int(KV_TOKENS_AT_FULL_MEMORY * args.gpu_memory_utilization * fp8 * scale)


def _env_number(name: str, default: float, *, zero_ok: bool) -> float:
    """A non-negative number from the environment (positive unless ``zero_ok``), else
    ``default``; ValueError names a bad one."""
    text = os.environ.get(name, "").strip()
    value = float(text) if text else default
    if not (value >= 0 if zero_ok else value > 0):
        raise ValueError(f"{name}={text!r} must be {'>= 0' if zero_ok else '> 0'}")
    return value


def _start_up(
    args: argparse.Namespace, fault: str, engine_pid: int, kv_scale: float = 1.0
) -> int | None:
    """Log start-up like vLLM; return an exit code when start-up fails, None when ready."""
    mml, gmu = args.max_model_len, args.gpu_memory_utilization
    if fault == "hang":
        _log("INFO", "gpu_model_runner.py:3279", "Starting to load model ...", engine_pid)
        while True:
            time.sleep(3600)
    if fault == "crash_at_start":
        return _fail("RuntimeError: fake engine core crashed (TUNER_FAKE_FAULT)", engine_pid)
    if fault == "oom_at_start" or gmu > 0.95:
        return _fail(
            "ValueError: Available memory on node 0 (10.79/23.43 GiB) on startup is less than "
            f"desired CPU memory utilization ({gmu}, 21.56 GiB). On the CPU backend, the "
            "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved "
            "(despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. "
            "`--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.",
            engine_pid,
        )
    if args.kv_cache_dtype not in KV_DTYPES:
        print(
            f"error: argument --kv-cache-dtype: invalid choice: '{args.kv_cache_dtype}' "
            f"(choose from {', '.join(repr(d) for d in KV_DTYPES)})",
            flush=True,
        )
        return 2
    try:
        backend, fa_version = _attention(args)
    except ValueError as exc:
        return _fail(f"ValueError: {exc}", engine_pid)
    kv_tokens = _kv_tokens(args, kv_scale)
    if fault == "kv_at_start" or mml > kv_tokens:
        return _fail(
            f"ValueError: To serve at least one request with the model's max seq len ({mml}), "
            "(4.0 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(0.5 GiB). Based on the available memory, the estimated maximum model length is "
            f"{min(mml - 1, kv_tokens)}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.",
            engine_pid,
        )
    if backend is None:
        names = ", ".join(f"'{b}'" for b in AUTO_BACKENDS)
        msg = f"Using FLASH_ATTN attention backend out of potential backends: [{names}]."
    else:
        msg = f"Using AttentionBackendEnum.{backend} backend."
    _log("INFO", "cuda.py:446", msg, engine_pid)
    if (backend or "FLASH_ATTN") == "FLASH_ATTN":
        msg = f"Using FlashAttention version {fa_version or 3}"
        _log("INFO", "flash_attn.py:1118", msg, engine_pid)
    msg = (
        f"GPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for {mml:,} tokens "
        f"per request: {kv_tokens / mml:.2f}x"
    )
    _log("INFO", "kv_cache_utils.py:2328", msg, engine_pid)
    return None


def _spawn_engine_core() -> subprocess.Popen[bytes]:
    """The engine core child, ended (TERM, as vLLM's API server shuts its engine core down)
    when SIGTERM or SIGINT reaches the server alone: a `kill <pid>` or a Ctrl-C. While serving,
    uvicorn's own handlers shut the server down first, then raise the signal again."""
    ignore = "1" if os.environ.get("TUNER_FAKE_CHILD_IGNORES_TERM") == "1" else "0"
    cmd = [sys.executable, "-c", CHILD_CODE, ignore, ENGINE_CORE_MARKER]
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def end(signum: int, _frame: object) -> None:
        # Not waited for: one that ignores TERM (TUNER_FAKE_CHILD_IGNORES_TERM) is left to the
        # launcher's KILL, and the server dies of the signal at once, as it did before.
        child.terminate()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, end)
    return child


def _bind_engine_sockets() -> list[socket.socket]:
    """Two Unix sockets bound as files named by a UUID in ``VLLM_RPC_BASE_PATH``, as vLLM's API
    server and engine core bind their ZeroMQ sockets; and, as vLLM's after its process is
    killed, never removed. None without that variable (where vLLM would take the temporary
    directory): tests that start the fake by hand leave nothing there."""
    base = os.environ.get("VLLM_RPC_BASE_PATH")
    if not base:
        return []
    bound = []
    for _ in range(2):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(os.path.join(base, str(uuid.uuid4())))
        except OSError as exc:  # vLLM would fail here; the fake says so and serves on
            _log("WARNING", "utils.py:180", f"cannot bind an IPC socket in {base}: {exc}")
            sock.close()
            continue
        bound.append(sock)
    return bound


def _startup_s() -> float:
    """The start-up delay: ``TUNER_FAKE_STARTUP_S``, a third of it when ``VLLM_CACHE_ROOT``
    already holds what an earlier start compiled there (as vLLM's warm starts are faster)."""
    delay = float(os.environ.get("TUNER_FAKE_STARTUP_S", "0.3"))
    root = os.environ.get("VLLM_CACHE_ROOT")
    if not root:
        return delay
    compiled = Path(root) / "torch_compile_cache" / "fake-graph"
    if compiled.exists():
        return delay / 3
    compiled.parent.mkdir(parents=True, exist_ok=True)
    compiled.write_text("compiled by tuner's fake server\n")
    return delay


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake server with vLLM's api_server argv; returns the exit code."""
    import uvicorn  # only the process needs it, not in-process tests

    args = _parse(argv)
    fault = os.environ.get("TUNER_FAKE_FAULT", "")
    if fault and fault not in FAULTS:
        print(f"unknown TUNER_FAKE_FAULT {fault!r}; known: {', '.join(FAULTS)}", flush=True)
        return 2
    regime = os.environ.get("TUNER_FAKE_REGIME", "").strip()
    if regime not in REGIMES:
        print(f"unknown TUNER_FAKE_REGIME {regime!r}; known: {', '.join(REGIMES[1:])}", flush=True)
        return 2
    try:
        kv_scale = _env_number(
            "TUNER_FAKE_KV_SCALE", KV_REGIME_SCALE if regime == "kv" else 1.0, zero_ok=False
        )
        chunk_ms = FRONTEND_CHUNK_CPU_MS if regime == "frontend" else 0.0
        chunk_cpu_s = _env_number("TUNER_FAKE_CHUNK_CPU_MS", chunk_ms, zero_ok=True) / 1000.0
    except ValueError as exc:
        print(f"bad fake-server setting: {exc}", flush=True)
        return 2
    when = os.environ.get("TUNER_FAKE_FAULT_WHEN", "")
    if when and when not in " ".join(sys.argv[1:] if argv is None else argv):
        fault = ""  # the fault is only this configuration's
    served = (args.served_model_name or [args.model])[0]
    _log("INFO", "entry.py:1877", f"vLLM API server version {FAKE_VLLM_VERSION}")
    _log("INFO", "utils.py:253", f"non-default args: {vars(args)}")
    _log("INFO", "__init__.py:291", "Automatically detected platform cuda.")
    engine_core = _spawn_engine_core()
    sockets = _bind_engine_sockets()  # noqa: F841 - held open while the server lives
    time.sleep(_startup_s())
    code = _start_up(args, fault, engine_core.pid, kv_scale)
    if code is not None:
        time.sleep(float(os.environ.get("TUNER_FAKE_EXIT_DELAY_S", "0")))
        return code  # the engine core is left behind on purpose: the launcher must end it
    crash_after = int(os.environ.get("TUNER_FAKE_CRASH_AFTER", "5"))
    short_kills = fault == "dies_on_short_first_prompt"
    step_ms = float(os.environ.get("TUNER_FAKE_STEP_MS", "2"))
    if regime and args.async_scheduling:
        step_ms *= ASYNC_SCHEDULING_STEP
    app = create_app(
        STRANGER_MODEL if fault == "stranger" else served,
        args.max_num_seqs,
        max_model_len=args.max_model_len,
        step_s=step_ms / 1000.0,
        enable_prefix_caching=args.enable_prefix_caching,
        kv_cache_tokens=_kv_tokens(args, kv_scale),
        model_path=args.model,
        crash_after=crash_after if fault == "crash_mid_load" else None,
        crash=lambda: os.kill(os.getpid(), signal.SIGKILL),
        short_first_prompt_kills=(lambda: engine_core.send_signal(signal.SIGKILL))
        if short_kills
        else None,
        stream_interval=args.stream_interval if regime else 1,
        chunk_cpu_s=chunk_cpu_s,
    )
    _log("INFO", "entry.py:140", f"Starting vLLM server on http://{args.host}:{args.port}")
    try:
        uvicorn.run(
            app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1
        )
    finally:
        engine_core.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
