"""The data plane's reads and writes of the portal's state, all synchronous Django, run in its worker threads:
the routing table, whether a token may call a service, the counts it adds to the service's load, and the
demand of a service at zero replicas.

Who may call a service is decided as the portal decides it: the token as the API takes it
(``tenancy.authentication.usable_token``), the service through the one scoping path
(``Service.objects.for_user``), a service account's scope by ``tenancy.scopes.allows``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from django import db

from common import outbound
from serving import load
from serving.dataplane.table import Key, Route, Upstream
from serving.models import Replica, Service
from tenancy import scopes
from tenancy.authentication import usable_token
from tenancy.models import ServiceAccount
from tenancy.scoping import Action

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """Whether a token may call a service: ``status`` 0 when it may, else the answer's status and why."""

    status: int
    detail: str = ""


ALLOWED = Verdict(0)
INVALID = Verdict(401, "Invalid, expired or revoked token.")


def table() -> dict[Key, Route]:
    """Every service by its organization, team and name, with its ready replicas (draining ones get nothing
    new; an address the outbound policy for replicas refuses is left out)."""
    db.close_old_connections()
    policy = outbound.for_replicas()
    upstreams: dict[int, list[Upstream]] = defaultdict(list)
    ready = (
        Replica.objects.filter(state=Replica.State.READY)
        .exclude(url="")
        .order_by("pk")
        .values_list("pk", "service_id", "url", "revision__number")
    )
    for replica, service, url, revision in ready:
        try:
            policy.check(url)
        except outbound.Refused as refused:
            log.warning("replica %s of service %s: its address is refused: %s", replica, service, refused)
            continue
        upstreams[service].append(Upstream(replica, url, revision))
    services = Service.objects.values_list(
        "pk", "team__organization__slug", "team__slug", "name", "public", "state", "max_inflight", "max_rps"
    )
    return {
        (org, team, name): Route(pk, name, public, state == Service.State.STOPPED, tuple(upstreams[pk]), inflight, rps)
        for pk, org, team, name, public, state, inflight, rps in services
    }


def authorize(raw: str, service: int | None, method: str) -> Verdict:
    """Whether the API token ``raw`` may ``method`` service ``service`` (None: no such service, only the token
    is checked)."""
    db.close_old_connections()
    token = usable_token(raw)
    if token is None:
        return INVALID
    if service is None:
        return ALLOWED
    account: ServiceAccount | None = getattr(token.user, "service_account", None)
    if account is not None and not scopes.allows(account.scope, scopes.SERVE_ENDPOINT, method):
        label = ServiceAccount.Scope(account.scope).label.lower()
        return Verdict(403, f"This service account's token is scoped {label!r}: it may not {method} a service.")
    if not Service.objects.for_user(token.user, Action.VIEW).filter(pk=service).exists():
        return Verdict(404, "")
    return ALLOWED


def flush(counts: Mapping[str, int]) -> None:
    """Add what the data plane counted to the services' load (``serving/load.py``)."""
    load.add(counts)


def demand(service: int) -> None:
    """A request waits at a service with no ready replica: the control loop is asked to start one."""
    load.record_demand(service)


def close() -> None:
    """The calling thread lets go of its database connection (the data plane stopping)."""
    db.connections.close_all()
