"""``make bench``: TaskForge's throughput and latency, measured next to Celery in the same run.

The harness runs in its own virtualenv (``.venv-bench``, from
``requirements-bench.txt``) and treats TaskForge as a black box: it starts the
production processes with the project's own interpreter, talks HTTP to them,
and checks every outcome in Postgres. See docs/performance.md.
"""
