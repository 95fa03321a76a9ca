"""tuner.vllm.flags: the shipped flag lists, spellings and near misses, the help-text reader,
and load_flags' probe and cache, run against a stand-in for vLLM (no vLLM needed)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuner.errors import EnvironmentProblem
from tuner.runner.interpreter import load_flags, probe_flags
from tuner.vllm.flaghelp import catalog_from_help
from tuner.vllm.flags import (
    PROBE,
    FlagCatalog,
    cache_path,
    knob_spelling,
    shipped,
    shipped_versions,
    spelt_like_a_flag,
)


def test_the_shipped_lists_are_the_measured_versions() -> None:
    assert shipped_versions() == ["0.26.0", "0.32.0"]
    for version in shipped_versions():
        catalog = shipped(version)
        assert catalog is not None and catalog.version == version and len(catalog.flags) > 250
    # The CPU build reports a local version; a version tuner never saw has no list.
    cpu = shipped("0.32.0+cpu")
    assert cpu is not None and cpu.version == "0.32.0"
    assert shipped("9.9.9") is None


@pytest.mark.parametrize("version", ["0.26.0", "0.32.0"])
def test_every_flag_is_spelt_as_its_dest_so_a_knob_renders_by_its_name(version: str) -> None:
    catalog = shipped(version)
    assert catalog is not None
    for dest, flag in catalog.flags.items():
        assert flag.dest == dest and flag.name == dest.replace("_", "-"), flag
        assert flag.type in ("int", "float", "str", "bool", "json")


def test_facts_of_the_shipped_lists() -> None:
    old, new = shipped("0.26.0"), shipped("0.32.0")
    assert old is not None and new is not None
    for catalog in (old, new):
        interval = catalog.get("stream_interval")
        assert interval is not None and (interval.type, interval.default) == ("int", 1)
        asched = catalog.get("async-scheduling")
        assert asched is not None and asched.type == "bool" and asched.negatable
        cc = catalog.get("-cc")
        assert cc is not None and cc.dest == "compilation_config" and cc.type == "json"
        level = catalog.get("optimization_level")
        assert level is not None and (level.type, level.default) == ("int", 2)
        dtype = catalog.get("kv_cache_dtype")
        assert dtype is not None and dtype.choices is not None and "fp8" in dtype.choices
    # Removed between the two: the concurrent partial prefills.
    assert old.get("max_num_partial_prefills") is not None
    assert new.get("max_num_partial_prefills") is None
    # 0.32's list comes from the parser, help texts included (vLLM fills them in on --help).
    assert new.get("model") is not None and all(f.help for f in new.flags.values())
    sizes = new.get("cudagraph_capture_sizes")
    assert sizes is not None and sizes.takes_list


def test_one_flag_under_every_spelling() -> None:
    catalog = shipped("0.32.0")
    assert catalog is not None
    for spelling in (
        "--stream-interval",
        "stream-interval",
        "stream_interval",
        " Stream_Interval ",
    ):
        flag = catalog.get(spelling)
        assert flag is not None and flag.dest == "stream_interval", spelling
    assert catalog.get("-asc") == catalog.get("api_server_count")
    assert catalog.get("--device-memory-utilization") == catalog.get("gpu_memory_utilization")
    assert catalog.get("--stream-interval=8") == catalog.get("stream_interval")
    assert catalog.get("stream_intervall") is None


def test_near_misses_name_the_closest_real_flags() -> None:
    catalog = shipped("0.32.0")
    assert catalog is not None
    assert catalog.closest("stream_intervall")[0] == "stream-interval"
    assert catalog.closest("--max-num-seq")[0] == "max-num-seqs"
    assert len(catalog.closest("block-sise", n=2)) <= 2
    assert catalog.closest("zzzzzzzzzzzz") == []


def test_knob_spellings() -> None:
    assert knob_spelling("--stream-interval") == "stream_interval"
    assert knob_spelling("compilation-config.cudagraph_mode") == "compilation_config.cudagraph_mode"
    assert knob_spelling("-asc") == "-asc"
    assert spelt_like_a_flag("--stream-interval") and spelt_like_a_flag("-O")
    assert not spelt_like_a_flag("stream interval") and not spelt_like_a_flag("a=b")


HELP = """\
usage: vllm serve [model_tag] [options]

options:
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
                        How many API server processes to run. (default: None)
  --headless            Run in headless mode. (default: False)
  -h, --help            show this help message and exit

SchedulerConfig:
  Configuration for the scheduler.

  --async-scheduling, --no-async-scheduling
                        If set to False, disable async scheduling. (default:
                        None)
  --kv-cache-dtype {auto,fp8,fp8_e5m2}
                        Data type for kv cache storage. (default: auto)
  --long-prefill-token-threshold LONG_PREFILL_TOKEN_THRESHOLD
                        For chunked prefill. (default: 0)
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
                        The fraction of GPU memory. (default: 0.92)
  --max-num-batched-tokens MAX_NUM_BATCHED_TOKENS
                        Parse human-readable integers like '1k'. (default:
                        None)
  --cudagraph-capture-sizes CUDAGRAPH_CAPTURE_SIZES [CUDAGRAPH_CAPTURE_SIZES ...]
                        Sizes to capture cudagraph. (default: None)
  --compilation-config COMPILATION_CONFIG, -cc COMPILATION_CONFIG
                        torch.compile configuration.
                        Should either be a valid JSON string or JSON keys
                        passed individually. (default: {'mode': None})
  --tokenizer TOKENIZER
                        Name or path of the tokenizer. (default: None)
  --block-size BLOCK_SIZE
                        Size of a cache block. (default: None)
"""


def test_the_help_text_reader_types_what_the_help_shows() -> None:
    catalog = catalog_from_help(HELP, "0.0.1")
    assert catalog.version == "0.0.1"
    kinds = {dest: f.type for dest, f in catalog.flags.items()}
    assert kinds == {
        "api_server_count": "str",  # no default to tell: a reference list types it (below)
        "headless": "bool",
        "async_scheduling": "bool",
        "kv_cache_dtype": "str",
        "long_prefill_token_threshold": "int",
        "gpu_memory_utilization": "float",
        "max_num_batched_tokens": "int",
        "cudagraph_capture_sizes": "str",
        "compilation_config": "json",
        "tokenizer": "str",
        "block_size": "str",
    }
    get = catalog.flags.__getitem__
    assert get("api_server_count").aliases == ("-asc",)
    assert get("async_scheduling").negatable and not get("headless").negatable
    assert get("headless").default is False and get("async_scheduling").default is None
    assert get("kv_cache_dtype").choices == ("auto", "fp8", "fp8_e5m2")
    assert get("gpu_memory_utilization").default == 0.92
    assert get("cudagraph_capture_sizes").takes_list
    assert get("async_scheduling").help == "If set to False, disable async scheduling."
    # Types from another version's parser where it has the flag.
    typed = catalog_from_help(HELP, "0.0.1", reference=shipped("0.32.0"))
    assert typed.flags["api_server_count"].type == "int"
    assert typed.flags["block_size"].type == "int"
    assert typed.flags["cudagraph_capture_sizes"].type == "int"


def test_the_shipped_0_26_list_is_what_the_reader_makes_of_its_help_text() -> None:
    catalog = shipped("0.26.0")
    assert catalog is not None and "--help=all" in catalog.source
    # Round trip: the JSON holds exactly what the records hold.
    assert FlagCatalog.from_dict(catalog.to_dict()) == catalog


# A stand-in for vLLM with the two calls the probe makes, so the probe runs for real.
FAKE_VLLM = {
    "vllm/__init__.py": "__version__ = '0.99.0'\n",
    "vllm/utils/__init__.py": "import argparse\nFlexibleArgumentParser = argparse.ArgumentParser\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": textwrap.dedent(
        """\
        import argparse, json, sys
        def optional_type(kind):
            def parse(text):
                return None if text in ("", "None") else kind(text)
            return parse
        def make_arg_parser(p):
            assert "--help=all" in sys.argv  # the probe asks for the help texts
            p.add_argument("model_tag", nargs="?")
            p.add_argument("--stream-interval", type=int, default=1, help="Tokens per chunk.")
            p.add_argument("--block-size", type=optional_type(int), default=None)
            p.add_argument("--swap", type=float, default=4.0)
            p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction)
            p.add_argument("--headless", action="store_true")
            p.add_argument("--compilation-config", "-cc", type=json.loads, default=None)
            p.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
            p.add_argument("--optimization-level", type=str, default=2)
            p.add_argument("--sizes", type=int, nargs="+")
            return p
        """
    ),
}


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for name, text in FAKE_VLLM.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    # An interpreter that has the stand-in on its path, as a vLLM venv's python has vLLM.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def test_the_probe_reads_the_parser_of_the_vllm_it_runs_in(fake_vllm: Path) -> None:
    catalog = probe_flags(str(fake_vllm), "0.99.0")
    assert catalog.source == "vllm.entrypoints.openai.cli_args.make_arg_parser"
    kinds = {dest: (f.type, f.default) for dest, f in catalog.flags.items()}
    assert kinds == {
        "stream_interval": ("int", 1),
        "block_size": ("int", None),
        "swap": ("float", 4.0),
        "async_scheduling": ("bool", None),
        "headless": ("bool", False),
        "compilation_config": ("json", None),
        "kv_cache_dtype": ("str", "auto"),
        "optimization_level": ("int", 2),  # text to the parser, a level number to vLLM
        "sizes": ("int", None),
    }
    assert catalog.flags["stream_interval"].help == "Tokens per chunk."
    assert catalog.flags["compilation_config"].aliases == ("-cc",)
    assert catalog.flags["sizes"].takes_list


def test_load_flags_asks_once_per_version_then_reads_its_cache(
    fake_vllm: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = load_flags(str(fake_vllm), "0.99.0", cache)
    assert json.loads(cache_path(cache, "0.99.0").read_text())["version"] == "0.99.0"
    fake_vllm.unlink()  # no interpreter any more: the cache answers
    assert load_flags(str(fake_vllm), "0.99.0", cache) == first
    with pytest.raises(EnvironmentProblem, match="cannot run"):
        load_flags(str(fake_vllm), "0.98.0", cache)
    # A version tuner ships a list for falls back to it when the interpreter cannot answer.
    assert load_flags(str(fake_vllm), "0.32.0", cache) == shipped("0.32.0")


def test_a_broken_interpreter_is_an_environment_problem(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ImportError: no vllm' >&2\nexit 1\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(EnvironmentProblem, match="no vllm"):
        probe_flags(str(python), "0.99.0")


def test_the_probe_uses_only_the_standard_library_and_vllm() -> None:
    compiled = compile(PROBE, "<probe>", "exec")
    imported = {n for n in compiled.co_names if n in sys.stdlib_module_names}
    assert imported <= {"argparse", "importlib", "json", "sys"}
    # It runs in an interpreter without vLLM far enough to fail on the import alone.
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
        check=False,
    )
    assert proc.returncode != 0 and "vllm" in proc.stderr
