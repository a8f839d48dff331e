"""How every TaskForge API process is served (make run, Docker, Kubernetes).

Outside a container the command line comes from taskforge/dev/launcher.py
(``api_server``), which sets HOST, PORT and WEB_CONCURRENCY for this file.

One ASGI app serves the API, the admin, /metrics and the SSE stream; sync
views run in threads, and long polls and streams do not pin a worker.
"""

import os

bind = f"{os.environ.get('HOST', '0.0.0.0')}:{os.environ.get('PORT', '8080')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "taskforge.http.server.Worker"  # uvicorn's, writing each answer in one piece
graceful_timeout = 10
timeout = 60
keepalive = 30
control_socket_disable = True
accesslog = None  # TaskForge logs each request itself, as JSON, with its request id


# Worker processes share one metrics directory, so a scrape answered by any of
# them reports the request metrics of all (see taskforge/ops/prometheus_multiprocess.py).
def on_starting(server):
    from taskforge.ops import prometheus_multiprocess

    prometheus_multiprocess.on_starting(server)


def child_exit(server, worker):
    from taskforge.ops import prometheus_multiprocess

    prometheus_multiprocess.child_exit(server, worker)


def on_exit(server):
    from taskforge.ops import prometheus_multiprocess

    prometheus_multiprocess.on_exit(server)
