from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "queues"

    def ready(self) -> None:
        from queues.collector import TaskMetricsCollector
        from taskforge import prometheus

        prometheus.register(TaskMetricsCollector())
