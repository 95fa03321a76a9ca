"""Fidelity of tuner's load generator against ``vllm bench serve`` on one server.

The two clients take turns on the same running server, for each concurrency and each round:
tuner's generator (``tuner load``, as a user runs it) and vLLM's own benchmark (random dataset,
``--ignore-eos``, the same prompt and output lengths and request count). Every pair is printed
with the ratios tuner / vLLM of output and request throughput and P50/P99 TTFT, ITL and E2E,
and each client's own check that it was not the bottleneck.

    # on CPU vLLM, starting the tiny-ernie server itself:
    .venv/bin/python bench/bench_load_fidelity.py --launch tiny-ernie \\
        --vllm-python $TUNER_VLLM_PYTHON --concurrency 4,16 --prompt-tokens 128 --output-tokens 64
    # on a server that already runs (the H200 script does this):
    python bench/bench_load_fidelity.py --url http://127.0.0.1:8000 --model NAME \\
        --tokenizer DIR --vllm-python python3 --concurrency 16,64,256 --rounds 2 --out DIR

``--request-rate 20,40`` adds Poisson-arrival points (``--request-rate R`` for both clients, no
cap in flight, about ``--rate-seconds`` of arrivals each); ``--concurrency ""`` leaves out the
closed-loop ones.

``--out DIR`` keeps every raw result (tuner's and vLLM's JSON) and ``fidelity.jsonl``, one line
per (round, load point, client) with the compared fields.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import vllm_bench_serve  # noqa: E402

# The fields compared, with vLLM's names: throughputs and latency medians / P99s.
FIELDS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


@contextmanager
def launched(
    model_alias: str, vllm_python: str, extra: list[str]
) -> Iterator[tuple[str, str, str]]:
    """Start a catalogued model (dummy weights) on CPU/GPU vLLM; yields (url, served, tokenizer)."""
    from tuner.catalog.materialize import materialize, tokenizer_dir
    from tuner.catalog.models import resolve_model
    from tuner.runner.ports import free_port
    from tuner.runner.server import VllmServer
    from tuner.vllm import argv

    model = resolve_model(model_alias)
    cache = Path(os.environ.get("TUNER_HOME", Path.home() / ".cache" / "tuner")) / "models"
    directory = materialize(model, cache)
    tokenizer = str(tokenizer_dir(directory))
    served = f"fidelity-{uuid.uuid4().hex[:8]}"
    port = free_port("127.0.0.1")
    args = argv.base_args(
        str(directory),
        served_model_name=served,
        host="127.0.0.1",
        port=port,
        load_format="dummy",
        tokenizer=tokenizer,
        dtype=None,
        extra=extra,
    )
    log = ROOT / ".tuner" / "logs" / f"{served}.log"  # where gpu-streams.sh collects logs
    server = VllmServer(
        argv.server_command(vllm_python, args),
        env={},
        host="127.0.0.1",
        port=port,
        served_model_name=served,
        log_path=log,
        lease_dir=None,
    )
    with server:
        server.start()
        startup = server.wait_ready(900)
        print(f"server ready in {startup:.0f} s (log {log})", flush=True)
        yield server.base_url, served, tokenizer


def run_tuner(
    args: argparse.Namespace, url: str, model: str, c: int | None, n: int, rate: float | None
) -> dict[str, Any]:
    load = ["--concurrency", str(c)] if rate is None else ["--request-rate", f"{rate:g}"]
    cmd = [
        sys.executable, "-m", "tuner", "load", url, "--model", model, *load, "--requests", str(n),
        "--prompt-tokens", str(args.prompt_tokens), "--output-tokens", str(args.output_tokens),
        "--warmup", str(args.warmup), "--vocab-size", str(args.vocab_size), "--json",
        *(["--text-prompts"] if args.tuner_prompts == "text" else []),
        # vllm bench serve's seed (0) each round, as tuner load's was when sessions 1-4 ran:
        # both clients' later rounds find their own prompts in the prefix cache alike
        "--seed", "0",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"tuner load failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return dict(lines[-1])


def run_vllm(
    args: argparse.Namespace,
    url: str,
    model: str,
    tokenizer: str,
    c: int | None,
    n: int,
    where: Path,
    rate: float | None,
) -> dict[str, Any]:
    return vllm_bench_serve.run(
        args.vllm_python,
        url=url,
        model=model,
        tokenizer=tokenizer,
        concurrency=c,
        request_rate=rate,
        requests=n,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        warmups=args.warmup,
        result_dir=where,
    )


def _row(result: dict[str, Any]) -> dict[str, Any]:
    return {f: result.get(f) for f in FIELDS} | {
        "completed": result.get("completed"),
        "failed": result.get("failed"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url")
    p.add_argument("--model", help="served model name (with --url)")
    p.add_argument("--tokenizer", help="tokenizer directory for vllm bench serve (with --url)")
    p.add_argument("--launch", help="start this catalogued model instead of --url")
    p.add_argument("--server-arg", action="append", default=[], help="extra vLLM flag (--launch)")
    p.add_argument("--vllm-python", required=True, help="interpreter that has vLLM")
    p.add_argument("--concurrency", default="16,64,256", help='closed-loop streams ("": none)')
    p.add_argument("--request-rate", default="", help="Poisson points, req/s, e.g. 20,40")
    p.add_argument("--rate-seconds", type=float, default=20.0, help="arrivals per rate point")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--min-requests", type=int, default=128)
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument(
        "--tuner-prompts",
        choices=("text", "ids"),
        default="text",
        help="text: words of tuner's synthetic tokenizer, which the server tokenizes as it does "
        "vLLM's random-dataset text (default); ids: token-id lists",
    )
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="fidelity-out-"))
    out.mkdir(parents=True, exist_ok=True)
    # (streams, None) for a closed loop, (None, rate) for Poisson arrivals without a cap.
    points: list[tuple[int | None, float | None]] = [
        (int(c), None) for c in args.concurrency.split(",") if c.strip()
    ] + [(None, float(r)) for r in args.request_rate.split(",") if r.strip()]
    if not points:
        p.error("give --concurrency or --request-rate")

    ctx = server(args, p)
    rows: list[dict[str, Any]] = []
    with ctx as (url, model, tokenizer), open(out / "fidelity.jsonl", "a") as sink:
        for rnd in range(1, args.rounds + 1):
            for c, rate in points:
                if rate is None:
                    n = max(args.min_requests, args.requests_per_stream * int(c or 0))
                else:
                    n = max(args.min_requests, math.ceil(rate * args.rate_seconds))
                tag = f"c{c}" if rate is None else f"r{rate:g}"
                # Who goes first alternates, so that a drift of the server favours neither.
                order = ("tuner", "vllm") if rnd % 2 else ("vllm", "tuner")
                for client in order:
                    t = time.time()
                    if client == "tuner":
                        result = run_tuner(args, url, model, c, n, rate)
                        (out / f"tuner-r{rnd}-{tag}.json").write_text(json.dumps(result))
                    else:
                        result = run_vllm(args, url, model, tokenizer, c, n, out, rate)
                    health = result.get("tuner_client") or {}
                    row = {
                        "round": rnd,
                        "concurrency": c,
                        **({} if rate is None else {"request_rate": rate}),
                        "requests": n,
                        "client": client,
                        "prompt_tokens": args.prompt_tokens,
                        "output_tokens": args.output_tokens,
                        "started_at": t,
                        **_row(result),
                        "client_bound": bool(health.get("client_bound")),
                        "client_cpu": health.get("client_cpu"),
                        "loop_lag_p99_ms": health.get("loop_lag_p99_ms"),
                        "prompts": args.tuner_prompts if client == "tuner" else "text",
                    }
                    rows.append(row)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(
                        f"round {rnd} {tag:<6} {client:<6} out {row['output_throughput']:>10,.0f} "
                        f"tok/s  P99 TTFT {row['p99_ttft_ms']:>8,.1f} ms  P99 E2E "
                        f"{row['p99_e2el_ms']:>9,.1f} ms",
                        flush=True,
                    )
    print()
    print(ratio_table(rows))
    return 0


def server(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> contextlib.AbstractContextManager[tuple[str, str, str]]:
    """The server a bench measures, as ``(url, served model, tokenizer dir)``: the catalogued
    model of ``--launch`` started here (with ``--server-arg`` flags), or the one at ``--url``
    with ``--model`` and ``--tokenizer``."""
    if args.launch:
        extra = [a for arg in args.server_arg for a in arg.split()]
        return launched(args.launch, args.vllm_python, extra)
    if not (args.url and args.model and args.tokenizer):
        parser.error("give --launch MODEL, or --url, --model and --tokenizer")
    return contextlib.nullcontext((args.url, args.model, args.tokenizer))


def ratio_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per round and concurrency, tuner / vLLM for each compared field."""
    from bench.tables.fidelity import ratios_markdown, values_markdown

    return values_markdown(rows) + "\n\n" + ratios_markdown(rows)


if __name__ == "__main__":
    raise SystemExit(main())
