"""Which flags ``vllm serve`` takes, with their types: read from the installed vLLM itself.

``import vllm`` costs seconds, so :func:`tuner.runner.interpreter.load_flags` asks the vLLM
interpreter once per version (:data:`PROBE`, run as ``python -c``: it builds the serve argument
parser the way ``vllm serve`` does, ``make_arg_parser(FlexibleArgumentParser())``, falling back to
``AsyncEngineArgs.add_cli_args``, and prints every option as JSON) and caches the answer as
``vllm-flags-<version>.json``. :func:`shipped` returns the snapshots that ship with tuner for
the versions it has measured on (``flag_lists/<version>.json``): 0.32.0 dumped by
:data:`PROBE` from the CPU build, 0.26.0 read by :func:`tuner.vllm.flaghelp.catalog_from_help`
from the GPU machine's ``vllm serve --help=all``.

A flag's ``type`` is what its value is: ``int``, ``float``, ``str``, ``bool`` (``--x`` /
``--no-x``, or a bare switch when ``negatable`` is false) or ``json`` (a config object:
``--compilation-config '{"cudagraph_mode": "FULL"}'``). The probe finds it by feeding the
argparse type callable samples, because vLLM wraps most types in closures
(``optional_type(int)``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tuner.vllm.version import parse_version

FLAG_TYPES = ("int", "float", "str", "bool", "json")
PROBE_TIMEOUT_S = 300.0
PROBE_MARK = "TUNER_FLAGS_PROBE "
HELP_CHARS = 400

# Runs inside the vLLM interpreter: the standard library and vllm only; one marked JSON line.
PROBE = r"""
import argparse, importlib, json, sys
# vLLM fills in help texts only when it sees --help in the command line (engine/arg_utils.py's
# NEEDS_HELP); "serve" stays out of it, or --model would be left out as in `serve --help`.
sys.argv = ["-c", "--help=all"]
def parser():
    fap = None
    for mod in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            fap = getattr(importlib.import_module(mod), "FlexibleArgumentParser")
            break
        except (ImportError, AttributeError):
            pass
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make = getattr(importlib.import_module(mod), "make_arg_parser")
        except (ImportError, AttributeError):
            continue
        return make(fap()), mod + ".make_arg_parser"
    from vllm.engine.arg_utils import AsyncEngineArgs
    return AsyncEngineArgs.add_cli_args(fap()), "vllm.engine.arg_utils.AsyncEngineArgs"
def kind(a):
    if isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "bool"
    if type(a).__name__ == "BooleanOptionalAction":
        return "bool"
    t = a.type
    if t is None:
        return "str"
    for sample, judge in (("{}", lambda v: not isinstance(v, (str, int, float))),
                          ("1", None)):
        try:
            v = t(sample)
        except BaseException:
            continue
        if judge is not None:
            if judge(v):
                return "json"
            continue
        if isinstance(v, bool):
            return "bool"
        return "int" if isinstance(v, int) else "float" if isinstance(v, float) else "str"
    return "str"
def value_kind(a):
    k = kind(a)
    d = a.default
    if k == "str" and a.choices is None and isinstance(d, int) and not isinstance(d, bool):
        return "int"  # an enum of levels (-O): the parser takes text, the value is a number
    return k
def plain(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)[:200]
p, source = parser()
flags = []
for a in p._actions:
    if not a.option_strings or isinstance(a, argparse._HelpAction):
        continue
    longs = [o for o in a.option_strings if o.startswith("--") and not o.startswith("--no-")]
    if not longs:
        continue
    flags.append({
        "name": longs[0][2:], "dest": a.dest, "type": value_kind(a),
        "choices": None if a.choices is None else [str(c) for c in a.choices],
        "default": plain(None if a.default == argparse.SUPPRESS else a.default),
        "help": " ".join(str(a.help or "").split())[:HELP],
        "aliases": [o for o in a.option_strings if o != longs[0] and not o.startswith("--no-")],
        "negatable": any(o.startswith("--no-") for o in a.option_strings),
        "nargs": None if a.nargs in (None, 0) else str(a.nargs),
        "deprecated": bool(getattr(a, "deprecated", False))
        or a in getattr(p, "_deprecated", ()),
    })
try:
    import vllm
    version = str(getattr(vllm, "__version__", ""))
except Exception:
    version = ""
print(MARK + json.dumps({"version": version, "source": source, "flags": flags}))
""".replace("HELP", str(HELP_CHARS)).replace("MARK", repr(PROBE_MARK))


@dataclass(frozen=True)
class Flag:
    """One option of ``vllm serve``."""

    name: str  # "stream-interval"
    dest: str  # "stream_interval"
    type: str  # "int" | "float" | "str" | "bool" | "json"
    choices: tuple[str, ...] | None
    default: Any
    help: str
    aliases: tuple[str, ...] = ()  # other spellings: "-O", "-asc", "--data-parallel-size"...
    negatable: bool = False  # a bool with a --no-NAME form (False: a bare switch)
    nargs: str | None = None  # "+", "*", "?" for options taking several values
    deprecated: bool = False

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def takes_list(self) -> bool:
        return self.nargs in ("+", "*") or (self.nargs or "").isdigit()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Flag:
        choices = data.get("choices")
        kind = str(data["type"])
        if kind not in FLAG_TYPES:
            raise ValueError(f"flag {data['name']!r} has unknown type {kind!r}")
        return cls(
            name=str(data["name"]),
            dest=str(data["dest"]),
            type=kind,
            choices=None if choices is None else tuple(str(c) for c in choices),
            default=data.get("default"),
            help=str(data.get("help") or ""),
            aliases=tuple(str(a) for a in data.get("aliases") or ()),
            negatable=bool(data.get("negatable", False)),
            nargs=None if data.get("nargs") is None else str(data["nargs"]),
            deprecated=bool(data.get("deprecated", False)),
        )


def spelling_key(name: str) -> str:
    """How tuner compares flag names: ``--stream-interval``, ``stream-interval`` and
    ``stream_interval`` are one flag (vLLM's parser accepts both dashes and underscores)."""
    return name.strip().lstrip("-").replace("-", "_").lower()


_SPELT_LIKE_A_FLAG = re.compile(r"^(--?)?[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_]*)?$")


def spelt_like_a_flag(name: str) -> bool:
    """Whether ``name`` could name a flag (``stream_interval``, ``--stream-interval``, ``-asc``)
    or a key inside a JSON-valued one (``compilation_config.cudagraph_mode``)."""
    return _SPELT_LIKE_A_FLAG.match(name.strip()) is not None


def knob_spelling(name: str) -> str:
    """A knob name as tuner keys it before the flag list is read: ``--stream-interval`` and
    ``stream_interval`` are ``stream_interval`` (``compilation-config.cudagraph_mode``:
    ``compilation_config.cudagraph_mode``); a short alias (``-asc``) stays as written."""
    text = name.strip()
    if re.match(r"^-[A-Za-z]", text):
        return text
    head, dot, sub = text.partition(".")
    return spelling_key(head) + (dot + sub.strip() if dot else "")


@dataclass(frozen=True)
class FlagCatalog:
    """The flags of one vLLM version, keyed by dest."""

    version: str
    flags: Mapping[str, Flag]
    source: str = ""  # how it was read: the parser builder, a help text, a snapshot
    _index: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, str] = {}
        for dest, flag in self.flags.items():
            for spelling in (flag.name, *(a for a in flag.aliases if a.startswith("--"))):
                index.setdefault(spelling_key(spelling), dest)
            index.setdefault(spelling_key(dest), dest)
        for dest, flag in self.flags.items():  # short aliases (-O, -asc) are matched exactly
            for alias in flag.aliases:
                if not alias.startswith("--"):
                    index.setdefault(alias, dest)
        object.__setattr__(self, "_index", index)

    def get(self, name: str) -> Flag | None:
        """The flag spelt ``name`` (``--stream-interval``, ``stream-interval``,
        ``stream_interval``, an alias such as ``-asc``); None when vLLM has no such flag."""
        text = name.strip().split("=", 1)[0]
        dest = self._index.get(text) if text.startswith("-") else None
        if dest is None:
            dest = self._index.get(spelling_key(text))
        return None if dest is None else self.flags[dest]

    def closest(self, name: str, n: int = 3) -> list[str]:
        """Up to ``n`` real flag names (``stream-interval``) closest to ``name``."""
        names = {spelling_key(f.name): f.name for f in self.flags.values()}
        found = difflib.get_close_matches(spelling_key(name), list(names), n=n, cutoff=0.6)
        return [names[k] for k in found]

    def unknown(self, name: str) -> tuple[str, str]:
        """The message and hint that refuse ``name``, a flag this vLLM does not have."""
        near = self.closest(name.split(".", 1)[0])
        hint = f"did you mean {', '.join('--' + n for n in near)}? " if near else ""
        return (
            f"vLLM {self.version} has no flag {name!r}",
            hint + "`vllm serve --help=all` lists the flags",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "source": self.source,
            "flags": [f.to_dict() for f in sorted(self.flags.values(), key=lambda f: f.name)],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlagCatalog:
        flags = (Flag.from_dict(item) for item in data["flags"])
        return cls(
            version=str(data["version"]),
            flags={f.dest: f for f in flags},
            source=str(data.get("source") or ""),
        )


# -- where catalogs come from ---------------------------------------------------------------


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", version)


def shipped_versions() -> list[str]:
    """The versions tuner ships a flag snapshot for."""
    folder = resources.files("tuner.vllm").joinpath("flag_lists")
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def shipped(version: str) -> FlagCatalog | None:
    """The snapshot shipped with tuner for ``version`` (its release, local part dropped:
    ``0.32.0+cpu`` reads ``0.32.0``), or None."""
    release = version.strip().lstrip("vV").partition("+")[0]
    for candidate in dict.fromkeys((_safe(version), _safe(release))):
        item = resources.files("tuner.vllm").joinpath("flag_lists", f"{candidate}.json")
        if item.is_file():
            return FlagCatalog.from_dict(json.loads(item.read_text(encoding="utf-8")))
    return None


def shipped_union() -> FlagCatalog:
    """Every flag of the shipped snapshots in one catalog (the newest version's entry where two
    differ), for checks made where no vLLM is installed, as in the API: a flag passes when some
    shipped version has it, and the worker checks it again against its own vLLM."""
    versions = shipped_versions()
    flags: dict[str, Flag] = {}
    for version in sorted(versions, key=parse_version):
        catalog = shipped(version)
        if catalog is not None:
            flags.update(catalog.flags)
    return FlagCatalog(version=" or ".join(versions), flags=flags, source="shipped snapshots")


def cache_path(cache_dir: Path, version: str) -> Path:
    return cache_dir / f"vllm-flags-{_safe(version)}.json"
