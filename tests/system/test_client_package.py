"""The ``taskforge-client`` wheel installed into a virtualenv without Django (``tests/system/client_venv.py``)."""

from __future__ import annotations

import zipfile

import pytest
from packaging.requirements import Requirement

from tests.system.client_venv import CLIENT, NEEDS_DJANGO, PACKAGE, Installed


@pytest.fixture(scope="module")
def installed(client_venv: Installed) -> Installed:
    return client_venv


def test_the_virtualenv_has_no_django_and_no_server_code(installed: Installed) -> None:
    for name in ("django", "workers", "queues", "taskforge"):
        done = installed.run(installed.python, "-c", f"import {name}")
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, (name, done.stderr)


def test_every_module_imports_without_django(installed: Installed) -> None:
    script = f"""
import importlib, pkgutil, sys
import {PACKAGE}
names = sorted(m.name for m in pkgutil.walk_packages({PACKAGE}.__path__, "{PACKAGE}."))
needs_django = [n for n in names if n == "{NEEDS_DJANGO}" or n.startswith("{NEEDS_DJANGO}.")]
for name in names:
    if name in needs_django:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            assert exc.name == "django", (name, exc)
        else:
            raise AssertionError(name + " imported without Django")
    else:
        importlib.import_module(name)
assert not [m for m in sys.modules if m.partition(".")[0] == "django"]
print(len(names), {PACKAGE}.__file__)
"""
    done = installed.run(installed.python, "-c", script)
    assert done.returncode == 0, done.stderr
    count, location = done.stdout.split()
    assert int(count) >= 15
    assert location.startswith(str(installed.workdir / "venv")), "the installed wheel, not the checkout"


@pytest.mark.parametrize("command", [("-m", "taskforge_client.worker"), ()])
def test_the_worker_command_runs(installed: Installed, command: tuple[str, ...]) -> None:
    argv = [installed.python, *command] if command else [installed.bin / "taskforge-worker"]
    done = installed.run(*argv, "--help")
    assert done.returncode == 0, done.stderr
    assert "--handler" in done.stdout and "[WORKER_CONCURRENCY]" in done.stdout
    # A bad setting is refused before anything connects: exit 2, naming the flag and the variable.
    refused = installed.run(*argv, "--concurrency", "0")
    assert refused.returncode == 2
    assert "--concurrency / WORKER_CONCURRENCY must be between 1 and 100" in refused.stderr
    assert installed.run(*argv).stderr.endswith(
        "TASKFORGE_API_KEY is not set: create a worker key with "
        "`python manage.py create_api_key NAME --role worker` and export it\n"
    )


@pytest.mark.parametrize("command", [("-m", "taskforge_client"), ()])
def test_the_operator_command_runs_without_django(installed: Installed, command: tuple[str, ...]) -> None:
    argv = [installed.python, *command] if command else [installed.bin / "taskforge"]
    done = installed.run(*argv, "--help")
    assert done.returncode == 0, done.stderr
    assert "queues" in done.stdout and "replay" in done.stdout
    # No key: refused before anything connects, exit 2 (the live tests are tests/integration/workers/test_cli.py).
    refused = installed.run(*argv, "queues")
    assert refused.returncode == 2 and "TASKFORGE_API_KEY" in refused.stderr


def test_the_wheel_declares_httpx_and_an_optional_django(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        fields = wheel.read(metadata).decode().split("\n\n", 1)[0].splitlines()
        entry_points = wheel.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    requires = [line.split(": ", 1)[1] for line in fields if line.startswith("Requires-Dist: ")]
    assert [Requirement(r).name.lower() for r in requires if "extra ==" not in r] == ["httpx"]
    assert [Requirement(r).name.lower() for r in requires if "extra ==" in r] == ["django"]
    assert "Provides-Extra: django" in fields and "License-Expression: Apache-2.0" in fields
    assert "taskforge-worker = taskforge_client.worker.cli:script" in entry_points
    assert "taskforge = taskforge_client.cli:script" in entry_points
    # Every source module made it into the wheel, and the marker that it is typed.
    source = {p.relative_to(CLIENT).as_posix() for p in (CLIENT / PACKAGE).rglob("*.py")}
    assert source <= set(names)
    assert f"{PACKAGE}/py.typed" in names
