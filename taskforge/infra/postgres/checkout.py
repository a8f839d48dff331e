"""Which pooled connections need the empty query before they are handed out.

Both pools (Django's on the threads, ``aio``'s on the event loop) checked
every checkout with one empty query: a round trip to the backend and back,
about a tenth of a single call's CPU and a wake-up of the backend, although
nearly every connection of a busy process went back to its pool a few
milliseconds before. A connection is now handed out without it when both
hold:

* it was handed out less than :data:`RECENT_SECONDS` ago (pgx's pool pings
  on acquire only after a second idle, for the same reason), and
* its socket has nothing to read. An idle connection in step with its
  server is owed nothing: a backend that was terminated, a server that shut
  down or crashed, a PgBouncer that went away has written its goodbye or
  closed the socket, and either makes it readable (a zero-timeout ``select``,
  about a microsecond).

Otherwise the empty query goes as before, and a dead connection found makes
its pool check all the others (``base``, ``aio``). What only the round trip
caught, and now costs one call instead: a backend terminated in the
moments before the checkout that has not acted on it yet (a few
milliseconds on a busy two-core host, when it has not been scheduled). Its
statement fails as one whose backend is terminated while it runs (503,
connection discarded, ``taskforge.http.errors.connection_lost``), which is
the same window the empty query always left between itself and the
statement. A connection that went quiet without a goodbye (a peer host
gone, a firewall that dropped it) has been idle past the second, so it still
gets the round trip.
"""

from __future__ import annotations

import select
import time
import weakref
from typing import Any

import psycopg
from psycopg import pq

#: A connection handed out less than this long ago, and quiet, goes without the empty query.
RECENT_SECONDS = 1.0

_handed_out_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def needs_ping(conn: Any) -> bool:
    """Whether ``conn`` must answer the empty query before it is handed out (see the module)."""
    last = _handed_out_at.get(conn)
    if last is None or time.monotonic() - last >= RECENT_SECONDS:
        return True
    pgconn = conn.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return True
    try:
        readable, _, _ = select.select((pgconn.socket,), (), (), 0)
    except (OSError, ValueError, psycopg.OperationalError):  # no socket any more: closed or broken
        return True
    return bool(readable)


def handed_out(conn: Any) -> None:
    """Record that ``conn`` passed its check and goes to a caller now."""
    _handed_out_at[conn] = time.monotonic()
