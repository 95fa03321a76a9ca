"""The one screen of ``tuner doctor``, drawn from the same JSON object ``--json`` prints, so
that the two can never disagree. Pure: returns lines of rich markup."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from tuner.cli.common import JsonOpt, StorageOpt, VllmPythonOpt, out, storage_url

GIB = 1024**3
_WIDTH = 11  # label column


def _row(label: str, text: str) -> str:
    return f"  [bold]{label:<{_WIDTH}}[/]{text}"


def _gpus(data: dict[str, Any]) -> list[str]:
    if data["gpu_error"]:
        return [_row("GPUs", f"[red]NVML failed[/]: {escape(data['gpu_error'])}")]
    if not data["gpus"]:
        return [_row("GPUs", "none (NVML sees no NVIDIA GPU): CPU studies only")]
    lines: list[str] = []
    for g in data["gpus"]:
        cc = ".".join(str(x) for x in g["compute_capability"])
        text = (
            f"#{g['index']} {escape(g['name'])}, {g['memory_total_bytes'] / GIB:.1f} GiB, "
            f"compute capability {cc}, {escape(g['uuid'])}"
        )
        lines.append(_row("GPUs" if not lines else "", text))
    lines.append(_row("driver", f"{data['driver']}, CUDA {data['cuda'] or '?'}"))
    return lines


def _torch(data: dict[str, Any]) -> str:
    t = data["torch"]
    if not t["version"] and not t["error"] and not data["vllm"]["version"]:
        # torch is probed with vLLM's python, once vLLM is found there
        return _row("torch", "[yellow]not checked[/] (no vLLM found for that python)")
    if not t["version"]:
        return _row("torch", f"[red]not importable[/] {escape(t['error'] or '')}".rstrip())
    cuda = f"CUDA {t['cuda']}" if t["cuda"] else "no CUDA (CPU build)"
    available = {True: "usable", False: "not usable", None: "?"}[t["cuda_available"]]
    return _row("torch", f"{escape(t['version'])}, {cuda}; torch.cuda: {available}")


def _vllm(data: dict[str, Any]) -> list[str]:
    v = data["vllm"]
    if not v["version"]:
        return [_row("vLLM", f"[red]not found[/] for {escape(v['python'])}")]
    lines = [
        _row("vLLM", f"{escape(v['version'])} on platform {v['platform'] or '?'}"),
        _row("", f"{escape(v['location'] or '?')} (python {escape(v['python'])})"),
    ]
    if v["error"]:
        lines.append(_row("", f"[red]{escape(v['error'])}[/]"))
    lines.append(_row("backends", ", ".join(v["backends"]) or "?"))
    if v["backends_note"]:
        lines.append(_row("", f"[dim]{escape(v['backends_note'])}[/]"))
    fa = data["flash_attn"]
    if fa["installed"]:
        state = f"flash-attn {escape(fa['version'] or '?')} installed"
    elif fa["error"]:
        state = f"flash-attn present but does not import: {escape(fa['error'])}"
    else:
        state = "standalone flash-attn not installed"
    bundled = "; vllm.vllm_flash_attn present" if v["vllm_flash_attn"] else ""
    lines.append(_row("flash-attn", state + bundled))
    lines.append(_row("", f"[dim]{escape(fa['note'])}[/]"))
    return lines


def _storage(data: dict[str, Any]) -> str:
    s = data["storage"]
    state = "[green]ok[/]" if s["ok"] else "[red]not usable[/]"
    revision = f"revision {s['revision'] or '-'}, head {s['head'] or '?'}"
    note = f" ({escape(s['note'])})" if s["note"] else ""
    return _row("storage", f"{escape(s['url'])}: {revision}: {state}{note}")


def _ports(data: dict[str, Any]) -> str:
    p = data["ports"]
    span = f"ephemeral range {p['range'][0]}-{p['range'][1]}" if p["range"] else "range unknown"
    state = "[green]ok[/]" if p["ok"] else f"[red]{escape(p['error'] or 'failed')}[/]"
    launch = "free" if p["launch_port_free"] else "[yellow]in use[/] (`tuner launch --port N`)"
    checked = len(p["checked"])
    return _row(
        "ports",
        f"{p['host']}: {checked} bound, {span}: {state}; launch port {p['launch_port']} {launch}",
    )


def render(data: dict[str, Any]) -> list[str]:
    """Lines of rich markup for :meth:`tuner.doctor.report.Report.to_json`'s object."""
    target = f" for --gpu {data['gpu']}" if data["gpu"] else ""
    lines = [f"[bold]tuner doctor[/]{target}", *_gpus(data), _torch(data), *_vllm(data)]
    lines += [_storage(data), _ports(data)]
    if data["ok"]:
        lines.append("[green]nothing blocks a study[/]")
        return lines
    lines.append(f"[red]{len(data['problems'])} problem(s) stop a study:[/]")
    for p in data["problems"]:
        lines.append(f"  [red]x[/] {escape(p['what'])}")
        if p["fix"]:
            lines.append(f"    [yellow]fix:[/] {escape(p['fix'])}")
    return lines


def doctor_command(
    gpu: Annotated[str | None, typer.Option(help="Check for studies on this profile.")] = None,
    vllm_python: VllmPythonOpt = None,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What this machine can tune, and what would stop a study (exit 1), with the fix."""
    from tuner.compose import default_vllm_python
    from tuner.doctor.report import examine

    report = examine(
        gpu=gpu, vllm_python=vllm_python or default_vllm_python(), storage_url=storage_url(storage)
    )
    data = report.to_json()
    if as_json:
        print(json.dumps(data, indent=2), flush=True)
    else:
        for line in render(data):
            out.print(line, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)
