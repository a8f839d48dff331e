from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"

    def ready(self) -> None:
        # Connects the receivers that invalidate cached keys and queues in every process.
        from queues import apikeys, lookups  # noqa: F401
        from queues.collector import TaskMetricsCollector
        from taskforge import prometheus

        prometheus.register(TaskMetricsCollector())
