"""Periodic schedules: when they fire (``timing``, pure) and firing them (``firing``, Postgres).

The API (``queues.api.schedule_views``), the admin (``dashboard.admin.schedules``)
and the loop (``queues.loops.schedules``) call these; tasks are created only
through ``queues.lifecycle.enqueue``.
"""
