"""Dispatch: which tasks a claim gets, and the Redis tier that proposes them.

Postgres decides every claim; Redis only proposes candidates, meters
rate-limited queues and rings doorbells. Everything written to Redis after a
Postgres write happens after the commit and is re-derived by the loops
(``queues.loops``), so a crash or a flush in between costs at most a tick.

* ``announce``: after the lifecycle's commit, ready tasks go into their lane
  and the doorbell rings (the lifecycle imports this module only, never the
  reverse).
* ``outage``: the memory of a Redis error, so every path goes straight to
  Postgres for a moment instead of timing out.
* ``claiming``: one claim attempt, never waiting: candidates from the lanes
  confirmed by the lifecycle, Postgres' own scan as the fallback, rate limits
  held throughout.
* ``lanes``: the per-queue priority lanes and scheduled sets in Redis.
* ``ratelimit``: per-queue token buckets shared by every API process.
* ``doorbell``: the publish/subscribe bell that wakes long-polling claimers.

A claim that finds nothing and may wait does so at the HTTP edge
(``workers.longpoll``), between claim attempts, on this package's doorbell.

This module imports nothing, so that importing one part (the lifecycle
imports ``announce``) never loads the others.
"""
