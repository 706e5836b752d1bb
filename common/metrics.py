"""The portal's Prometheus metrics of events: every counter and histogram, defined once, incremented where the
event happens (the placement loop, dispatch, the clusters' reports, sync, the API's middleware).

Every process writes them: the web workers, the Celery workers and beat. With ``PROMETHEUS_MULTIPROC_DIR``
set (the supervisor of ``manage.py demo``, the compose file and the Kubernetes manifests set it, and empty the
directory before the processes start), the official client keeps each process's values in files there and
the one ``/metrics`` endpoint adds them up (``observability/exposition.py``); without it, a process counts in
its own memory (tests, ``runserver``). The client reads the variable when it is first imported, so it must be
in the environment before the process starts, never set by the code. Each process's files are named by its
host name and pid (the client's ``process_identifier``), so that containers sharing the directory (the compose
file's web, worker and beat, each numbering its processes from 1) never write into the same file.

The state of the database (jobs by state, queue depth, nodes, the age of each cluster's sync, the meter's
lag, budget burn) is not here: collectors in the apps that own the rows compute it at scrape time.

Conventions (docs/operations.md#metrics): the ``qm_`` prefix, base units (seconds), ``_total`` on counters,
and labels from bounded sets only (states, reasons, backends, tiers, route templates; never a job, a user or a
raw path).
"""

from __future__ import annotations

import os
import socket
import time

from prometheus_client import Counter, Gauge, Histogram, values


def process_name() -> str:
    """This process among all that share the metrics directory; no underscore (the client splits file names
    on it)."""
    return f"{socket.gethostname().replace('_', '-')}-{os.getpid()}"


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # before any metric is made: they take their value class then
    values.ValueClass = values.MultiProcessValue(process_name)  # type: ignore[no-untyped-call]  # untyped there

#: Latency buckets of events measured in seconds to minutes; 60 and 300 are the SLOs' thresholds.
WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
#: Buckets of work that takes milliseconds to seconds (a cycle's phase, an API request).
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# --- the placement loop --------------------------------------------------------------------------------------
CYCLE_PHASE_SECONDS = Histogram(
    "qm_placement_cycle_phase_seconds",
    "Time one placement cycle spent in each phase (snapshot, engine, apply, pending).",
    ["phase"],
    buckets=FAST_BUCKETS,
)
CYCLES = Counter("qm_placement_cycles_total", "Placement cycles run, by result (applied or stale).", ["result"])
LOOP_LAST_RUN = Gauge(
    "qm_placement_loop_last_run_timestamp_seconds",
    "When the leading placement loop last ran (Unix time), with or without work.",
    multiprocess_mode="max",
)
ADMISSION_WAIT = Histogram(
    "qm_job_admission_wait_seconds",
    "Time from a job's submission to its first admission, by tier; within_quota is false for a job that "
    "waited for its queue's quota, a budget or a member limit (the admission SLO counts the others).",
    ["tier", "within_quota"],
    buckets=WAIT_BUCKETS,
)
START_WAIT = Histogram(
    "qm_job_start_wait_seconds",
    "Time from an attempt's admission to its job running on the cluster, by tier.",
    ["tier"],
    buckets=WAIT_BUCKETS,
)
RUNNING_WAIT = Histogram(
    "qm_job_submission_to_running_seconds",
    "Time from a job's submission to its first run, by tier.",
    ["tier"],
    buckets=WAIT_BUCKETS,
)
PREEMPTIONS = Counter(
    "qm_preemptions_total",
    "Running jobs preempted, by cause (the engine's reason, or cluster when the cluster took it back).",
    ["cause"],
)

WATCH_FLAGS = Counter(
    "qm_watch_flags_total",
    "Running jobs flagged by the watch round (scheduler/watch), by kind (straggler, hung), by what it was "
    "judged from (progress reports, utilization) and by the action the tier took (notify, restart, both).",
    ["kind", "signal", "action"],
)

# --- clusters: dispatch, runs, sync -------------------------------------------------------------------------
DISPATCH_FAILURES = Counter(
    "qm_dispatch_failures_total",
    "Submissions to a cluster that failed, by backend and class (permanent: refused; transient: retried).",
    ["backend", "failure_class"],
)
ATTEMPTS_ENDED = Counter(
    "qm_attempts_ended_total",
    "Attempts ended, by backend, outcome (succeeded, failed, lost, preempted, refused) and reason code.",
    ["backend", "outcome", "reason"],
)
SYNCS = Counter(
    "qm_cluster_syncs_total", "Cluster inventory syncs, by backend and result (ok, error).", ["backend", "result"]
)

# --- the web app and the API ----------------------------------------------------------------------------------
REQUEST_SECONDS = Histogram(
    "qm_http_request_duration_seconds",
    "Time to answer a request, by route template, method and status class (2xx, 4xx, 5xx).",
    ["route", "method", "status"],
    buckets=FAST_BUCKETS,
)


def status_class(code: int) -> str:
    """``404`` -> ``"4xx"``: the status as a label of five values."""
    return f"{code // 100}xx"


# --- the data plane (serving/dataplane/) ---------------------------------------------------------------------
DATAPLANE_REQUESTS = Histogram(
    "qm_dataplane_request_duration_seconds",
    "Time the data plane took to answer a request to a service, by status class and by who answered: a replica "
    "(relayed), or the data plane itself (refused: no token, no such service, rate or waiting limits, no replica "
    "in time, a replica that failed).",
    ["status", "by"],
    buckets=FAST_BUCKETS,
)
DATAPLANE_WAITING = Gauge(
    "qm_dataplane_waiting_requests",
    "Requests the data plane holds now, waiting for their turn or for a replica to start.",
    multiprocess_mode="livesum",
)
DATAPLANE_TABLE_LOADED = Gauge(
    "qm_dataplane_table_loaded_timestamp_seconds",
    "When the data plane last read its routing table (Unix time); it keeps serving the last one meanwhile.",
    multiprocess_mode="max",
)

# --- the other loops: serving's control loop, the notification outbox, edge rollouts --------------------------
#: The loops ``LOOP_ROUND_FINISHED`` names, with how often the beat runs each (``CELERY_BEAT_SCHEDULE``).
LOOPS = ("serving", "notifications", "edge_rollouts")
LOOP_ROUND_FINISHED = Gauge(
    "qm_loop_round_finished_timestamp_seconds",
    "When a background loop last finished a round (Unix time): serving's control loop (every 5 s), the "
    "notification outbox (every 30 s), edge rollouts' steps (every 5 s).",
    ["loop"],
    multiprocess_mode="max",
)
LOOP_ROUND_SECONDS = Histogram(
    "qm_loop_round_seconds", "Time one round of a background loop took.", ["loop"], buckets=FAST_BUCKETS
)
ELASTIC_NODES = Counter(
    "qm_elastic_nodes_total",
    "Nodes of elastic pools: granted by the cloud, refused (asks it turned down), released (idle, given back).",
    ["pool", "event"],
)
SERVING_ACTIONS = Counter(
    "qm_serving_actions_total",
    "What serving's control loop did: replicas started, stopped (drained) or cancelled, revisions promoted or "
    "rolled back.",
    ["action"],
)
NOTIFICATIONS = Counter(
    "qm_notifications_total",
    "Notifications made, and their deliveries by result: sent, retry (a failed try, another is owed), given_up.",
    ["event"],
)
EDGE_ROLLOUT_MOVES = Counter(
    "qm_edge_rollout_moves_total", "Edge rollouts' changes of state, by the state reached.", ["state"]
)


class LoopRound:
    """``with LoopRound("serving"):`` times one round of a background loop and, when it finishes, records when."""

    def __init__(self, loop: str) -> None:
        assert loop in LOOPS, loop
        self.loop = loop

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        LOOP_ROUND_SECONDS.labels(self.loop).observe(time.perf_counter() - self.started)
        if kind is None:
            LOOP_ROUND_FINISHED.labels(self.loop).set(time.time())
