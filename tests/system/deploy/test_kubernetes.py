"""deploy/kubernetes/: valid against the Kubernetes schemas, and consistent with the code and the image."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import kubernetes_validate
import pytest
import yaml

from tests.system.deploy import specs
from tests.system.deploy.specs import KUBERNETES_DIR, ROOT

DOCUMENTS = specs.kubernetes_documents()
DEPLOYMENTS = specs.kubernetes_by_kind("Deployment")
CONFIG = specs.kubernetes_by_kind("ConfigMap")["taskforge-config"]["data"]
SECRET = specs.kubernetes_by_kind("Secret")["taskforge-secrets"]["stringData"]
JOB = specs.kubernetes_by_kind("Job")["taskforge-migrate"]
WORKLOADS = {**DEPLOYMENTS, "taskforge-migrate": JOB}
LOOPS = {
    "scheduler": "run_scheduler",
    "dispatcher": "run_dispatcher",
    "watchdog": "run_watchdog",
    "pusher": "run_pusher",
}
IMAGE_UID = int(next(i.args for i in specs.dockerfile_instructions() if i.keyword == "USER").split(":")[0])
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _containers():
    for name, workload in WORKLOADS.items():
        for container in specs.all_containers(specs.pod_spec(workload)):
            yield name, container


def _api_container():
    return specs.pod_spec(DEPLOYMENTS["taskforge-api"])["containers"][0]


# Oldest Kubernetes still widely run, and the newest schema the validator ships.
@pytest.mark.parametrize("version", ["1.30.0", kubernetes_validate.latest_version()])
def test_every_manifest_is_valid_for_kubernetes(version):
    for path, document in DOCUMENTS:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {exc.message} at {list(exc.path)}")


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((KUBERNETES_DIR / "kustomization.yaml").read_text())
    files = {path.name for path in KUBERNETES_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    [image] = kustomization["images"]
    assert image["name"] == "taskforge" and image["newTag"] == VERSION


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_the_bundle_with_the_release_image():
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(KUBERNETES_DIR)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert len(documents) == len(DOCUMENTS)
    images = {
        container["image"]
        for doc in documents
        if doc["kind"] in ("Deployment", "Job")
        for container in specs.all_containers(specs.pod_spec(doc))
    }
    assert images == {f"registry.example.com/taskforge:{VERSION}"}
    assert all(doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "taskforge" for doc in documents)


def test_every_process_has_its_workload():
    assert set(DEPLOYMENTS) == {"taskforge-api", *(f"taskforge-{loop}" for loop in LOOPS), "taskforge-worker"}
    assert set(specs.kubernetes_by_kind("Service")) == {"taskforge-api"}
    hpa = specs.kubernetes_by_kind("HorizontalPodAutoscaler")["taskforge-api"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "taskforge-api"}
    assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]


def test_selectors_match_their_pods():
    for name, deployment in DEPLOYMENTS.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    service = specs.kubernetes_by_kind("Service")["taskforge-api"]
    api_labels = DEPLOYMENTS["taskforge-api"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= api_labels.items()
    for other in set(DEPLOYMENTS) - {"taskforge-api"}:
        other_labels = DEPLOYMENTS[other]["spec"]["template"]["metadata"]["labels"]
        assert not service["spec"]["selector"].items() <= other_labels.items(), f"the Service would route to {other}"


def test_commands_exist_and_match_compose():
    compose = specs.taskforge_services(specs.load_compose())
    for name, container in _containers():
        assert specs.command_problems(container["command"]) == [], f"{name}/{container['name']}"
    assert _api_container()["command"] == specs.dockerfile_cmd()
    for loop, command in LOOPS.items():
        container = specs.pod_spec(DEPLOYMENTS[f"taskforge-{loop}"])["containers"][0]
        assert container["command"] == compose[loop]["command"] == ["python", "manage.py", command]
    worker = specs.pod_spec(DEPLOYMENTS["taskforge-worker"])["containers"][0]
    assert worker["command"] == compose["worker"]["command"]
    script = JOB["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert [step.split()[:3] for step in script.split("&&")][:2] == [
        ["python", "manage.py", "migrate"],
        ["python", "manage.py", "ensure_admin"],
    ]


def test_workers_get_the_worker_role_key_the_migrate_job_installs_never_the_admin_key():
    worker = specs.pod_spec(DEPLOYMENTS["taskforge-worker"])["containers"][0]
    [key] = [item for item in worker["env"] if item["name"] == "TASKFORGE_API_KEY"]
    assert key["valueFrom"]["secretKeyRef"]["key"] == "TASKFORGE_WORKER_API_KEY"
    migrate = JOB["spec"]["template"]["spec"]["containers"][0]
    refs = {item["name"]: item["valueFrom"]["secretKeyRef"]["key"] for item in migrate["env"] if "valueFrom" in item}
    assert refs["TASKFORGE_WORKER_API_KEY"] == "TASKFORGE_WORKER_API_KEY"
    assert '--worker-api-key="$TASKFORGE_WORKER_API_KEY"' in migrate["command"][2]
    # Values that start with "-" (a generated secret may) still reach ensure_admin as values.
    env = {"TASKFORGE_ADMIN_API_KEY": "-k1", "TASKFORGE_ADMIN_USERNAME": "-a", "TASKFORGE_ADMIN_PASSWORD": "-p",
           "TASKFORGE_WORKER_API_KEY": "-k2"}  # fmt: skip
    options = specs.ensure_admin_options(migrate["command"][2], env)
    assert (options["api_key"], options["password"], options["worker_api_key"]) == ("-k1", "-p", "-k2")
    assert "change-me" in SECRET["TASKFORGE_WORKER_API_KEY"] and len(SECRET["TASKFORGE_WORKER_API_KEY"]) >= 32


def test_pods_wait_for_migrations():
    for name in ["taskforge-api", *(f"taskforge-{loop}" for loop in LOOPS)]:
        [init] = specs.pod_spec(DEPLOYMENTS[name])["initContainers"]
        assert init["command"] == ["python", "manage.py", "migrate", "--check"], name


def test_api_serves_8080_with_health_probes():
    container = _api_container()
    assert container["ports"] == [{"name": "http", "containerPort": 8080}]
    service = specs.kubernetes_by_kind("Service")["taskforge-api"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    allowed = CONFIG["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
        http = container[probe]["httpGet"]
        assert http["path"] == path and http["port"] == "http", probe
        # Django answers 400 to a Host outside ALLOWED_HOSTS; the kubelet would send the pod IP.
        [host] = [h["value"] for h in http["httpHeaders"] if h["name"] == "Host"]
        assert host in allowed, probe
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["PORT"] == "8080"
    # The workers reach the API through its Service name: it must be an allowed host.
    assert "taskforge-api" in allowed


def test_pods_run_as_the_image_user_without_privileges():
    for name, workload in WORKLOADS.items():
        pod = specs.pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == IMAGE_UID, name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
    for name, container in _containers():
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["capabilities"]["drop"] == ["ALL"], name


def test_writable_tmp_for_read_only_root_filesystems():
    # gunicorn keeps worker heartbeat files and the Prometheus multiprocess directory under /tmp.
    for name, workload in WORKLOADS.items():
        pod = specs.pod_spec(workload)
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0].get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        assert "emptyDir" in volumes[mounts["/tmp"]], name


def test_every_container_has_requests_and_limits():
    for name, container in _containers():
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert set(resources[kind]) == {"cpu", "memory"}, f"{name}/{container['name']} {kind}"


def test_workers_get_a_grace_period_longer_than_their_drain():
    pod = specs.pod_spec(DEPLOYMENTS["taskforge-worker"])
    command = pod["containers"][0]["command"]
    grace = float(command[command.index("--grace-seconds") + 1])
    assert pod["terminationGracePeriodSeconds"] > grace
    for name in ["taskforge-api", *(f"taskforge-{loop}" for loop in LOOPS)]:
        assert specs.pod_spec(DEPLOYMENTS[name])["terminationGracePeriodSeconds"] > 10, name


def test_images_are_the_versioned_taskforge_image():
    for name, container in _containers():
        image = container["image"]
        assert image == f"taskforge:{VERSION}", f"{name}: {image}"
        assert container["imagePullPolicy"] == "IfNotPresent"


def test_environment_names_are_read_by_the_code_and_secrets_exist():
    known = specs.variables_read_by_code()
    assert set(CONFIG) <= known
    for name, container in _containers():
        command = " ".join(container["command"])
        for item in container.get("env", []):
            assert item["name"] in known or f"${item['name']}" in command, f"{name}: {item['name']}"
            reference = item.get("valueFrom", {}).get("secretKeyRef")
            if reference:
                assert reference["name"] == "taskforge-secrets" and reference["key"] in SECRET, f"{name}: {item}"
            if specs.SECRET_NAME.search(item["name"]) and not item["name"].endswith("_URL"):
                assert "value" not in item, f"{name}: {item['name']} must come from the Secret"
        for source in container.get("envFrom", []):
            assert source == {"configMapRef": {"name": "taskforge-config"}}, name


def test_secret_holds_placeholders_only():
    for key, value in SECRET.items():
        credentials = re.search(r"://[^/@:]*:([^/@]*)@", value)
        if key.endswith("_URL") and not credentials:
            continue
        secret = credentials[1] if credentials else value
        assert secret == "" or "change-me" in secret, f"{key} looks like a real secret"
    assert len(SECRET["TASKFORGE_ADMIN_API_KEY"]) >= 32


def test_worker_pods_hold_no_server_credentials():
    pod = specs.pod_spec(DEPLOYMENTS["taskforge-worker"])
    [container] = pod["containers"]
    names = {item["name"] for item in container["env"]}
    assert names == {"TASKFORGE_API_URL", "TASKFORGE_API_KEY"}
    url = next(item["value"] for item in container["env"] if item["name"] == "TASKFORGE_API_URL")
    assert url == "http://taskforge-api:8080"
    assert "envFrom" not in container
