"""The peers measured beside TaskForge in W0 and W8, each built once per bench run.

A peer is left out, with the reason its figures then give, when its package
is missing from the bench virtualenv, when ``BENCH_PEERS=0``, or when it
could not be set up (PgQueuer's schema, say).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.celery_peer import CeleryPeer
from bench.context import Context
from bench.huey_peer import HueyPeer
from bench.peer import CountingPeer
from bench.pgqueuer_peer import PgQueuerPeer

NAMES = ("Celery", "Huey", "PgQueuer")


@dataclass
class Entry:
    name: str
    peer: CountingPeer | None
    reason: str = ""  # why ``peer`` is None


def in_run(ctx: Context) -> list[Entry]:
    """Celery, Huey and PgQueuer, built on first use and kept in ``ctx.extra``."""
    if "peers" in ctx.extra:
        return ctx.extra["peers"]
    entries = []
    for name, kind in zip(NAMES, (CeleryPeer, HueyPeer, PgQueuerPeer), strict=True):
        reason = "BENCH_PEERS=0" if not ctx.cfg.peers else kind.missing()
        if reason:
            entries.append(Entry(name, None, reason))
            continue
        try:
            entries.append(Entry(name, kind(ctx)))
        except Exception as exc:  # one peer's broken setup must not hide the others
            entries.append(Entry(name, None, f"setup {failure(exc)}"))
            ctx.note("peers", f"{name} could not be set up: {exc}")
    ctx.extra["peers"] = entries
    return entries


def failure(exc: Exception) -> str:
    """A failed peer's reason for the table: the exception and its last line (the log has the rest)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"failed: {type(exc).__name__}: {lines[0] if lines else ''}" + (
        f" ... {lines[-1]}" if len(lines) > 1 else ""
    )


def measure_each[T](
    ctx: Context,
    workload: str,
    run: int,
    measure: Callable[[CountingPeer], T],
    record: Callable[[str, T], None],
    skip: Callable[[str, str], None],
) -> None:
    """``measure`` each peer of the run and ``record`` its figures by name; ``skip`` says why one has none.

    A peer left out, or failing, does not stop the others; the failures are
    raised once the workload's last run had its turn (:func:`fail_after_last_run`).
    """
    problems = []
    for entry in in_run(ctx):
        if entry.peer is None:
            skip(entry.name, entry.reason)
            if entry.reason.startswith("setup failed"):
                problems.append(f"{entry.name}: {entry.reason}")
            continue
        try:
            measured = measure(entry.peer)
        except Exception as exc:  # a broken peer must not hide the others' figures
            skip(entry.name, failure(exc))
            problems.append(f"{entry.name}: {failure(exc)}")
            continue
        record(entry.name, measured)
    fail_after_last_run(ctx, workload, run, problems)


def fail_after_last_run(ctx: Context, workload: str, run: int, problems: list[str]) -> None:
    """Raise for the peers that failed, once every run of ``workload`` had its turn.

    A peer failing in one run must neither cut TaskForge's later runs short nor
    go unnoticed: the workload is reported as failed at the end.
    """
    seen: list[str] = ctx.extra.setdefault("peer_problems", {}).setdefault(workload, [])
    seen.extend(f"run {run + 1}: {problem}" for problem in problems)
    if seen and run == ctx.cfg.runs - 1:
        raise RuntimeError(f"{workload} peers: " + "; ".join(seen))


def close_all(ctx: Context) -> None:
    """Close the connections the peers hold (PgQueuer's producer connection)."""
    for entry in ctx.extra.get("peers", []):
        close = getattr(entry.peer, "close", None)
        if close is not None:
            close()
