"""A flag list read from ``vllm serve --help=all``: how tuner/vllm/flag_lists/0.26.0.json was
made from the GPU machine's help text, where tuner could not run the parser itself::

    from tuner.vllm.flaghelp import catalog_from_help
    from tuner.vllm.flags import shipped
    catalog = catalog_from_help(HELP_TEXT, "0.26.0", reference=shipped("0.32.0"))
"""

from __future__ import annotations

import re
from typing import Any

from tuner.vllm.flags import HELP_CHARS, Flag, FlagCatalog

# -- reading `vllm serve --help=all` --------------------------------------------------------

_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9][^ ].*?)(?:\s{2,}(\S.*))?$")
_DEFAULT = re.compile(r"\(default:\s*(.*)\)\s*$", re.S)
_JSON_HINT = "Should either be a valid JSON string or JSON keys passed individually"


def catalog_from_help(text: str, version: str, reference: FlagCatalog | None = None) -> FlagCatalog:
    """The flags listed by ``vllm serve --help=all`` (argparse's help output).

    The help text shows names, aliases, the ``--no-`` forms, choices and defaults, but not
    value types: those come from ``reference`` (the flags of another version, read from its
    parser) where it has the flag, else from the help: a ``--no-`` form or no metavar is a bool,
    "JSON string" in the text is json, "human-readable integers" or an integer default is an
    int, a decimal default a float, anything else a str.
    """
    flags: dict[str, Flag] = {}
    for head, body in _help_entries(text):
        flag = _flag_from_help(head, body, reference)
        if flag is not None:
            flags.setdefault(flag.dest, flag)
    return FlagCatalog(version=version, flags=flags, source="vllm serve --help=all")


def _help_entries(text: str) -> list[tuple[str, str]]:
    """(option spellings, help text) per option of an argparse help output."""
    entries: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if match and not line.startswith("   "):
            entries.append((match.group(1).strip(), [match.group(2) or ""]))
        elif entries and line.startswith("    "):
            entries[-1][1].append(line.strip())
        elif entries and line.strip() and not line.startswith(" "):
            entries.append(("", []))  # a section heading ends the entry before it
    return [(head, " ".join(" ".join(body).split())) for head, body in entries if head]


def _flag_from_help(head: str, body: str, reference: FlagCatalog | None) -> Flag | None:
    spellings: list[str] = []
    metavar = False
    choices: tuple[str, ...] | None = None
    for part in (p.strip() for p in head.split(", ")):
        option, _, rest = part.partition(" ")
        if rest.startswith("{"):
            choices = tuple(c for c in rest.strip("{}").split(",") if c)
        metavar = metavar or bool(rest)
        spellings.append(option)
    longs = [s for s in spellings if s.startswith("--") and not s.startswith("--no-")]
    if not longs or longs[0] == "--help":
        return None
    name = longs[0][2:]
    default_match = _DEFAULT.search(body)
    default_text = default_match.group(1).strip() if default_match else "None"
    help_text = _DEFAULT.sub("", body).strip()
    negatable = any(s.startswith("--no-") for s in spellings)
    known = reference.get(name) if reference is not None else None
    if known is not None and (known.type == "bool") == (negatable or not metavar):
        kind = known.type
    elif negatable or not metavar:
        kind = "bool"
    elif _JSON_HINT in body:
        kind = "json"
    elif "human-readable integers" in body or re.fullmatch(r"-?\d+", default_text):
        kind = "int"
    elif re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", default_text):
        kind = "float"
    else:
        kind = "str"
    nargs = "+" if re.search(r"\[\w+ \.\.\.\]", head) else None
    return Flag(
        name=name,
        dest=name.replace("-", "_"),
        type=kind,
        choices=None if kind == "bool" else choices,
        default=_help_default(default_text, kind),
        help=help_text[:HELP_CHARS],
        aliases=tuple(s for s in spellings if s != longs[0] and not s.startswith("--no-")),
        negatable=negatable,
        nargs=nargs,
    )


def _help_default(text: str, kind: str) -> Any:
    if text == "None":
        return None
    if kind == "bool" and text in ("True", "False"):
        return text == "True"
    for convert in (int, float) if kind in ("int", "float") else ():
        try:
            return convert(text)
        except ValueError:
            continue
    return text
