from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"

    def ready(self) -> None:
        from taskforge.ops import prometheus
        from workers.metrics import WorkerMetricsCollector

        prometheus.register(WorkerMetricsCollector())
