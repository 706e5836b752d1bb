"""A job's output on Kubernetes: which pod and container hold a worker's, and pages of a pod log with a
position to go on from. Pure; no network (``backend.py`` makes the calls).

**Which pod.** A plain job's worker *i* is the pod of its Job with completion index *i*
(``batch.kubernetes.io/job-completion-index``), the newest if there were several; its container is
``worker``. A Ray job's (a KubeRay RayJob): "" or ``submitter`` is the pod of the submitter Job KubeRay creates
under the RayJob's own name to run ``ray job submit``, container ``ray-job-submitter`` — the entrypoint's output;
``head`` is the Ray head's pod (container ``ray-head``) and *i* the *i*-th Ray worker pod by name (``ray-worker``),
their own Ray logs. KubeRay deletes the head and workers when the job finishes (``shutdownAfterJobFinishes``);
the submitter's pod stays with the RayJob.

**Pages.** The pod log API (``GET .../pods/{name}/log``) has no byte offset: it reads from the container's
start, from ``sinceSeconds``/``sinceTime`` or the last ``tailLines``, cut at ``limitBytes``. So every read asks
for ``timestamps=true``, and the position handed back is the timestamp of the last line returned (the
kubelet's, to the nanosecond) and how many lines with that very timestamp were returned (a write of several
lines gets one timestamp): ``<seconds>.<nanoseconds>~<lines>``. The next read asks from a little before that
instant (``sinceSeconds``, by the portal's clock, with ``SLACK`` seconds for the clocks' skew) and drops the
lines up to the position. The timestamps are removed from the text. A line longer than a page is cut.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clusters.backends.base import BadOffset

JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
WORKER_CONTAINER = "worker"
SUBMITTER_CONTAINER = "ray-job-submitter"
#: Seconds more than the position's age that a read asks for, for the skew of the node's clock to the portal's.
SLACK = 10
POSITION = re.compile(r"([0-9]{1,12})\.([0-9]{9})~([0-9]{1,9})")
TIMESTAMP = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,9}))?(Z|[+-][0-9:]{5})")


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """An instant of a pod log (seconds since the epoch, nanoseconds) and the lines of that instant read."""

    seconds: int
    nanos: int
    lines: int = 0

    @property
    def instant(self) -> tuple[int, int]:
        return (self.seconds, self.nanos)

    def __str__(self) -> str:
        return f"{self.seconds}.{self.nanos:09d}~{self.lines}"


def position(offset: str) -> Position:
    """The position ``offset`` (one this module wrote); ``BadOffset`` for anything else."""
    found = POSITION.fullmatch(offset)
    if not found:
        raise BadOffset(f"offset {offset!r} is not a position in a pod log (one this server gave, e.g. 1764151200.5~1)")
    return Position(int(found.group(1)), int(found.group(2)), int(found.group(3)))


def since_seconds(after: Position, now: float) -> int:
    """``sinceSeconds`` that reaches back to ``after``, with ``SLACK``."""
    return max(1, math.ceil(now - after.seconds) + SLACK)


def instant(stamp: str) -> tuple[int, int] | None:
    """(seconds since the epoch, nanoseconds) of an RFC 3339 timestamp as the kubelet writes it; None if none."""
    found = TIMESTAMP.fullmatch(stamp)
    if not found:
        return None
    whole = datetime.fromisoformat(found.group(1) + found.group(3).replace("Z", "+00:00"))
    return int(whole.timestamp()), int((found.group(2) or "0").ljust(9, "0"))


@dataclass(frozen=True, slots=True)
class Page:
    text: str
    position: Position | None  # where it ends; None when it read no line
    cut: bool  # the answer was cut at limitBytes: more follows


def page(raw: bytes, asked: int, after: Position | None, limit: int) -> Page:
    """The lines of an answer read with ``timestamps=true`` and ``limitBytes=asked`` that come after ``after``,
    without their timestamps, at most ``limit`` bytes of them. A last line the byte limit cut is left for the
    next read, unless it is the only line (then it is a line longer than a page, and cut)."""
    cut = len(raw) >= asked
    lines = raw.splitlines(keepends=True)
    if cut and len(lines) > 1 and not lines[-1].endswith(b"\n"):
        lines.pop()
    kept: list[str] = []
    last = after
    run: tuple[int, int] | None = None  # the instant of the lines just read, and how many had it
    count = size = 0
    for line in lines:
        stamp, _, rest = line.partition(b" ")
        when = instant(stamp.decode("ascii", errors="replace"))
        if when is None:  # not timestamped (it is, when asked with timestamps): kept as it is
            kept.append(line.decode("utf-8", errors="replace"))
            continue
        count = count + 1 if when == run else 1
        run = when
        if after is not None and (when, count) <= (after.instant, after.lines):
            continue  # read before
        if kept and size + len(rest) > limit:  # the page is full (asked for more to get past lines read before)
            return Page("".join(kept), last, True)
        size += len(rest)
        kept.append(rest.decode("utf-8", errors="replace"))
        last = Position(*when, count)
    return Page("".join(kept), last, cut)


def job_pod(pods: list[Any], index: str) -> Any | None:
    """The pod of completion index ``index`` among a Job's pods, the newest when there are several."""
    mine = [pod for pod in pods if (pod.metadata.labels or {}).get(JOB_INDEX_LABEL) == index]
    return newest(mine)


def newest(pods: list[Any]) -> Any | None:
    """The pod created last (by name when the server gave no times)."""
    return max(
        pods, key=lambda pod: (str(pod.metadata.creation_timestamp or ""), pod.metadata.name or ""), default=None
    )


def container_state(pod: Any, container: str) -> tuple[bool, bool, bool]:
    """(started, previous, ended) of ``container`` in ``pod``: whether it has output to read now, whether
    that is its previous instance's (it restarted and waits to start again), and whether it will write no
    more (its pod ended)."""
    status = pod.status
    phase = status.phase if status is not None else ""
    ended = phase in ("Succeeded", "Failed")
    for state in (status.container_statuses or []) if status is not None else []:
        if state.name != container:
            continue
        waiting = state.state.waiting if state.state is not None else None
        if waiting is not None:
            return (state.restart_count or 0) > 0, (state.restart_count or 0) > 0, ended
        return True, False, ended
    return phase in ("Running", "Succeeded", "Failed"), False, ended
