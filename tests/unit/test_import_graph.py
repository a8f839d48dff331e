"""Project modules depend on each other in one direction: no import cycles, no layer reaching up.

Every ``.py`` file of the project packages is parsed with ``ast`` (nothing is
imported, so this needs no database and no Redis) and every import statement
counts, including the ones inside functions: a function-level import hides a
cycle from Python's import machinery, not from the design. Importing
``a.b.c`` also runs ``a/b/__init__.py``, so an import is an edge to the module
and to each package around it that the importer is not itself inside; a
package ``__init__`` that re-exports its submodules therefore links whoever
imports anything of the package to all of them.

The Django project's wiring modules (settings, urls, asgi, wsgi) import the
apps: they are the top of the graph, and nothing imports them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Top-level import name -> its directory.
PACKAGES = {
    "taskforge": ROOT / "taskforge",
    "queues": ROOT / "queues",
    "workers": ROOT / "workers",
    "dashboard": ROOT / "dashboard",
    "taskforge_client": ROOT / "clients" / "python" / "taskforge_client",
}
WIRING = {"taskforge.settings", "taskforge.urls", "taskforge.asgi", "taskforge.wsgi"}
APPS = ("queues", "workers", "dashboard")

Graph = dict[str, set[str]]


# --- building the graph --------------------------------------------------------------------------


def discover(packages: dict[str, Path]) -> dict[str, Path]:
    """Every module of the packages (that exist), by dotted name."""
    modules: dict[str, Path] = {}
    for top, directory in packages.items():
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*.py")):
            parts = [top, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(importer: str, importer_path: Path, module: str | None, level: int) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not _is_package(importer_path):
        base.pop()  # a plain module's relative imports start at its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _imported_names(importer: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Project modules named by the file's import statements, wherever they stand."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(importer, path, node.module, node.level)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                # ``from pkg import name``: the submodule when there is one, else the package.
                yield submodule if submodule in modules else base


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def build_graph(modules: dict[str, Path]) -> Graph:
    graph: Graph = {name: set() for name in modules}
    for importer, path in modules.items():
        own = {importer, *_ancestors(importer)}
        for imported in _imported_names(importer, path, modules):
            # The longest project module the name starts with (``import a.b.c`` of an attribute path).
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if not imported or imported == importer:
                continue
            graph[importer].add(imported)
            # Importing it runs the __init__ of every package around it the importer is not inside.
            graph[importer].update(a for a in _ancestors(imported) if a in modules and a not in own)
    return graph


def project_graph() -> Graph:
    return build_graph(discover(PACKAGES))


# --- reading the graph ---------------------------------------------------------------------------


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's components (iterative: a deep import chain must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _path(graph: Graph, start: str, goal: str, within: set[str]) -> list[str]:
    """A shortest path start -> ... -> goal inside ``within`` (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & within):
                if nxt == goal:
                    path = [goal, node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if nxt not in seen:
                    seen.add(nxt)
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no path {start} -> {goal}")


def cycles(graph: Graph) -> list[list[str]]:
    """One concrete cycle per tangle of modules, as ``[a, b, ..., a]``."""
    found = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            members = set(component)
            first = component[0]
            # The shortest way back to the first module through one of its edges into the tangle.
            back = min((_path(graph, nxt, first, members) for nxt in graph[first] & members), key=len)
            found.append([first, *back])
    return found


def reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _within(names: Iterable[str], *prefixes: str) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(f"{p}.") for p in prefixes))


# --- the project's rules -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> Graph:
    return project_graph()


def test_no_import_cycles(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join("  " + " -> ".join(cycle) for cycle in found)


def test_nothing_imports_the_project_wiring(graph: Graph) -> None:
    importers = {f"{m} -> {w}" for m, edges in graph.items() for w in edges & WIRING if m not in WIRING}
    assert not importers, sorted(importers)


@pytest.mark.parametrize("layer", ["taskforge.http", "taskforge.ops", "taskforge.infra", "taskforge.env"])
def test_the_project_package_imports_no_app(graph: Graph, layer: str) -> None:
    reaching_up = {
        f"{m} -> {', '.join(_within(graph[m], *APPS))}" for m in _within(graph, layer) if _within(graph[m], *APPS)
    }
    assert not reaching_up, sorted(reaching_up)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        # The lifecycle announces after its commit; announcing never calls back into it.
        ("queues.dispatch.announce", ("queues.lifecycle", "queues.dispatch.claiming")),
        # Claiming calls the lifecycle; the lifecycle never claims through dispatch, loops or views.
        ("queues.lifecycle", ("queues.dispatch.claiming", "queues.dispatch.waiting", "queues.loops", "queues.api")),
        ("queues.lifecycle", ("workers", "dashboard")),
        # The loops drive the lifecycle and dispatch; nothing below them starts a loop.
        ("queues.dispatch", ("queues.loops", "queues.api", "workers", "dashboard")),
    ],
)
def test_dependencies_run_one_way(graph: Graph, lower: str, upper: tuple[str, ...]) -> None:
    wrong = {}
    for module in _within(graph, lower):
        reached = _within(reachable(graph, module), *upper)
        if reached:
            wrong[module] = reached
    assert not wrong, wrong


# --- the graph builder itself ----------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return discover({"app": root / "app"})


def test_function_level_imports_and_package_reexports_are_edges(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/low/__init__.py": "from app.low.claiming import claim\n",
            "app/low/announce.py": "",
            "app/low/claiming.py": "def claim():\n    from app import life\n",
            "app/life.py": "from app.low import announce\n",
        },
    )
    graph = build_graph(modules)
    assert graph["app.life"] == {"app.low.announce", "app.low"}
    assert graph["app.low.claiming"] == {"app.life"}
    assert cycles(graph) == [["app.life", "app.low", "app.low.claiming", "app.life"]]


def test_relative_imports_and_a_package_importing_its_own_submodules(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/pkg/__init__.py": "from .one import f\nfrom . import two\n",
            "app/pkg/one.py": "from .two import g\nimport app.pkg.two\n",
            "app/pkg/two.py": "from ..top import h\n",
            "app/top.py": "",
        },
    )
    graph = build_graph(modules)
    assert graph["app.pkg"] == {"app.pkg.one", "app.pkg.two"}
    assert graph["app.pkg.one"] == {"app.pkg.two"}  # its own package's __init__ is already running
    assert graph["app.pkg.two"] == {"app.top"}
    assert cycles(graph) == []
