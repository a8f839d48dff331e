"""The worker's whole shutdown fits inside the kill timeout of the deploy files that run it."""

from __future__ import annotations

from pathlib import Path

import yaml

from taskforge_client.worker.config import load_config
from taskforge_client.worker.runner import HANDBACK_SECONDS

ROOT = Path(__file__).resolve().parents[3]
# Time for the interpreter to start its exit and the orchestrator to see it.
SLACK_SECONDS = 2


def grace_of(command: list[str]) -> float:
    """The --grace-seconds a worker command line sets (the default when it sets none)."""
    argv = command[command.index("workers") + 1 :] if "workers" in command else []
    return load_config(argv, {"TASKFORGE_API_KEY": "k", "WORKER_GRACE_SECONDS": ""}).grace_seconds


def seconds(duration: str | int) -> float:
    text = str(duration)
    return float(text.removesuffix("s")) if text.endswith("s") and text[:-1].isdigit() else float(text)


def test_compose_worker_exits_before_docker_kills_it():
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    assert grace_of(worker["command"]) + HANDBACK_SECONDS + SLACK_SECONDS <= seconds(worker["stop_grace_period"])


def test_kubernetes_worker_exits_before_the_kubelet_kills_it():
    spec = yaml.safe_load((ROOT / "deploy/kubernetes/worker-deployment.yaml").read_text())["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "worker"]
    kill = float(spec["terminationGracePeriodSeconds"])
    assert grace_of(container["command"]) + HANDBACK_SECONDS + SLACK_SECONDS <= kill


def test_the_default_grace_period_fits_the_usual_40_seconds():
    assert load_config([], {"TASKFORGE_API_KEY": "k"}).grace_seconds + HANDBACK_SECONDS + SLACK_SECONDS <= 40
