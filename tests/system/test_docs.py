"""The documentation tells the truth: it builds, and what it shows runs.

* The MkDocs site builds with ``--strict`` (a broken link, anchor or nav entry
  fails) and loads nothing from another host.
* The configuration reference lists exactly the variables
  ``taskforge/settings.py`` reads, with their defaults.
* ``docs/openapi.yaml`` is what the code generates, the performance page is
  what ``bench/report_docs.py`` writes from the newest full run, and the
  capacity page's tables are what ``bench/capacity_page.py`` writes from the newest
  run that measured CAP.
* The quick start's shell blocks (after ``<!-- docs-test: quickstart -->``)
  push a task from enqueue to ack against a real API server; Python blocks
  after ``<!-- docs-test: live -->`` run against it too; every other Python
  sample compiles, and those that only define things are executed.
* Every repository path the docs name in backquotes exists.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import call_command

from bench import capacity, capacity_page, report_docs
from queues.apikeys import create_key
from tests.factories import QueueFactory
from tests.live import LiveStack

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
CLIENT_PATH = ROOT / "clients" / "python"
SETTINGS = ROOT / "taskforge" / "settings.py"
ENV_READERS = {"env_str", "env_bool", "env_int", "env_list", "env_optional"}
QUICKSTART_PAGES = [ROOT / "README.md", DOCS / "getting-started.md"]

MARKER = re.compile(r"<!--\s*docs-test:\s*([\w-]+)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)")
# A script, stylesheet, image or frame fetched from another host when a page loads.
EXTERNAL_RESOURCE = re.compile(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)="(https?://[^"]+)"')
# Repository paths written as code: `queues/lifecycle/lease.py`, `deploy/kubernetes/`.
REPO_PATH = re.compile(r"`((?:taskforge|queues|workers|dashboard|clients|tests|bench|faults|deploy|docs)/[\w./-]*)`")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with the test marker just above it, if any."""

    page: Path
    line: int
    language: str
    marker: str | None
    code: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    pending_marker: str | None = None
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line.strip())
        if marker:
            pending_marker = marker.group(1)
        elif fence and line.strip().startswith("```"):
            ticks, language = fence.group(1), fence.group(2)
            end = index + 1
            while end < len(lines) and lines[end].strip() != ticks:
                end += 1
            blocks.append(Block(page, index + 1, language, pending_marker, "\n".join(lines[index + 1 : end]) + "\n"))
            pending_marker = None
            index = end
        elif line.strip():
            pending_marker = None  # a marker applies only to the block right after it
        index += 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in code_blocks(page)]


# --- the site -------------------------------------------------------------------------


def test_site_builds_strict_without_warnings_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "WARNING" not in output, output
    external = set()
    for page in site.rglob("*.html"):
        external |= set(EXTERNAL_RESOURCE.findall(page.read_text()))
    assert not external, f"the site loads resources from other hosts: {sorted(external)}"
    assert (site / "openapi.yaml").exists(), "the exported OpenAPI document is published with the site"


def test_readme_links_point_at_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_paths_the_docs_name_exist() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in PAGES
        for path in REPO_PATH.findall(page.read_text())
        if "<" not in path and not (ROOT / path.rstrip("/")).exists()
    ]
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


# --- generated pages --------------------------------------------------------------------


def test_openapi_export_is_current(tmp_path: Path) -> None:
    fresh = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(fresh))
    exported = DOCS / "openapi.yaml"
    assert exported.exists() and exported.read_text() == fresh.read_text(), (
        "docs/openapi.yaml is not what the code generates: run "
        "DJANGO_SECRET_KEY=x .venv/bin/python manage.py spectacular --file docs/openapi.yaml"
    )


def test_performance_page_is_generated_from_the_newest_full_run() -> None:
    path, run = report_docs.newest_full_run()
    assert report_docs.PAGE.read_text() == report_docs.render(path, run), (
        f"docs/performance/latest.md is not from {path.name}: run python -m bench.report_docs"
    )


def test_capacity_tables_are_generated_from_the_newest_capacity_run() -> None:
    path, run = capacity.newest_capacity_run()
    for name, text in capacity_page.render(path, run).items():
        assert (capacity.PAGES / name).read_text() == text, (
            f"docs/capacity/{name} is not from {path.name}: run python -m bench.capacity"
        )


# --- the configuration reference ---------------------------------------------------------


def variables_settings_reads() -> dict[str, ast.expr | None]:
    """Every environment variable read in settings.py, with its default expression."""
    read: dict[str, ast.expr | None] = {}
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        is_environ_get = name == "get" and "environ" in ast.unparse(func)
        if (name in ENV_READERS or name == "getenv" or is_environ_get) and isinstance(node.args[0], ast.Constant):
            read[node.args[0].value] = node.args[1] if len(node.args) > 1 else None
    return read


def documented_settings() -> dict[str, str]:
    """The rows of the table marked settings-reference in operations.md: variable -> default cell."""
    lines = (DOCS / "operations.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if MARKER.match(line.strip()) and "settings-reference" in line)
    rows: dict[str, str] = {}
    for line in lines[start + 3 :]:  # the marker, the header, the separator
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def rendered_default(default: ast.expr | None) -> str | None:
    """How a literal default is written in the docs (`false`, `30`), or None when it is computed."""
    if not isinstance(default, ast.Constant) or default.value in ("", None):
        return None
    if isinstance(default.value, bool):
        return f"`{str(default.value).lower()}`"
    return f"`{default.value}`"


def test_configuration_reference_lists_exactly_what_settings_reads() -> None:
    read = variables_settings_reads()
    documented = documented_settings()
    assert len(read) > 20, f"settings.py readers not recognised: {sorted(read)}"
    assert sorted(documented) == sorted(read), (
        f"undocumented: {sorted(set(read) - set(documented))}; "
        f"documented but not read: {sorted(set(documented) - set(read))}"
    )
    wrong = {
        name: (documented[name], expected)
        for name, default in read.items()
        if (expected := rendered_default(default)) and expected not in documented[name]
    }
    assert not wrong, f"documented defaults differ from settings.py (docs, code): {wrong}"


# --- code samples ----------------------------------------------------------------------


def test_every_python_sample_compiles_and_the_definitions_run(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = [block for block in all_blocks() if block.language == "python"]
    assert samples, "no Python samples found"
    monkeypatch.syspath_prepend(str(CLIENT_PATH))
    for block in samples:
        tree = compile(block.code, block.where(), "exec", ast.PyCF_ONLY_AST)
        definitions_only = all(
            isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef)
            or (isinstance(node, ast.Assign) and _is_literal(node.value))
            for node in tree.body
        )
        if definitions_only and block.marker != "live":
            exec(compile(tree, block.where(), "exec"), {"__name__": "docs_sample"})


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def test_every_marked_block_is_one_the_tests_run() -> None:
    markers = {(block.where(), block.marker, block.language) for block in all_blocks() if block.marker}
    known = {("quickstart", "bash"), ("live", "python")}
    assert markers, "no marked samples: the quick start is not tested"
    assert {(marker, language) for _, marker, language in markers} <= known, markers


def live_script(blocks: list[Block], base_url: str) -> str:
    """The blocks as one script, aimed at the test server instead of localhost:8080."""
    script = "".join(block.code for block in blocks)
    return script.replace("http://localhost:8080", base_url).replace("localhost:8080", base_url)


def json_documents(text: str) -> list[dict[str, object]]:
    """Every JSON object in ``text``, written back to back or on separate lines."""
    decoder = json.JSONDecoder()
    documents, position = [], 0
    while (position := _skip_space(text, position)) < len(text):
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
    return documents


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", QUICKSTART_PAGES, ids=lambda page: page.name)
def test_quick_start_pushes_a_task_from_enqueue_to_ack(page: Path, live_stack: LiveStack) -> None:
    blocks = [block for block in code_blocks(page) if block.marker == "quickstart"]
    assert blocks, f"{page.name} has no <!-- docs-test: quickstart --> block"
    _, key = create_key("docs-quickstart", "admin")
    base_url = live_stack.start_api()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", live_script(blocks, base_url)],
        env={**os.environ, "KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{live_stack.output()}"
    task = json_documents(done.stdout)[-1]  # curl prints each answer without a newline
    assert task["status"] == "done", task
    assert [row["to_status"] for row in task["history"]] == ["pending", "claimed", "done"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_live_python_samples_run_against_a_server(live_stack: LiveStack) -> None:
    blocks = [block for block in all_blocks() if block.marker == "live"]
    if not blocks:
        pytest.skip("no Python sample is marked live")
    _, key = create_key("docs-live", "admin")
    base_url = live_stack.start_api()
    QueueFactory(name="email_jobs")  # the samples' queue, as the quick start creates it
    for block in blocks:
        prelude = "import os\napi_key = os.environ['TASKFORGE_API_KEY']\n"
        done = subprocess.run(
            [sys.executable, "-c", prelude + live_script([block], base_url)],
            env={**os.environ, "TASKFORGE_API_KEY": key, "PYTHONPATH": str(CLIENT_PATH)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, f"{block.where()}:\n{done.stdout}{done.stderr}\n{live_stack.output()}"
