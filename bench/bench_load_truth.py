"""Which client's TTFT is true? tuner's generator and ``vllm bench serve`` against a server whose
TTFT is known.

The null server in engine mode (``tuner.testing.null_server --step-ms S --prefill-ms P``) gives
every running request one token per step and records, for each request, when it wrote the first
chunk after the request arrived: the TTFT as the server knows it. Each client then runs the same
load (closed loop, the same request count) and its P50/P99 TTFT is set beside the server's
record of that same run. A client that lags adds its lag to every first-chunk timestamp it takes.

    .venv/bin/python bench/bench_load_truth.py --vllm-python $TUNER_VLLM_PYTHON \\
        [--concurrency 16,64,256] [--step-ms 10] [--prefill-ms 20] [--output-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import vllm_bench_serve  # noqa: E402
from tuner.catalog.materialize import materialize, tokenizer_dir  # noqa: E402
from tuner.catalog.models import resolve_model  # noqa: E402
from tuner.runner.ports import free_port  # noqa: E402


def _stats(url: str, reset: bool = False) -> list[float]:
    req = urllib.request.Request(f"{url}/stats/reset" if reset else f"{url}/stats",
                                 method="POST" if reset else "GET")  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        return list(json.loads(resp.read())["ttft_ms"])


def _tuner(url: str, c: int, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tuner", "load", url, "--model", "null",
           "--concurrency", str(c), "--requests", str(n), "--warmup", "0",
           "--prompt-tokens", str(args.prompt_tokens), "--output-tokens", str(args.output_tokens),
           "--text-prompts", "--json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1]))


def _vllm(url: str, c: int, n: int, args: argparse.Namespace, tokenizer: str) -> dict[str, Any]:
    return vllm_bench_serve.run(
        args.vllm_python,
        url=url,
        model="null",
        tokenizer=tokenizer,
        concurrency=c,
        requests=n,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-python", required=True)
    p.add_argument("--concurrency", default="16,64,256")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--prefill-ms", type=float, default=20.0)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--requests-per-stream", type=int, default=4)
    args = p.parse_args()
    cache = Path(os.environ.get("TUNER_HOME", Path.home() / ".cache" / "tuner")) / "models"
    tokenizer = str(tokenizer_dir(materialize(resolve_model("tiny-ernie"), cache)))
    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [sys.executable, "-m", "tuner.testing.null_server", "--port", str(port),
         "--step-ms", str(args.step_ms), "--prefill-ms", str(args.prefill_ms)],
        stdout=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert server.stdout is not None
        server.stdout.readline()
        print(
            f"{os.cpu_count()} cores; server: one token per {args.step_ms:g} ms, first token "
            f">= {args.prefill_ms:g} ms after arrival; {args.output_tokens} tokens per request"
        )
        print("| streams | client | client P50 / P99 TTFT ms | server's P50 / P99 | "
              "client - server, P50 / P99 ms | out tok/s | tuner's self-check |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for c in (int(x) for x in args.concurrency.split(",")):
            n = args.requests_per_stream * c
            for name in ("tuner", "vllm"):
                _stats(url, reset=True)
                r = (
                    _tuner(url, c, n, args)
                    if name == "tuner"
                    else _vllm(url, c, n, args, tokenizer)
                )
                truth = np.asarray(_stats(url)[-n:], dtype=float)  # vLLM's ready check first
                t50, t99 = (float(np.percentile(truth, q)) for q in (50, 99))
                c50, c99 = float(r["median_ttft_ms"]), float(r["p99_ttft_ms"])
                h = r.get("tuner_client")
                check = (
                    "-"
                    if not h
                    else (
                        f"{'client-bound' if h['client_bound'] else 'ok'}: "
                        f"CPU {h['client_cpu']:.0%}, lag P99 {h['loop_lag_p99_ms']:.0f} ms"
                    )
                )
                gap = f"{c50 - t50:+.1f} / {c99 - t99:+.1f}"
                print(
                    f"| {c} | {name} | {c50:.1f} / {c99:.1f} | {t50:.1f} / {t99:.1f} | {gap} | "
                    f"{r['output_throughput']:,.0f} | {check} |",
                    flush=True,
                )
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
