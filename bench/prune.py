"""The watchdog's prune, on cue, for CAP's metered prune stage.

Run with the project's interpreter against the bench database:
``python -m bench.prune``. It starts Django and opens its connection, prints
``ready``, waits for a line on standard input, then calls
``queues.lifecycle.prune_finished`` with the watchdog's batch size until a
batch comes back empty (exactly what ``run_watchdog`` does when it finds a
full batch), and prints how many tasks it deleted. Starting Django is done
before the cue, so the metered window holds the prune alone.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")
    import django

    django.setup()
    from django.db import connection

    from queues import lifecycle
    from queues.loops.watchdog import PRUNE_BATCH

    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    pruned = 0
    while batch := lifecycle.prune_finished(PRUNE_BATCH):
        pruned += batch
    print(pruned, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
