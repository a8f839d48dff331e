"""Figures: every measured value of every run, summarised as median, min and max."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (the value below which ``pct`` % of samples fall)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Figure:
    workload: str
    name: str
    unit: str
    # (">=", 1000.0) or ("<=", 50.0) or ("within", (49.0, 51.0)); None: reported, no target
    target: tuple[str, Any] | None = None
    higher_is_better: bool = True
    values: list[float] = field(default_factory=list)
    note: str = ""
    # Why a figure has no value (a peer's package is missing, a peer failed): still reported.
    not_measured: str = ""

    @property
    def reported(self) -> bool:
        return bool(self.values or self.not_measured)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def met(self) -> bool | None:
        if self.target is None or not self.values:
            return None
        op, bound = self.target
        value = self.median
        if op == ">=":
            return value >= bound
        if op == "<=":
            return value <= bound
        if op == "within":
            low, high = bound
            return low <= value <= high
        raise ValueError(op)

    def target_text(self) -> str:
        if self.target is None:
            return ""
        op, bound = self.target
        if op == "within":
            return f"{bound[0]:g}..{bound[1]:g}"
        return f"{op} {bound:,g}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "figure": self.name,
            "unit": self.unit,
            "median": _clean(self.median),
            "min": _clean(min(self.values)) if self.values else None,
            "max": _clean(max(self.values)) if self.values else None,
            "runs": [_clean(v) for v in self.values],
            "target": self.target_text() or None,
            "met": self.met(),
            "note": self.note or None,
            "not_measured": self.not_measured or None,
        }


def _clean(value: float) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), 3)


class Figures:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Figure] = {}
        # Off during the extra profiling runs: a sampled run never becomes a figure.
        self.recording = True

    def define(
        self,
        workload: str,
        name: str,
        unit: str,
        target: tuple[str, Any] | None = None,
        note: str = "",
    ) -> Figure:
        key = (workload, name)
        if key not in self.items:
            self.items[key] = Figure(workload, name, unit, target, note=note)
        return self.items[key]

    def add(self, workload: str, name: str, value: float) -> None:
        if self.recording:
            self.items[(workload, name)].values.append(value)

    def skip(self, workload: str, name: str, reason: str) -> None:
        """Report the figure as not measured, with the reason (a missing peer, a failed peer)."""
        if self.recording and not self.items[(workload, name)].not_measured:
            self.items[(workload, name)].not_measured = reason

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.items.values())
