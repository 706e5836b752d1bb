"""The service page's chart of its load over time (``templates/partials/chart.html`` draws it): replicas
ready and desired, requests per second and latency p95, one panel each, from the control loop's samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serving.models import ServiceSample


def load_chart(samples: Sequence[ServiceSample]) -> dict[str, Any]:
    if not samples:
        return {"data": [], "layout": {}}
    at = [s.at.isoformat() for s in samples]

    def line(name: str, values: list[Any], axis: str, **style: Any) -> dict[str, Any]:
        return {"type": "scatter", "mode": "lines", "name": name, "x": at, "y": values, "yaxis": axis, **style}

    data = [
        line("replicas ready", [s.replicas_ready for s in samples], "y", line={"shape": "hv"}),
        line("replicas desired", [s.replicas_desired for s in samples], "y", line={"shape": "hv", "dash": "dot"}),
        line("requests/s", [s.rps for s in samples], "y2"),
        line("p95 latency (ms)", [s.p95_ms for s in samples], "y3"),
    ]
    layout = {
        "grid": {"rows": 3, "columns": 1, "pattern": "coupled"},
        "xaxis": {"type": "date", "automargin": True},
        "yaxis": {"title": {"text": "replicas"}, "rangemode": "tozero", "automargin": True, "domain": [0.7, 1]},
        "yaxis2": {"title": {"text": "req/s"}, "rangemode": "tozero", "automargin": True, "domain": [0.36, 0.64]},
        "yaxis3": {"title": {"text": "p95 ms"}, "rangemode": "tozero", "automargin": True, "domain": [0, 0.3]},
        "height": 480,
    }
    return {"data": data, "layout": layout}
