"""The ``taskforge-client`` distribution as users get it: built into a wheel, installed without Django.

The wheel is built from a copy of ``clients/python/`` (nothing is written into
the checkout) with this virtualenv's setuptools, and installed with
``--no-deps`` into a fresh virtualenv that has no Django. Its dependencies
(httpx and what httpx needs, read from the installed metadata) are linked in
from this virtualenv through a ``.pth`` file: no network, and nothing else of
this virtualenv is visible. Every command runs outside the checkout, so
nothing of the server can be imported by accident.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
PACKAGE = "taskforge_client"
# Imported only by the Django integration, which needs the ``django`` extra.
NEEDS_DJANGO = f"{PACKAGE}.django_tasks"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    bin: Path
    workdir: Path

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"}
        return subprocess.run(
            [str(arg) for arg in argv], cwd=self.workdir, env=env, capture_output=True, text=True, timeout=60
        )


def _runtime_closure(name: str) -> list[importlib.metadata.Distribution]:
    """The installed distribution ``name`` and everything it requires here (extras left out)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower()
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _link_distribution(dist: importlib.metadata.Distribution, into: Path) -> None:
    """Symlink the distribution's top-level modules and packages (and its metadata) into ``into``."""
    site = Path(str(dist.locate_file("")))
    tops = {Path(str(file)).parts[0] for file in dist.files or [] if not str(file).startswith("..")}
    for top in tops - {"__pycache__"}:
        target = into / top
        if (site / top).exists() and not target.exists():
            target.symlink_to(site / top)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("client-package")
    source = work / "source"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__"))
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source), "-w", str(work / "dist")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (work / "dist").glob("taskforge_client-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True, timeout=60)
    python = work / "venv" / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    dependencies = work / "dependencies"
    dependencies.mkdir()
    for dist in _runtime_closure("httpx"):
        _link_distribution(dist, dependencies)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(f"{dependencies}\n")
    return Installed(wheel=wheel, python=python, bin=python.parent, workdir=work)


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
    # Every source module made it into the wheel, and the marker that it is typed.
    source = {p.relative_to(CLIENT).as_posix() for p in (CLIENT / PACKAGE).rglob("*.py")}
    assert source <= set(names)
    assert f"{PACKAGE}/py.typed" in names
