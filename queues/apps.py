from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"

    def ready(self) -> None:
        # Connects the receivers that invalidate cached keys and queues in every process.
        from queues import apikeys  # noqa: F401
        from queues.telemetry.collector import TaskMetricsCollector
        from taskforge.ops import prometheus

        prometheus.register(TaskMetricsCollector())
