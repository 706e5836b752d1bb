"""Health reports from the node probes (``deploy/node_probe.py``): raw GPU readings in, health signals and
utilization samples out.

The thresholds live here, on the server, not in the probe: every node is judged by the same rules, and
changing a rule does not mean redeploying probes. So does the meaning of NVML's throttle-reason bits.

**Samples.** The activity readings (utilization, memory, power, clocks, throttle reasons) of a report are
folded into one ``GpuSample`` per GPU per UTC minute with one ``INSERT ... ON CONFLICT`` statement: a
second report in the same minute averages into the row (``readings`` counts them) and ORs its throttle
bits in, so the table holds at most nodes x GPUs x minutes rows however often probes report. Readings a
GPU does not support stay NULL; an old probe's report (no activity readings) writes no sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

from django.db import connection, transaction

from clusters.backends.base import HealthSignal
from clusters.models import GpuSample, HealthCheckResult, Node

#: Hotter than this (°C) fails; data-centre GPUs throttle from about 85-90 °C.
MAX_TEMPERATURE_C = 90
#: XID errors that mean the GPU or its driver needs attention (NVIDIA's XID catalogue): 48 double-bit
#: ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate, 94/95
#: contained/uncontained ECC, 119/120 GSP.
CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
#: NVML's clocks-event (throttle) reason bits (``nvmlClocksEventReason*``, formerly ``ClocksThrottleReason*``).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def throttle_names(bits: int | None) -> list[str]:
    """The names of the reasons set in an NVML bitmask (unknown bits as ``bit_N``); none for None."""
    if not bits:
        return []
    names = [name for bit, name in THROTTLE_REASONS.items() if bits & bit]
    known = sum(THROTTLE_REASONS)
    names += [f"bit_{n}" for n in range(bits.bit_length()) if bits & (1 << n) & ~known]
    return names


@dataclass(frozen=True, slots=True)
class Activity:
    """How busy one GPU was at a report; any reading may be absent (not supported, or an older probe)."""

    utilization: float | None = None
    memory_utilization: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    throttle_reasons: int | None = None

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    temperature_c: int
    ecc_uncorrected: int = 0
    xid_errors: tuple[int, ...] = ()
    nvlink_links_down: int = 0
    activity: Activity = Activity()


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


#: The averaged readings of ``GpuSample`` (the throttle bits are OR-ed, the readings counted).
AVERAGED = tuple(f.name for f in fields(Activity) if f.name != "throttle_reasons")


def _averaged(column: str) -> str:
    """SQL for a column's new value: the mean of the row's readings and the new one, where both exist."""
    old, new = f"clusters_gpusample.{column}", f"EXCLUDED.{column}"
    n = "clusters_gpusample.readings"
    return (
        f"{column} = CASE WHEN {new} IS NULL THEN {old} WHEN {old} IS NULL THEN {new} "
        f"ELSE ({old} * {n} + {new}) / ({n} + 1) END"
    )


def store_samples(node_id: int, observed_at: datetime, gpus: tuple[GpuReading, ...]) -> int:
    """Fold the GPUs' activity readings into their minute's samples (one statement); how many GPUs had some."""
    minute = observed_at.astimezone(UTC).replace(second=0, microsecond=0)
    rows = [
        (node_id, g.index, minute, 1, *(getattr(g.activity, c) for c in AVERAGED), g.activity.throttle_reasons)
        for g in gpus
        if not g.activity.empty
    ]
    if not rows:
        return 0
    columns = ("node_id", "gpu", "at", "readings", *AVERAGED, "throttle_reasons")
    placeholders = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(rows))
    updates = ", ".join(
        [
            *(_averaged(c) for c in AVERAGED),
            "throttle_reasons = COALESCE(clusters_gpusample.throttle_reasons, 0) "
            "| COALESCE(EXCLUDED.throttle_reasons, 0)",
            "readings = clusters_gpusample.readings + 1",
        ]
    )
    # Integer readings are kept as floats (averages); the table is GpuSample's (``clusters_gpusample``).
    sql = (
        f"INSERT INTO {GpuSample._meta.db_table} ({', '.join(columns)}) VALUES {placeholders} "  # noqa: S608
        f"ON CONFLICT (node_id, at, gpu) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])
    return len(rows)


def record(node: Node, report: Report) -> list[HealthSignal]:
    """Store a report: its failures as health results (the next health round acts on them), a recovery
    as one passing result, the GPUs' activity as samples, and when the probe last reported."""
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
        store_samples(node.pk, report.observed_at, report.gpus)
        Node.objects.filter(pk=node.pk).update(probe_reported_at=report.observed_at)
    return failing
