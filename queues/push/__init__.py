"""Push queues: TaskForge delivers a queue's tasks over HTTP instead of workers pulling them.

* ``secrets``: a push queue's signing secret, set, rotated, and the ones that sign now.
* ``signing``: the ``TaskForge-Signature`` scheme (HMAC-SHA256), shared with the docs' examples.
* ``targets``: which addresses a delivery may reach (no loopback, private, link-local...), checked
  on the address actually connected to.
* ``delivery``: one HTTP attempt and what came of it.
* ``outcomes``: what an attempt's result means for its task (ack, retry after, failed attempt).
* ``semaphore``: ``max_concurrent`` across every pusher process, in Redis.

The loop that claims and delivers is ``queues.loops.pusher``; the task's moves are the
lifecycle's (``ack_many``/``nack_many`` under the delivery's lease), as for any worker.
"""
