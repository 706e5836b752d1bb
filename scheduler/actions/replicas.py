"""Service replicas (``Job.Kind.SERVICE``): one replica of a service, a program serving HTTP until it is
stopped (docs/jobs.md, "Service replicas"). The ``serving`` app makes them with ``actions.submit_job`` (people
cannot: the job API and form refuse the kind) and stops them with ``actions.cancel_job``.

The program the cluster runs (``clusters/backends/slurm/service.py``; the simulated cluster runs the same
script) reports where the replica listens once its health path answers, with the attempt's job token
(``report``: ``POST /api/v1/jobs/{id}/endpoint/``); ``serving`` reads it from the running attempt
(``current_url``). An earlier or ended attempt may not report (``checkpoints.fence``), so an address is always
the current attempt's.

Where a replica may say it listens is not its to choose: each attempt is **handed a port** at its first dispatch
(``hand_out_port``: its service's own, else one of ``SERVE_REPLICA_PORTS`` no other active replica holds), and
its address must be **one of its node's** as the cluster's inventory knows them (``Node.addresses``), on that
port (``check_address``). That is checked when the program reports and again each time the control loop takes
the address for the data plane (``serving/actions/control.py``), so a replica cannot point the public endpoint at
another listener on its node, at another machine or at the portal's own.
"""

from __future__ import annotations

import logging
import random
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from clusters.models import Node
from common import outbound
from scheduler.actions.checkpoints import fence
from scheduler.actions.sessions import check_url
from scheduler.models import Attempt, Job
from scheduler.states import JobState

log = logging.getLogger(__name__)
#: Chooses among free ports: a replica that failed (a port something else holds on its node) most likely
#: gets another.
_choose = random.SystemRandom().choice


def report(job: Job, attempt_number: int, url: object) -> Attempt:
    """Record where attempt ``attempt_number`` of replica ``job`` listens. ``ValidationError`` naming the field
    for bad input (nothing stored); ``PermissionDenied`` when the attempt may not report (``fence``)."""
    if job.kind != Job.Kind.SERVICE:
        raise ValidationError({"kind": f"Job #{job.pk} is not a service replica; it reports no endpoint."})
    address = check_url(url)
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        attempt = fence(locked, attempt_number, "its endpoint")
        check_address(attempt, address)
        Attempt.objects.filter(pk=attempt.pk).update(serve_url=address)
        attempt.serve_url = address
    return attempt


def current_url(job: Job) -> str:
    """Where the running replica ``job`` listens ("" until its program has reported, and once it has ended)."""
    if job.kind != Job.Kind.SERVICE or job.state != JobState.RUNNING:
        return ""
    found = (
        Attempt.objects.filter(job=job, number=job.attempt, outcome=Attempt.Outcome.ACTIVE)
        .values_list("serve_url", flat=True)
        .first()
    )
    return found or ""


# --- where a replica may listen -------------------------------------------------------------------------------


def hand_out_port(attempt: Attempt) -> int:
    """The port attempt ``attempt`` of a service replica listens on, handed out at its first dispatch and kept for
    its retries: its service's own, else a free one of ``SERVE_REPLICA_PORTS`` (none that another active replica
    holds). 0 for other jobs."""
    job = attempt.job
    if job.kind != Job.Kind.SERVICE:
        return 0
    if attempt.serve_port:
        return attempt.serve_port
    port = job.serve_port
    if not port:
        first, last = settings.SERVE_REPLICA_PORTS
        held = set(
            Attempt.objects.filter(outcome=Attempt.Outcome.ACTIVE, serve_port__gt=0)
            .exclude(pk=attempt.pk)
            .values_list("serve_port", flat=True)
        )
        free = [p for p in range(first, last + 1) if p not in held]
        if not free:  # every port is held: one is shared (its replica fails to listen and is retried)
            log.warning("every port of SERVE_REPLICA_PORTS (%s-%s) is held by an active replica", first, last)
            free = list(range(first, last + 1))
        port = _choose(free)
    if not Attempt.objects.filter(pk=attempt.pk, serve_port=0).update(serve_port=port):
        attempt.refresh_from_db(fields=["serve_port"])  # a concurrent dispatch of it handed one out first
        return attempt.serve_port
    attempt.serve_port = port
    return port


def check_address(attempt: Attempt, url: str) -> None:
    """``ValidationError`` naming ``url`` unless ``url`` is on the port ``attempt`` was handed and its host is an
    address of a node it holds, as its cluster reports them (a name there counts with what it resolves to)."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValidationError({"url": f"{url!r} has no valid port."}) from None
    if not attempt.serve_port or port != attempt.serve_port:
        handed = f"port {attempt.serve_port}" if attempt.serve_port else "no port yet"
        raise ValidationError({"url": f"This replica was handed {handed} to listen on, not {port}."})
    nodes = list(Node.objects.filter(pk__in=attempt.assignments.values("node")).order_by("name"))
    host = outbound.plain_host(parts.hostname or "")
    known = {outbound.plain_host(a) for node in nodes for a in node.addresses if isinstance(a, str)}
    if host in known or host in _resolved(known - {host}):
        return
    names = ", ".join(n.name for n in nodes) or "none"
    said = ", ".join(sorted(known)) or f"none (cluster {attempt.cluster} reports no address for them)"
    raise ValidationError(
        {"url": f"{host} is not an address of the node(s) this replica runs on ({names}; their addresses: {said})."}
    )


def _resolved(names: set[str]) -> set[str]:
    """The addresses the DNS names among ``names`` resolve to (a name that does not resolve adds nothing)."""
    found: set[str] = set()
    for name in names:
        if outbound.literal(name) is not None:
            continue  # an address, not a name
        try:
            found.update(outbound.plain_host(a) for a in outbound.resolver(name, 0))
        except OSError:
            continue
    return found
