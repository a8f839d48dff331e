"""The lifecycle's named SQL statements: each one plans against the real schema, none is patched at run time.

Every entry of ``queues.lifecycle.statements.ALL`` is EXPLAINed (plain EXPLAIN:
planned, never run) on the test database, so a statement that no longer
parses, or names a column a migration dropped, fails here rather than on the
first request that happens to take that path. The source checks keep the
property the statements module exists for: callers pick a ready string, and
nothing assembles SQL when a move runs.
"""

from __future__ import annotations

import ast
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection
from psycopg.types.json import Jsonb

from queues.lifecycle import claim_statements, statements

LIFECYCLE = Path(statements.__file__).resolve().parent

# What SQL looks like in this code base (upper-case keywords), as opposed to
# the error messages and event details the moves build.
SQL_TEXT = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|WITH \w+ AS)\b")

# One value per parameter name, typed as the lifecycle passes it. Every
# statement takes its parameters by name from this one dict (psycopg ignores
# the names a statement does not use); a statement with a new parameter fails
# with a KeyError until it is added here.
TASK = uuid.uuid4()
QUEUE = uuid.uuid4()
PARAMS = {
    # enqueue
    "ids": [TASK],
    "payloads": [Jsonb({"to": "x"})],
    "priorities": [5],
    "scheduled": [datetime(2030, 1, 1, tzinfo=UTC)],
    "keys": ["key-1"],
    "retries": [3],
    "prints": ["f" * 64],
    "ords": [0],
    "kinds": ["emails.send"],
    "timeouts": [60],
    "queue_max_retries": 3,
    "queue_timeout": None,
    # claim and lease moves
    "queue_id": QUEUE,
    "queue_ids": [QUEUE, uuid.uuid4()],
    "task_ids": [TASK],
    "scan_queue_id": QUEUE,
    "scan_queue_ids": [QUEUE, uuid.uuid4()],
    "task_id": TASK,
    "limit": 50,
    "worker_id": "worker-1",
    "lease_token": "t" * 32,
    "lease_seconds": 30,
    "progress": Jsonb({"done": 3, "of": 10}),
    "tokens": ["t" * 32],
    "results": [Jsonb({"ok": True})],
    "result": Jsonb({"ok": True}),
    # failures
    "outcomes": ["retry"],
    "delays_ms": [1000],
    "errors": ["boom"],
    "released": [False],
    "event_worker": "worker-1",
    "outcome": "retry",
    "delay_ms": 1000,
    "error": "boom",
    "release": False,
    "attempts": 1,
    "max_retries": 3,
    "cancel_requested": False,
    # operators and loops
    "horizon": 0.5,
    "detail": "replayed",
    "days": 7,
    "event_kind": "transition",
}


def _explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (COSTS OFF) {sql}", PARAMS)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(statements.ALL))
def test_every_named_statement_plans_against_the_schema(name: str) -> None:
    assert _explain(statements.ALL[name])


def test_the_registry_holds_every_statement_filled_in() -> None:
    assert {
        "CLAIM_FROM_ONE_QUEUE",
        "CLAIM_FROM_QUEUES",
        "CLAIM_BY_IDS_FROM_ONE_QUEUE",
        "CLAIM_BY_IDS_FROM_QUEUES",
        "CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE",
        "CLAIM_BY_IDS_TOPPED_UP_FROM_QUEUES",
        "CLAIM_BY_ONE_ID_FROM_ONE_QUEUE",
        "CLAIM_BY_ONE_ID_TOPPED_UP_FROM_ONE_QUEUE",
    } <= set(statements.ALL)
    for name, sql in statements.ALL.items():
        assert SQL_TEXT.search(sql), name
        assert "{" not in sql and "}" not in sql, f"{name} has an unfilled hole"
    # Each variant is its own string: no two names for the same statement.
    assert len(set(statements.ALL.values())) == len(statements.ALL)


def test_each_claim_variant_uses_its_own_source_and_queue_filter() -> None:
    by_ids = "unnest(%(task_ids)s::uuid[])"
    one_queue, some_queues = "t.queue_id = %(queue_id)s", "t.queue_id = ANY(%(queue_ids)s)"
    assert by_ids not in claim_statements.CLAIM_FROM_ONE_QUEUE and one_queue in claim_statements.CLAIM_FROM_ONE_QUEUE
    assert by_ids not in claim_statements.CLAIM_FROM_QUEUES and some_queues in claim_statements.CLAIM_FROM_QUEUES
    assert (
        by_ids in claim_statements.CLAIM_BY_IDS_FROM_ONE_QUEUE
        and one_queue in claim_statements.CLAIM_BY_IDS_FROM_ONE_QUEUE
    )
    assert (
        by_ids in claim_statements.CLAIM_BY_IDS_FROM_QUEUES and some_queues in claim_statements.CLAIM_BY_IDS_FROM_QUEUES
    )
    for name, scan_filter in (
        ("CLAIM_BY_IDS_TOPPED_UP_FROM_ONE_QUEUE", "t.queue_id = %(scan_queue_id)s"),
        ("CLAIM_BY_IDS_TOPPED_UP_FROM_QUEUES", "t.queue_id = ANY(%(scan_queue_ids)s)"),
    ):
        proposed, scanned = statements.ALL[name].split("scanned AS")
        assert by_ids in proposed and some_queues in proposed, name
        assert by_ids not in scanned and scan_filter in scanned and "<> ALL(%(task_ids)s" in scanned, name
    # One proposed id, as a plain parameter of one queue: alone, or topped up from that queue.
    by_one_id = "WHERE x.id = %(task_id)s OFFSET 0"
    alone = claim_statements.CLAIM_BY_ONE_ID_FROM_ONE_QUEUE
    assert by_one_id in alone and one_queue in alone and by_ids not in alone
    proposed, scanned = claim_statements.CLAIM_BY_ONE_ID_TOPPED_UP_FROM_ONE_QUEUE.split("scanned AS")
    assert by_one_id in proposed and one_queue in proposed and by_ids not in proposed
    assert by_one_id not in scanned and "t.queue_id = %(scan_queue_id)s" in scanned and "<> ALL(%(task_ids)s" in scanned


# --- source checks: no SQL assembled when a move runs ----------------------------------------------


def _modules() -> list[Path]:
    return sorted(LIFECYCLE.glob("*.py"))


def _is_sql(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(SQL_TEXT.search(node.value))


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes (of the module, classes, functions): prose, not SQL."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _run_time_assembly(tree: ast.Module) -> list[str]:
    """Inside any function: ``.replace``/``.format`` calls, or SQL text in an f-string, ``+`` or ``%``."""
    offences = []
    functions = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    ]
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in {"replace", "format"}:
                    offences.append(f"line {node.lineno}: .{node.func.attr}(")
            elif isinstance(node, ast.JoinedStr) and any(_is_sql(part) for part in node.values):
                offences.append(f"line {node.lineno}: SQL in an f-string")
            elif (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Add | ast.Mod)
                and (_is_sql(node.left) or _is_sql(node.right))
            ):
                offences.append(f"line {node.lineno}: SQL joined with {type(node.op).__name__}")
    return offences


@pytest.mark.parametrize("path", _modules(), ids=lambda path: path.name)
def test_no_lifecycle_module_assembles_sql_at_call_time(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    assert _run_time_assembly(tree) == []


# The statements modules: statements.py, and the ones whose entries it registers in ALL.
STATEMENT_MODULES = {
    "statements.py",
    "claim_statements.py",
    "bulk_statements.py",
    "cancel_statements.py",
    "read_statements.py",
    "columns.py",  # the fragments every statement shares
}


@pytest.mark.parametrize("path", [p for p in _modules() if p.name not in STATEMENT_MODULES], ids=lambda path: path.name)
def test_sql_lives_only_in_the_statements_module(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    prose = _docstrings(tree)
    literals = [node for node in ast.walk(tree) if _is_sql(node) and id(node) not in prose]
    assert [f"line {node.lineno}" for node in literals] == []
