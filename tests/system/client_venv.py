"""The ``taskforge-client`` distribution as users get it: built into a wheel, installed without Django.

``client_venv`` (module scope) is that virtualenv, for the tests of the package and of a user's first steps.

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

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A user's shell: PATH and a locale, nothing of this test process's settings."""
        return {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **(extra or {})}

    def run(
        self, *argv: str | Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(arg) for arg in argv],
            cwd=self.workdir,
            env=self.environ(env),
            capture_output=True,
            text=True,
            timeout=timeout,
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
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Installed:
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
