"""A pipeline sent from the event loop in one write, its replies read raw.

redis-py's asyncio ``Pipeline.execute`` spends on its own machinery (the
commands packed in Python, a response callback and a stack entry per
command, its bookkeeping around the connection) about as much again as the
exchange itself costs the process: a lane write and its bell (``ZADD``,
``ZREMRANGEBYRANK``, ``PUBLISH``) took 105-110 µs of CPU through it and
42-45 µs through :func:`execute` (3,000 in a row on uvloop, the local
Redis, alternating). The event loop's moves (an enqueue's announce, a
claim's lane pop, an ack's bells) still queue their commands on a redis-py
pipeline, with the same helpers as the threads (``lanes.add_ready``,
``doorbell.ring``: one definition of each command), and send it here.

What stays redis-py's: the packing (through hiredis), the connection pool
and its check of a connection taken, connecting, the health check, each
reply's read with the socket timeout, and the retries the client is
configured with (a connection error or a timeout drops the connection, and
the exchange runs again on a fresh one as often as the client's ``Retry``
says; TaskForge's event-loop client says none, so the caller sees the
error, as from redis-py's pipeline, and the next call connects afresh).
What is left out: the response callbacks, so replies come as the server
sent them (``ZPOPMIN``'s as ``[member, score]`` pairs over RESP3, redis-py's
default, or one flat list over RESP2). An error reply is raised once every
reply has been read, so the connection goes back to the pool in step.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection
from redis.connection import HiredisRespSerializer
from redis.exceptions import ResponseError

__all__ = ["execute"]

# redis-py's own packing through hiredis, as its blocking connections pack: a command name of two
# words ("CLIENT ID") goes as two arguments, an argument of the wrong type is a DataError.
_PACKER = HiredisRespSerializer()


async def execute(pipe: Pipeline) -> list[Any]:
    """Send the commands queued on ``pipe`` in one write; their raw replies, in order."""
    commands = [args for args, _options in pipe.command_stack]
    if not commands:
        return []
    packed = b"".join([chunk for args in commands for chunk in _PACKER.pack(*args)])  # type: ignore[arg-type]  # its hint is wrong: each argument, not a list
    pool = pipe.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:

        async def exchange() -> list[Any]:
            return await _exchange(connection, packed, len(commands))

        async def dropped(_error: Exception) -> None:
            await connection.disconnect()

        replies: list[Any] = await connection.retry.call_with_retry(exchange, dropped)
        return replies
    finally:
        await pool.release(connection)


async def _exchange(connection: AbstractConnection, packed: bytes, count: int) -> list[Any]:
    await connection.send_packed_command(packed)
    replies: list[Any] = []
    failed: ResponseError | None = None
    for _ in range(count):
        try:
            replies.append(await connection.read_response())
        except ResponseError as error:  # read in full: the next replies are still on the wire
            replies.append(error)
            failed = failed or error
    if failed is not None:
        raise failed
    return replies
