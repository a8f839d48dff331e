"""Small line charts as inline SVG, drawn on the server: no JavaScript and no chart library to serve.

A series is a list of numbers or ``None``; ``None`` (no sample covered that
step) breaks the line, so a time no sampler ran shows as a gap, not as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT, PAD = 360, 72, 2


@dataclass(frozen=True)
class Series:
    label: str
    css_class: str  # tf-line-ok, tf-line-bad, tf-line-wait...
    values: Sequence[float | None]


def _scale(peak: float) -> float:
    """A round top for the y axis (1, 2, 5 x 10^n), so the label reads well."""
    if peak <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(peak))) - 1) if peak >= 1 else 1
    for factor in (1, 2, 5, 10):
        if peak <= factor * magnitude:
            return float(factor * magnitude)
    return float(10 * magnitude)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def line_chart(series: Sequence[Series], *, title: str, unit: str = "") -> SafeString:
    points = max((len(s.values) for s in series), default=0)
    present = [v for s in series for v in s.values if v is not None]
    top = _scale(max(present, default=0.0))
    step = (WIDTH - 2 * PAD) / max(points - 1, 1)
    lines = []
    for s in series:
        runs: list[list[str]] = [[]]
        for i, value in enumerate(s.values):
            if value is None:
                runs.append([])
                continue
            x = PAD + i * step
            y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(value / top, 1.0)
            runs[-1].append(f"{x:.1f},{y:.1f}")
        for run in runs:
            if len(run) == 1:  # a lone point between gaps: a dot, or it would not show
                cx, cy = run[0].split(",")
                lines.append(format_html('<circle class="{}" cx="{}" cy="{}" r="1.5"/>', s.css_class, cx, cy))
            elif run:
                lines.append(format_html('<polyline class="{}" points="{}"/>', s.css_class, " ".join(run)))
    legend = format_html_join(" ", '<span class="tf-legend {}">{}</span>', ((s.css_class, s.label) for s in series))
    return format_html(
        '<figure class="tf-chart"><figcaption>{} <span class="tf-muted">(top {}{})</span> {}</figcaption>'
        '<svg viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">{}</svg></figure>',
        title,
        _fmt(top),
        unit,
        legend,
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        title,
        SafeString("".join(lines)),
    )
