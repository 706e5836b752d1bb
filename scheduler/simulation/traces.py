"""Readers for the public GPU-cluster traces in ``../shared/traces`` (see each folder's README).

Bad files fail with ``TraceError`` naming the file, the line and what is wrong, never with a stack trace.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from scheduler.engine.model import WHOLE


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the file, the line and the problem."""


@dataclass(frozen=True, slots=True)
class PackNode:
    """A node of the Alibaba ``openb`` node list."""

    name: str
    cpu: int  # millicores
    memory: int  # MiB
    gpus: int
    model: str  # empty for a CPU-only node


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod of an Alibaba ``openb`` pod list: ``gpus`` GPUs of ``milli`` each (a share when < 1000)."""

    name: str
    cpu: int  # millicores
    memory: int  # MiB
    gpus: int
    milli: int
    models: tuple[str, ...]  # allowed GPU models; empty = any

    @property
    def gpu_demand(self) -> float:
        """GPUs requested, counting a share as its fraction."""
        return self.gpus * self.milli / WHOLE


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise TraceError(f"{path}: cannot open ({error.strerror})") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}; the header is {reader.fieldnames}")
        yield from enumerate(reader, start=2)


def _int(path: Path, line: int, row: dict[str, str], column: str, low: int = 0, high: int | None = None) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text)) if text else 0
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} must be a number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise TraceError(f"{path}:{line}: {column} must be {bounds}, not {value}")
    return value


def read_nodes(path: str | Path) -> list[PackNode]:
    """An ``openb`` node list: ``sn,cpu_milli,memory_mib,gpu,model``."""
    path = Path(path)
    nodes = []
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu")):
        gpus = _int(path, line, row, "gpu", 0, 64)
        nodes.append(
            PackNode(
                name=row["sn"].strip() or f"node-{line}",
                cpu=_int(path, line, row, "cpu_milli"),
                memory=_int(path, line, row, "memory_mib"),
                gpus=gpus,
                model=(row.get("model") or "").strip() or ("gpu" if gpus else ""),
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def read_pods(path: str | Path) -> list[Pod]:
    """An ``openb`` pod list, in any of the dataset's formats: the full one (with ``gpu_spec``, QoS and
    times) or the short one that carries only ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``."""
    path = Path(path)
    pods = []
    for line, row in _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        gpus = _int(path, line, row, "num_gpu", 0, 64)
        milli = _int(path, line, row, "gpu_milli", 0, WHOLE) if gpus else WHOLE
        if gpus and milli == 0:
            raise TraceError(f"{path}:{line}: gpu_milli must be between 1 and 1000 for a pod that asks for GPUs")
        if gpus > 1 and milli < WHOLE:
            raise TraceError(f"{path}:{line}: a GPU share (gpu_milli < 1000) needs num_gpu 1, not {gpus}")
        spec = (row.get("gpu_spec") or "").strip()
        pods.append(
            Pod(
                name=row["name"].strip() or f"pod-{line}",
                cpu=_int(path, line, row, "cpu_milli"),
                memory=_int(path, line, row, "memory_mib"),
                gpus=gpus,
                milli=milli,
                models=tuple(sorted(m.strip() for m in spec.split("|") if m.strip())),
            )
        )
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job of the Philly trace: a gang of ``gpus`` GPUs that runs ``duration`` seconds once started."""

    name: str
    submitted: float  # seconds after the first submission read
    duration: float
    gpus: int
    vc: str  # the virtual cluster (team) it was submitted to


def read_philly(path: str | Path, vc: str | None = None) -> list[TraceJob]:
    """The Philly job table (``timestamp,duration,num_gpus,gpu_time,cluster``), in submission order,
    optionally only some virtual clusters' jobs (``vc``: one name, or several separated by commas). Times are
    seconds after the first of the jobs returned."""
    path = Path(path)
    rows = []
    for line, row in _rows(path, ("timestamp", "duration", "num_gpus", "cluster")):
        stamp = (row.get("timestamp") or "").strip()
        try:
            submitted = datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise TraceError(f"{path}:{line}: timestamp must be YYYY-MM-DD HH:MM:SS, not {stamp!r}") from None
        try:
            duration = float(row["duration"])
        except ValueError:
            raise TraceError(f"{path}:{line}: duration must be a number, not {row['duration']!r}") from None
        if duration < 0:
            raise TraceError(f"{path}:{line}: duration must be at least 0, not {duration:g}")
        rows.append((submitted, line, duration, _int(path, line, row, "num_gpus", 1), row["cluster"].strip()))
    if not rows:
        raise TraceError(f"{path}: no jobs")
    wanted = None if vc is None else {name.strip() for name in vc.split(",")}
    chosen = sorted(r for r in rows if wanted is None or r[4] in wanted)
    missing = sorted((wanted or set()) - {r[4] for r in chosen})
    if not chosen or missing:
        clusters = sorted({r[4] for r in rows})
        named = ", ".join(repr(name) for name in missing) or repr(vc)
        raise TraceError(f"{path}: no jobs in virtual cluster {named}; it has {', '.join(clusters)}")
    start = chosen[0][0]
    return [TraceJob(f"job-{line}", t - start, duration, gpus, cluster) for t, line, duration, gpus, cluster in chosen]


def read_vc_nodes(path: str | Path) -> dict[str, int]:
    """Node counts per Philly virtual cluster (``vc,node num``)."""
    path = Path(path)
    counts = {}
    for line, row in _rows(path, ("vc", "node num")):
        counts[row["vc"].strip()] = _int(path, line, row, "node num", 1)
    return counts
