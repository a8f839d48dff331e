"""docker-compose.yml and .env.example, held to the code they deploy.

Compose itself cannot run here (no Docker engine); its interpolation is
reproduced in specs.py, and test_container_processes.py runs every service's
command with the environment Compose would give it.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex

import jsonschema
import pytest

from deploy import make_env
from tests.system.deploy import specs

COMPOSE = specs.load_compose()
SERVICES = COMPOSE["services"]
TASKFORGE = specs.taskforge_services(COMPOSE)
EXAMPLE = specs.read_env_file(specs.ENV_EXAMPLE.read_text())
REQUIRED = {
    "DJANGO_SECRET_KEY",
    "POSTGRES_PASSWORD",
    "TASKFORGE_ADMIN_API_KEY",
    "TASKFORGE_ADMIN_PASSWORD",
    "TASKFORGE_WORKER_API_KEY",
}
LOOPS = {
    "scheduler": "run_scheduler",
    "dispatcher": "run_dispatcher",
    "watchdog": "run_watchdog",
    "pusher": "run_pusher",
}


def test_compose_file_follows_the_compose_specification():
    # The schema Docker Compose itself validates against (vendored by check-jsonschema).
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'.'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(COMPOSE)]
    assert not errors
    mistyped = {**COMPOSE, "services": {**SERVICES, "api": {**SERVICES["api"], "stop_grace": "20s"}}}
    assert not validator.is_valid(mistyped), "the schema must reject unknown keys"


def test_every_process_of_the_stack_is_a_service():
    assert set(SERVICES) == {"postgres", "redis", "migrate", "api", *LOOPS, "worker"}
    assert set(TASKFORGE) == {"migrate", "api", *LOOPS, "worker"}


def test_third_party_images_are_pinned_to_a_version():
    assert SERVICES["postgres"]["image"] == "postgres:16"
    assert SERVICES["redis"]["image"] == "redis:7"
    for name, service in SERVICES.items():
        name_part, _, tag = service["image"].rpartition(":")
        assert name_part and re.search(r"\d", tag) and tag != "latest", f"{name}: {service['image']}"


def test_one_image_built_from_this_repository_runs_every_taskforge_process():
    assert {service["image"] for service in TASKFORGE.values()} == {"taskforge:1.0.0"}
    assert {service["build"]["context"] for service in TASKFORGE.values()} == {"."}


@pytest.mark.parametrize("name", ["migrate", "api", *LOOPS, "worker"])
def test_commands_exist_and_are_exec_form(name):
    command = TASKFORGE[name]["command"]
    assert isinstance(command, list), "exec form: the process is PID 1 and gets SIGTERM itself"
    assert specs.command_problems(command) == []


def test_commands_run_the_right_programs():
    assert TASKFORGE["api"]["command"] == specs.dockerfile_cmd()
    for service, loop in LOOPS.items():
        assert TASKFORGE[service]["command"] == ["python", "manage.py", loop]
    worker = TASKFORGE["worker"]["command"]
    assert worker[:5] == ["python", "-m", "workers", "--handler", "workers.demo:handle"]
    script = TASKFORGE["migrate"]["command"][2]
    steps = [shlex.split(step)[:3] for step in script.split("&&")]
    assert steps[0] == ["python", "manage.py", "migrate"]
    assert steps[1] == ["python", "manage.py", "ensure_admin"]


def test_migrate_reads_the_credentials_from_its_environment_and_keeps_them_out_of_logs():
    script = TASKFORGE["migrate"]["command"][2]
    env = specs.environment(TASKFORGE["migrate"])
    # $$ defers expansion to the container's shell: the values never appear in the
    # container's command line as Compose stores it.
    used = set(re.findall(r"\$\$([A-Z_]+)", script))
    assert used == {
        "TASKFORGE_ADMIN_API_KEY",
        "TASKFORGE_ADMIN_USERNAME",
        "TASKFORGE_ADMIN_PASSWORD",
        "TASKFORGE_ADMIN_EMAIL",
        "TASKFORGE_WORKER_API_KEY",
    }
    assert used <= set(env)
    ensure_admin = next(step for step in script.split("&&") if "ensure_admin" in step)
    assert ensure_admin.strip().endswith("> /dev/null"), "ensure_admin prints the key and password"


@pytest.mark.parametrize("name", ["migrate", "api", *LOOPS, "worker"])
def test_environment_names_are_read_by_the_code(name):
    service = TASKFORGE[name]
    command = " ".join(service["command"])
    unknown = {
        variable
        for variable in specs.environment(service)
        if variable not in specs.variables_read_by_code() and f"${variable}" not in command
    }
    assert not unknown, f"{name} sets variables nothing reads"


def test_api_and_loops_share_one_configuration():
    # The API stamps lease expiry and the watchdog enforces it: one TASKFORGE_HEARTBEAT_TIMEOUT.
    shared = specs.environment(TASKFORGE["scheduler"])
    for name in ["api", "migrate", *LOOPS]:
        env = specs.environment(TASKFORGE[name])
        assert {key: env[key] for key in shared} == shared, name
    assert shared["REDIS_URL"].startswith("redis://redis:6379/")
    assert "@postgres:5432/" in shared["DATABASE_URL"]


def test_worker_talks_to_the_api_only():
    env = specs.environment(TASKFORGE["worker"])
    assert env["TASKFORGE_API_URL"] == "http://api:8080"
    assert not {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"} & set(env), "workers need no server credentials"


def test_workers_get_the_worker_role_key_installed_by_migrate_never_the_admin_key():
    worker = specs.environment(TASKFORGE["worker"])
    assert (
        worker["TASKFORGE_API_KEY"]
        == "${TASKFORGE_WORKER_API_KEY:?set TASKFORGE_WORKER_API_KEY in .env (see .env.example)}"
    )
    assert "ADMIN" not in worker["TASKFORGE_API_KEY"], "a worker must not fall back to the admin key"
    resolved = specs.interpolate_tree(COMPOSE, specs.read_env_file(make_env.render(specs.ENV_EXAMPLE.read_text())[0]))
    values = specs.environment(resolved["services"]["worker"])
    migrate = specs.environment(resolved["services"]["migrate"])
    assert values["TASKFORGE_API_KEY"] == migrate["TASKFORGE_WORKER_API_KEY"] != migrate["TASKFORGE_ADMIN_API_KEY"]
    assert "--worker-api-key" in TASKFORGE["migrate"]["command"][2]


def test_secrets_that_start_with_a_dash_reach_ensure_admin_as_values():
    # A generated token_urlsafe value starts with "-" one time in 64: it must not read as an option.
    env = {
        "TASKFORGE_ADMIN_API_KEY": "-k1",
        "TASKFORGE_ADMIN_USERNAME": "-admin",
        "TASKFORGE_ADMIN_PASSWORD": "--p4ss",
        "TASKFORGE_ADMIN_EMAIL": "-ops@example.com",
        "TASKFORGE_WORKER_API_KEY": "-k2",
    }
    options = specs.ensure_admin_options(TASKFORGE["migrate"]["command"][2], env)
    assert (options["api_key"], options["username"], options["password"]) == ("-k1", "-admin", "--p4ss")
    assert (options["email"], options["worker_api_key"]) == ("-ops@example.com", "-k2")


def test_required_secrets_fail_loudly_when_missing():
    for variable in REQUIRED:
        uses = re.findall(r"\$\{" + variable + r"(:?[-?+])?", specs.COMPOSE_FILE.read_text())
        assert uses and all(operator == ":?" for operator in uses if operator != ":-"), variable
    with pytest.raises(specs.MissingVariable, match="DJANGO_SECRET_KEY"):
        specs.interpolate_tree(COMPOSE, {**EXAMPLE, "DJANGO_SECRET_KEY": ""})


def test_every_compose_variable_is_documented_in_env_example():
    assert specs.referenced_variables(COMPOSE) <= set(EXAMPLE)
    # ... and the example sets nothing Compose does not use.
    assert set(EXAMPLE) <= specs.referenced_variables(COMPOSE)


def test_no_secret_is_written_into_the_compose_file():
    for name, service in SERVICES.items():
        for variable, value in specs.environment(service).items():
            if not specs.SECRET_NAME.search(variable) or not value:
                continue
            credentials = re.search(r"://[^/@:]*:([^/@]*)@", value)
            if variable.endswith("_URL") and not credentials:
                continue  # a server address without credentials is no secret
            secret = credentials[1] if credentials else value
            assert secret.startswith("${"), f"{name}.{variable} must come from .env"


def test_env_example_holds_placeholders_only():
    for variable in REQUIRED:
        assert "change-me" in EXAMPLE[variable], variable
    assert len(EXAMPLE["TASKFORGE_ADMIN_API_KEY"]) >= 32, "create_key refuses shorter keys"
    assert len(EXAMPLE["TASKFORGE_WORKER_API_KEY"]) >= 32, "create_key refuses shorter keys"
    for variable, value in EXAMPLE.items():
        if specs.SECRET_NAME.search(variable) and value:
            assert "change-me" in value, f"{variable} looks like a real secret"


def test_make_env_replaces_every_placeholder_with_a_fresh_value():
    text, generated = make_env.render(specs.ENV_EXAMPLE.read_text())
    values = specs.read_env_file(text)
    assert set(generated) == {name for name, value in EXAMPLE.items() if "change-me" in value}
    assert "change-me" not in "".join(values.values())
    assert values["TASKFORGE_ADMIN_API_KEY"].startswith("tf_") and len(values["TASKFORGE_ADMIN_API_KEY"]) >= 32
    assert re.fullmatch(r"[A-Za-z0-9_-]{32,}", values["POSTGRES_PASSWORD"]), "URL-safe: it goes into DATABASE_URL"
    assert {k: v for k, v in values.items() if k not in generated} == {
        k: v for k, v in EXAMPLE.items() if k not in generated
    }
    assert make_env.render(specs.ENV_EXAMPLE.read_text())[1] != generated, "fresh values every time"
    specs.interpolate_tree(COMPOSE, values)  # nothing required is missing


def test_make_env_never_overwrites_an_existing_file(tmp_path):
    target = tmp_path / ".env"
    assert make_env.main(["--output", str(target)]) == 0
    first = target.read_text()
    assert target.stat().st_mode & 0o777 == 0o600
    assert make_env.main(["--output", str(target)]) == 0
    assert target.read_text() == first


def test_servers_have_healthchecks_and_everything_waits_for_them():
    assert SERVICES["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert "redis-cli ping" in " ".join(SERVICES["redis"]["healthcheck"]["test"])
    healthy = {"condition": "service_healthy"}
    for name in ["api", *LOOPS]:
        assert TASKFORGE[name]["depends_on"] == {
            "postgres": healthy,
            "redis": healthy,
            "migrate": {"condition": "service_completed_successfully"},
        }, name
    assert TASKFORGE["migrate"]["depends_on"] == {"postgres": healthy, "redis": healthy}
    assert TASKFORGE["worker"]["depends_on"] == {"api": healthy}


def test_only_the_api_keeps_the_image_healthcheck():
    # The image's HEALTHCHECK probes the API port: any other service would be "unhealthy".
    api_check = TASKFORGE["api"]["healthcheck"]
    assert api_check["test"][:2] == ["CMD", "python"] and "/healthz" in api_check["test"][-1]
    for name in ["migrate", *LOOPS, "worker"]:
        assert TASKFORGE[name]["healthcheck"] == {"disable": True}, name


def test_api_publishes_8080_and_workers_can_scale():
    assert [port.rsplit(":", 1)[1] for port in TASKFORGE["api"]["ports"]] == ["8080"]
    assert "PORT" not in specs.environment(TASKFORGE["api"]), "the image's PORT=8080 matches the published port"
    for name, service in SERVICES.items():
        assert "container_name" not in service, f"{name}: a fixed name prevents --scale"
    assert "ports" not in TASKFORGE["worker"] and "container_name" not in TASKFORGE["worker"]


def test_graceful_stop_periods_cover_each_process_drain():
    worker = TASKFORGE["worker"]
    command = worker["command"]
    grace = float(command[command.index("--grace-seconds") + 1])
    assert specs.duration_seconds(worker["stop_grace_period"]) > grace
    # gunicorn's graceful_timeout is 10 s; the loops stop within a tick.
    for name in ["api", *LOOPS]:
        assert specs.duration_seconds(TASKFORGE[name]["stop_grace_period"]) > 10, name
    assert specs.duration_seconds(SERVICES["postgres"]["stop_grace_period"]) >= 30


def test_redis_never_evicts_and_keeps_no_persistence():
    command = SERVICES["redis"]["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--save") + 1] == ""
    assert command[command.index("--appendonly") + 1] == "no"


def test_postgres_keeps_its_data_in_a_named_volume():
    volume, _, target = SERVICES["postgres"]["volumes"][0].partition(":")
    assert target == "/var/lib/postgresql/data"
    assert volume in COMPOSE["volumes"]


def test_long_running_services_restart_and_migrate_does_not():
    assert TASKFORGE["migrate"]["restart"] == "no"
    for name in ["postgres", "redis", "api", *LOOPS, "worker"]:
        assert SERVICES[name]["restart"] == "unless-stopped", name
