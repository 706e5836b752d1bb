"""Health reports from the node probes (``deploy/node_probe.py``): raw GPU readings in, health signals out.

The thresholds live here, on the server, not in the probe: every node is judged by the same rules, and
changing a rule does not mean redeploying probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from clusters.backends.base import HealthSignal
from clusters.models import HealthCheckResult, Node

#: Hotter than this (°C) fails; data-centre GPUs throttle from about 85-90 °C.
MAX_TEMPERATURE_C = 90
#: XID errors that mean the GPU or its driver needs attention (NVIDIA's XID catalogue): 48 double-bit
#: ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95
#: contained/uncontained ECC, 119/120 GSP.
CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    temperature_c: int
    ecc_uncorrected: int = 0
    xid_errors: tuple[int, ...] = ()
    nvlink_links_down: int = 0


@dataclass(frozen=True, slots=True)
class Report:
    node: str
    observed_at: datetime
    gpus: tuple[GpuReading, ...] = ()
    #: The probe could not read the GPUs at all (NVML failed to initialise, a GPU vanished).
    error: str = ""
    expected_gpus: int | None = field(default=None)


def signals(report: Report) -> list[HealthSignal]:
    """Failing signals of a report (an empty list: every check passes)."""
    at, node = report.observed_at, report.node
    failing = []
    if report.error:
        failing.append(HealthSignal(node, "nvml", False, report.error, at))
    if report.expected_gpus is not None and len(report.gpus) < report.expected_gpus:
        failing.append(
            HealthSignal(node, "gpu_count", False, f"{len(report.gpus)} of {report.expected_gpus} GPUs visible", at)
        )
    for gpu in report.gpus:
        if gpu.temperature_c > MAX_TEMPERATURE_C:
            failing.append(
                HealthSignal(node, "gpu_temperature", False, f"GPU {gpu.index} at {gpu.temperature_c} °C", at)
            )
        if gpu.ecc_uncorrected:
            message = f"GPU {gpu.index}: {gpu.ecc_uncorrected} uncorrected ECC errors"
            failing.append(HealthSignal(node, "gpu_ecc", False, message, at))
        critical = sorted(set(gpu.xid_errors) & CRITICAL_XIDS)
        if critical:
            failing.append(
                HealthSignal(node, "gpu_xid", False, f"GPU {gpu.index}: XID {', '.join(map(str, critical))}", at)
            )
        if gpu.nvlink_links_down:
            message = f"GPU {gpu.index}: {gpu.nvlink_links_down} NVLink links down"
            failing.append(HealthSignal(node, "nvlink", False, message, at))
    return failing


def record(node: Node, report: Report) -> list[HealthSignal]:
    """Store a report: its failures as health results (the next health round acts on them), a recovery
    as one passing result, and when the probe last reported."""
    failing = signals(report)
    with transaction.atomic():
        last = HealthCheckResult.objects.filter(node=node, source=HealthCheckResult.Source.PROBE).first()
        rows = [
            HealthCheckResult(
                node=node,
                name=signal.check,
                ok=False,
                message=signal.message,
                source=HealthCheckResult.Source.PROBE,
                observed_at=report.observed_at,
            )
            for signal in failing
        ]
        if not failing and last is not None and not last.ok:
            rows.append(
                HealthCheckResult(
                    node=node,
                    name="probe",
                    ok=True,
                    message="every probe check passes again",
                    source=HealthCheckResult.Source.PROBE,
                    observed_at=report.observed_at,
                )
            )
        HealthCheckResult.objects.bulk_create(rows)
        Node.objects.filter(pk=node.pk).update(probe_reported_at=report.observed_at)
    return failing
