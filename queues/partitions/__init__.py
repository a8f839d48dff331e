"""The history table by time: ``tf_task_event`` is range-partitioned by day on ``at``.

Retention drops a whole day of history (a catalog change) instead of deleting
its rows one by one (WAL, dead tuples, vacuum debt). The partitions, oldest
first, always cover every time from the oldest kept to forever:

* ``tf_task_event_before_<day>``: the table as it was before migration 0010,
  attached whole as the partition of everything before ``<day>`` (the
  conversion copies nothing); dropped once ``<day>`` is past retention;
* ``tf_task_event_<day>``: one per UTC day, created four days ahead (when
  the retention period is over 30 days, each covers several days, named
  ``tf_task_event_<first day>_<day after>``, so that there are never more
  than about 30 to plan a query over);
* ``tf_task_event_from_<day>``: open-ended, ``<day>`` to forever. Events are
  written with ``now()``, so it stays empty while the days ahead exist; it is
  there so that an insert never fails for lack of a partition, however long
  the maintenance stops.

``layout`` plans what a maintenance round does (pure, unit-tested),
``catalog`` reads the partitions Postgres has, ``maintain`` carries the plan
out; the watchdog runs a round every tick (``queues.loops.partitions``).
"""
