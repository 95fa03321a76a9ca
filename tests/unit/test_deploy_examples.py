"""The deployment examples in docs/deploy are well-formed and run the command that joins a study."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from tuner.cli.app import app

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"


def _worker_options() -> set[str]:
    import typer.main

    command = typer.main.get_command(app)
    worker = command.commands["worker"]  # type: ignore[attr-defined]
    return {opt for p in worker.params for opt in p.opts}


def _unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as sections of (key, value) in order: a key may repeat (Environment=)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            assert current not in sections, f"section {current} twice"
            sections[current] = []
            continue
        assert current is not None and "=" in line, f"not a unit line: {raw!r}"
        key, value = line.split("=", 1)
        assert key and key == key.strip() and key[0].isupper(), raw
        sections[current].append((key, value))
    return sections


def test_the_systemd_unit_starts_one_worker_per_gpu_instance() -> None:
    unit = _unit((DEPLOY / "tuner-worker@.service").read_text())
    assert list(unit) == ["Unit", "Service", "Install"]
    service = dict(unit["Service"])  # the last of a repeated key; Environment is read apart
    argv = shlex.split(service["ExecStart"])
    assert argv[1:3] == ["worker", "--study"] and argv[0].endswith("/tuner")
    assert {a for a in argv if a.startswith("--")} <= _worker_options()
    assert service["KillSignal"] == "SIGTERM"  # a stop that records the trial as interrupted
    env = [v for k, v in unit["Service"] if k == "Environment"]
    assert "CUDA_VISIBLE_DEVICES=%i" in env, "the instance name is the GPU"
    assert service["EnvironmentFile"].startswith("/")
    assert dict(unit["Install"])["WantedBy"] == "multi-user.target"


def test_the_kubernetes_job_is_indexed_with_one_gpu_per_worker_pod() -> None:
    job = yaml.safe_load((DEPLOY / "tuner-workers-job.yaml").read_text())
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] >= 2
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["command"][:3] == ["tuner", "worker", "--study"]
    assert set(a for a in container["command"] if a.startswith("--")) <= _worker_options()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e for e in container["env"]}
    assert env["TUNER_DB_URL"]["valueFrom"]["secretKeyRef"]["key"] == "url"
    host = env["TUNER_WORKER_HOST"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert host == "metadata.name", "each pod names its own host, or pids of pods collide"
    labels = spec["template"]["metadata"]["labels"]
    assert labels == job["metadata"]["labels"]
