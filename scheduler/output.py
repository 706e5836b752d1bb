"""The job page's output panel (``job_output`` in ``scheduler/web/views.py``): the last lines of a worker's
output, read from the job's cluster, paged back ("earlier lines") and forward ("from the start", "next
lines"), and followed while the job runs without reloading the page (docs/jobs.md, "A job's output").

The panel (``job_output``) is one htmx part, swapped whole when a worker is picked or a page asked for. While
the job is active and the panel shows the output's end, it holds a follower: a small part that polls every
``FOLLOW_SECONDS`` (only while the tab is visible) with the offset the cluster gave, and is swapped for the
new lines and a follower with the next offset; once the attempt's output is complete it is swapped for the
last lines alone and following stops. A newer attempt (a retry, a preempted job placed again) reloads the
panel on its output. Before the job is handed to a cluster the panel polls itself until there is output.

The output is read as the API reads it (``placement.logs``): another team's job is a 404, what the cluster
says is shown in the panel in its words, a bad parameter is a 400 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import QueryDict

from clusters.backends.base import LOG_TAIL_MAX, BackendError, LogChunk
from clusters.secrets import CredentialsError
from common import params
from scheduler.models import Attempt, Job
from scheduler.placement import logs

#: Lines shown at first, and how many more each "earlier lines" asks for (doubling, up to the API's most).
TAIL = 200
#: Bytes read per page: enough for the lines above unless they are very long.
LIMIT = 256 * 1024
FOLLOW_SECONDS = 3
#: Most workers offered in the picker (a larger gang is read by typing ``?worker=N``, or with ``qm logs``).
PICKER_MAX = 256


@dataclass
class Panel:
    job: Job
    attempt: Attempt | None
    worker: str
    workers: list[tuple[str, str]]
    text: str = ""
    next_offset: str = ""
    more: bool = False
    complete: bool = False
    error: str = ""
    origin: str = ""
    #: The lines asked for from the end (0 when a page from an offset or from the start is shown).
    tail: int = 0
    #: Where "earlier lines" goes: the larger tail to ask for; 0 when there is none to ask for.
    earlier: int = 0
    #: The last lines shown are the whole output.
    at_start: bool = False
    #: The query of "next lines" (a page from the start or an offset that has more); "" when none.
    next_query: str = ""
    follow: bool = False
    #: The panel polls itself (nothing handed to a cluster yet, the job still active).
    waiting: bool = False

    @property
    def lines(self) -> int:
        return self.text.count("\n") + (1 if self.text and not self.text.endswith("\n") else 0)

    def query(self, **extra: Any) -> str:
        """The panel's query for this worker and attempt, with ``extra``."""
        base = {"worker": self.worker, "attempt": self.attempt.number if self.attempt else ""}
        return urlencode({k: v for k, v in {**base, **extra}.items() if v not in ("", None)})

    @property
    def earlier_query(self) -> str:
        return self.query(tail=self.earlier)

    @property
    def start_query(self) -> str:
        return self.query(start=1)

    @property
    def last_query(self) -> str:
        return self.query()

    @property
    def follow_query(self) -> str:
        return self.query(offset=self.next_offset, follow=1)


def workers_of(job: Job) -> list[tuple[str, str]]:
    """(value, label) of each output the picker offers: a Ray job's entrypoint and head, else each worker."""
    if job.kind == Job.Kind.RAY:
        return [("", "entrypoint"), ("head", "head")]
    if job.workers <= 1:
        return [("", "worker 0")]
    return [(str(i), f"worker {i}") for i in range(min(job.workers, PICKER_MAX))]


def ask(query: QueryDict) -> dict[str, Any]:
    """The query string's worker, offset, tail, start, attempt and follow; ``BadParameter`` naming a bad one."""
    worker = query.get("worker", "").strip()
    if worker and not logs.WORKER.fullmatch(worker):
        raise params.BadParameter("worker", "A worker's index (0, 1, ...) or name (head, submitter).")
    offset = query.get("offset", "").strip()
    if offset and not logs.OFFSET.fullmatch(offset):
        raise params.BadParameter("offset", "The offset of an earlier page.")
    tail = params.optional_integer(query.get("tail") or None, "tail", low=1, high=LOG_TAIL_MAX)
    if offset and tail is not None:
        raise params.BadParameter("tail", "Give tail or offset, not both.")
    attempt = params.optional_integer(query.get("attempt") or None, "attempt", low=1, high=params.MAX_ID)
    return {
        "worker": worker,
        "offset": offset,
        "tail": tail,
        "start": query.get("start") == "1",
        "attempt": attempt,
        "follow": query.get("follow") == "1",
    }


def _read(panel: Panel, *, offset: str, tail: int | None) -> LogChunk | None:
    """A page of the panel's attempt and worker; None, with the cluster's words in ``panel.error``, if it fails."""
    assert panel.attempt is not None
    try:
        return logs.read(panel.attempt, panel.worker, offset=offset, tail=tail, limit=LIMIT)
    except (BackendError, CredentialsError) as error:
        panel.error = f"{panel.attempt.cluster.name}: {error or type(error).__name__}"
        return None


def build(job: Job, ask: dict[str, Any]) -> Panel | None:
    """The panel for ``ask`` (``ask``); None when it names an attempt the job does not have."""
    attempt = logs.attempt_of(job, ask["attempt"])
    if attempt is None and ask["attempt"] is not None:
        return None
    panel = Panel(job, attempt, ask["worker"], workers_of(job), next_offset=ask["offset"])
    # A newer attempt not yet handed to a cluster (a retry, a preempted job placed again): poll until it is.
    newer_coming = job.is_active and attempt is not None and ask["attempt"] is None and job.attempt > attempt.number
    if attempt is None or not attempt.backend_id:  # not handed to a cluster (yet): nothing to read
        panel.complete = not job.is_active
        panel.waiting = job.is_active
        return panel
    at_end = not ask["offset"] and not ask["start"]
    tail = (ask["tail"] or TAIL) if at_end else None
    chunk = _read(panel, offset=ask["offset"], tail=tail)
    if chunk is None:
        panel.waiting = job.is_active  # asked again while it runs: a cluster that did not answer may next time
        return panel
    panel.text, panel.next_offset, panel.more = chunk.text, chunk.next_offset, chunk.more
    panel.complete, panel.origin = chunk.complete, chunk.source
    following = not chunk.complete and (job.is_active or chunk.more)
    if tail is not None:
        panel.tail = tail
        # Fewer lines than asked: the output's start, unless the page's bytes ran out first (long lines), when
        # only paging from the start reaches further back.
        cut = len(chunk.text.encode()) > LIMIT * 3 // 4
        panel.at_start = panel.lines < tail and not cut
        panel.earlier = min(2 * tail, LOG_TAIL_MAX) if panel.lines >= tail and tail < LOG_TAIL_MAX and not cut else 0
        panel.follow = following
    elif chunk.more:
        panel.next_query = panel.query(offset=chunk.next_offset)
    else:
        panel.follow = following  # a page that reached the end of a running job's output follows from there
    panel.waiting = newer_coming and not panel.follow
    return panel


def follow_step(job: Job, ask: dict[str, Any]) -> tuple[Panel | None, bool]:
    """What is new since ``ask["offset"]`` (``panel.follow``: go on following), and whether to reload the whole
    panel instead: this attempt's output has ended and the job goes on in a newer attempt."""
    panel = build(job, {**ask, "start": False, "tail": None})
    if panel is None:
        return None, False
    if panel.error:
        panel.follow = job.is_active  # try again while it runs
    newer = panel.attempt is not None and job.attempt > panel.attempt.number
    return panel, not panel.follow and job.is_active and newer
