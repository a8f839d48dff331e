"""Readers for the deployment files, so tests can hold them to the code.

No Docker engine or cluster is needed: the Dockerfile, docker-compose.yml and
the Kubernetes manifests are parsed here, Compose's variable interpolation is
reproduced, and every command they run is checked against what the project
really provides.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
KUBERNETES_DIR = ROOT / "deploy" / "kubernetes"

# Variables that Python, pip or Django read, not TaskForge's settings.
RUNTIME_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PIP_NO_CACHE_DIR",
        "PIP_DISABLE_PIP_VERSION_CHECK",
        "DJANGO_SETTINGS_MODULE",
    }
)
SECRET_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|API_KEY|DATABASE_URL|REDIS_URL")


# --- Environment variables the code reads ---------------------------------------

_QUOTED_NAME = re.compile(r"""["']([A-Z][A-Z0-9_]*[A-Z0-9])["']""")


def variables_read_by_code() -> set[str]:
    """Every environment variable name the settings, gunicorn.conf.py or the worker's config read.

    Deliberately broad (any quoted upper-case name in those files): a deploy
    file naming a variable that appears nowhere there is a typo or dead config.
    """
    sources = [ROOT / "taskforge" / "settings.py", ROOT / "gunicorn.conf.py"]
    sources += [*(ROOT / "workers").glob("*.py"), *(ROOT / "clients" / "python" / "taskforge_client").rglob("*.py")]
    names: set[str] = set()
    for source in sources:
        names.update(_QUOTED_NAME.findall(source.read_text()))
    return names | RUNTIME_VARIABLES


# --- Dockerfile -----------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM that opened the stage


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Instructions with continuation lines joined (comments inside them dropped, as Docker does)."""
    instructions: list[Instruction] = []
    pending = ""
    stage = -1
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        line = pending + stripped
        pending = ""
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def exec_form(args: str) -> list[str] | None:
    """The argv of a JSON (exec) form CMD/ENTRYPOINT/HEALTHCHECK CMD; None for shell form."""
    args = args.strip()
    if not args.startswith("["):
        return None
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), args
    return value


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def image_env(instructions: list[Instruction]) -> dict[str, str]:
    """The ENV of the final stage, in order (``$NAME`` expanded from earlier values)."""
    env: dict[str, str] = {}
    for instruction in final_stage(instructions):
        if instruction.keyword != "ENV":
            continue
        for token in shlex.split(instruction.args):
            name, _, value = token.partition("=")
            env[name] = re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: env.get(m[1], f"${m[1]}"), value)
    return env


def dockerfile_cmd() -> list[str]:
    cmds = [i for i in final_stage(dockerfile_instructions()) if i.keyword == "CMD"]
    assert len(cmds) == 1, "the final stage needs exactly one CMD"
    argv = exec_form(cmds[0].args)
    assert argv is not None, "CMD must be exec form so the server is PID 1 and receives SIGTERM"
    return argv


def healthcheck_cmd() -> list[str]:
    checks = [i for i in final_stage(dockerfile_instructions()) if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1, "the final stage needs one HEALTHCHECK"
    _, _, command = checks[0].args.partition("CMD ")
    argv = exec_form(command)
    assert argv is not None, "HEALTHCHECK CMD must be exec form"
    return argv


def dockerignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def dockerignored(relative: str, patterns: list[str] | None = None) -> bool:
    """Whether Docker leaves ``relative`` (a path inside the context) out of the build context.

    As Docker: patterns are anchored at the context root, ``**`` spans
    directories, a match on a directory excludes what it holds, ``!`` re-includes
    and the last matching pattern wins.
    """
    parts = relative.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for raw in dockerignore_patterns() if patterns is None else patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").strip("/")
        regex = _glob_regex(pattern)
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def build_context_files() -> Iterator[str]:
    """Relative paths of the files ``docker build .`` would send."""
    patterns = dockerignore_patterns()
    reincluded = [p.lstrip("!").strip("/") for p in patterns if p.startswith("!")]
    for directory, subdirectories, files in os.walk(ROOT):
        base = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if base == "." else f"{base}/"
        # Skip excluded trees (.venv, .git, ...) unless a ! pattern reaches inside.
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if not dockerignored(prefix + name, patterns) or any(p.startswith(prefix + name + "/") for p in reincluded)
        )
        for name in sorted(files):
            if not dockerignored(prefix + name, patterns):
                yield prefix + name


# --- Compose ----------------------------------------------------------------------


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


class MissingVariable(Exception):
    pass


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``$NAME``, ``${NAME}``, ``${NAME:-default}``,
    ``${NAME-default}``, ``${NAME:?error}``, ``${NAME?error}``, ``${NAME:+alt}``, nested."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$":
            out.append(char)
            i += 1
            continue
        following = text[i + 1 : i + 2]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            depth, j = 1, i + 2
            while depth:
                assert j < len(text), f"unclosed ${{ in {text!r}"
                if text.startswith("${", j):
                    depth += 1
                    j += 1
                elif text[j] == "}":
                    depth -= 1
                j += 1
            out.append(_expand(text[i + 2 : j - 1], env))
            i = j
        else:
            match = _NAME.match(text, i + 1)
            assert match, f"a lone $ in {text!r} (write $$)"
            out.append(env.get(match[0], ""))
            i = match.end()
    return "".join(out)


def _expand(inner: str, env: Mapping[str, str]) -> str:
    match = _NAME.match(inner)
    assert match, f"bad variable ${{{inner}}}"
    name, rest = match[0], inner[match.end() :]
    value = env.get(name)
    for operator in (":-", ":?", ":+", "-", "?", "+"):
        if rest.startswith(operator):
            argument = rest[len(operator) :]
            unset = value is None or (operator.startswith(":") and value == "")
            if operator.endswith("-"):
                return interpolate(argument, env) if unset else value  # type: ignore[return-value]
            if operator.endswith("?"):
                if unset:
                    raise MissingVariable(f"{name}: {interpolate(argument, env)}")
                return value  # type: ignore[return-value]
            return "" if unset else interpolate(argument, env)
    assert rest == "", f"unknown operator in ${{{inner}}}"
    return value or ""


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    return node


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def referenced_variables(node: Any) -> set[str]:
    """Names of ``${NAME...}`` references anywhere in a Compose tree (keys included)."""
    if isinstance(node, str):
        return set(_REFERENCE.findall(node.replace("$$", "")))
    if isinstance(node, list):
        return set().union(*(referenced_variables(item) for item in node)) if node else set()
    if isinstance(node, dict):
        found: set[str] = set()
        for key, value in node.items():
            found |= referenced_variables(key) | referenced_variables(value)
        return found
    return set()


def read_env_file(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def taskforge_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the TaskForge image (built from this repository)."""
    return {name: service for name, service in compose["services"].items() if "build" in service}


def duration_seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", value):
        total += float(amount) * units[unit]
    assert total, f"not a duration: {value!r}"
    return total


# --- Kubernetes -------------------------------------------------------------------


def kubernetes_documents() -> list[tuple[Path, dict[str, Any]]]:
    documents = []
    for path in sorted(KUBERNETES_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") != "Kustomization":
                documents.append((path, document))
    return documents


def kubernetes_by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in kubernetes_documents() if doc["kind"] == kind}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec.get("initContainers", [])) + list(spec["containers"])


# --- Commands -----------------------------------------------------------------------


def command_problems(argv: list[str]) -> list[str]:
    """Why ``argv`` would not run in the TaskForge image (empty when it would)."""
    if not argv:
        return ["empty command"]
    program = argv[0]
    if program in ("sh", "/bin/sh") and argv[1:2] == ["-c"]:
        problems = []
        for part in argv[2].split("&&"):
            words = shlex.split(part)
            if ">" in words:  # output redirection: not part of the command
                words = words[: words.index(">")]
            if words and words[0] != "echo":
                problems += command_problems(words)
        return problems
    if program == "gunicorn":
        module, _, attribute = argv[1].partition(":")
        if importlib.util.find_spec(module) is None:
            return [f"gunicorn app module {module!r} does not exist"]
        if not hasattr(importlib.import_module(module), attribute):
            return [f"{module} has no {attribute!r}"]
        return []
    if program not in ("python", "python3"):
        return [f"unknown program {program!r}"]
    if argv[1] == "manage.py":
        return _management_command_problems(argv[2], argv[3:])
    if argv[1] == "-m":
        return _module_problems(argv[2], argv[3:])
    if argv[1] == "-c":
        return []
    return [f"python {argv[1]!r}: expected manage.py, -m or -c"]


def _management_command_problems(name: str, args: list[str]) -> list[str]:
    commands = get_commands()
    if name not in commands:
        return [f"manage.py {name}: no such management command"]
    command = load_command_class(commands[name], name)
    parser = command.create_parser("manage.py", name)
    try:
        # Placeholders for values the shell fills in ("$VAR") parse like any string.
        parser.parse_args(args)
    except (SystemExit, Exception) as exc:
        return [f"manage.py {name} {' '.join(args)}: {exc}"]
    return []


def _module_problems(module: str, args: list[str]) -> list[str]:
    if importlib.util.find_spec(module) is None:
        return [f"python -m {module}: no such module"]
    if importlib.util.find_spec(f"{module}.__main__") is None and module != "gunicorn":
        return [f"python -m {module}: the package has no __main__"]
    if module == "workers":
        from workers.runner import ConfigError, load_config

        try:
            config = load_config(args, environ={"TASKFORGE_API_KEY": "tf_" + "x" * 40})
        except (SystemExit, ConfigError) as exc:
            return [f"python -m workers {' '.join(args)}: {exc}"]
        if config.handler:
            handler_module, _, function = config.handler.partition(":")
            if not callable(getattr(importlib.import_module(handler_module), function, None)):
                return [f"--handler {config.handler}: no such function"]
    return []


def ensure_admin_options(shell_command: str, env: dict[str, str]) -> dict[str, object]:
    """The options ``ensure_admin`` gets from a migrate container's ``sh -c`` command, as its own
    parser reads them after the shell has expanded ``env``."""
    import subprocess

    from django.core.management import load_command_class

    step = next(part for part in shell_command.split("&&") if "ensure_admin" in part)
    words = step.split(">")[0].replace("$$", "$")  # compose writes $$ for the container's $
    listed = subprocess.run(
        ["sh", "-c", f'for word in {words}; do printf "%s\\0" "$word"; done'],
        env=env,
        capture_output=True,
        check=True,
    ).stdout.decode()
    argv = listed.split("\0")[:-1]
    command = load_command_class("queues", "ensure_admin")
    options = command.create_parser("manage.py", "ensure_admin").parse_args(argv[argv.index("ensure_admin") + 1 :])
    return vars(options)
