"""Reading /metrics the way Prometheus does (prometheus_client's own parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def family(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (sample_name, labels), v in samples.items() if sample_name == name}
